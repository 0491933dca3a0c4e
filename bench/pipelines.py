#!/usr/bin/env python3
"""Pipeline throughput, the cost of checkpoints, and memory, next to the machine's limits.

    python3 bench/pipelines.py [--messages N] [--runs R] [--keys-big K] [--hold-secs S]
                               [--smoke] [--with-micro] [--with-http] [--with-kafka]
                               [--parts throughput,checkpoints,memory]

Throughput (each workload R times; each round also runs the ceiling, a C
program writing the same lines with buffered fwrite, bench/fwrite_ceiling.c):

  dummy -> file                        the dummy input's ~200-byte template
  file -> filter + map -> file         N lines of ~130 bytes, 10,000 keys; next to
                                       a plain line copy of the same file
                                       (bench/line_copy.c), jq -c and mlr doing
                                       the same filter and map (when installed),
                                       and Flink's and Bytewax's jobs of files
                                       (bench/peers, when installed with
                                       scripts/install-deps.sh --bench)
  file -> rolling_window + bucket -> file, with 10,000 keys and with K keys

each with no state directory, with --state-dir at the default interval (10 s)
and at 1 s. A run is timed from the input's first message (its card) to the
output card counting N, polled every 5 ms; its peak resident memory is
VmHWM from /proc. Checkpoints (K keys in one bucket, taken on demand through
POST /api/v1/checkpoints): bytes written and duration with 100% (the first),
0%, 1% and 100% of the keys changed, the longest barrier pause of each, the
time to restore the state at start, and the time from kill -9 to the first new
output. Memory: a dummy input into a stdout output nobody reads, sampled every
second for S seconds: it stays flat while the input is held.

--with-micro, --with-http and --with-kafka also run the micro benchmarks
(build/tests/micro_bench), bench/http_ingest.sh and bench/kafka_pipe.py and put
their medians into the one table printed at the end (`make bench` runs them
all). --smoke runs everything tiny (seconds), for the test suite.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAYAK = os.environ.get("KAYAK_BIN", os.path.join(ROOT, "build", "kayak"))
TEMPLATE = ('{"seq":{{seq}},"k":"key-{{seq}}","v":42.5,"sensor":"thermo-7","site":"plant-north",'
            '"unit":"celsius","tags":["a","b","c"],"note":"a steady reading, well inside its band"}')


def wait(cond, timeout, what, interval=0.005):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise SystemExit(f"timed out waiting for {what}")


def get(url, path, method="GET"):
    req = urllib.request.Request(url + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def card(url, pipeline, name):
    for c in get(url, f"/api/v1/pipelines/{pipeline}")["components"]:
        if c["name"] == name:
            return c
    raise SystemExit(f"no card {name}")


def status_mb(pid, field):
    """A memory line of /proc/<pid>/status (VmHWM: peak resident, VmRSS: now), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb(pid):
    return status_mb(pid, "VmHWM")


def rss_mb(pid):
    return status_mb(pid, "VmRSS")


class Kayak:
    """A kayak server in its own directory; stderr goes to a file."""

    def __init__(self, work, pipelines, interval=None, state=None, stdout=subprocess.DEVNULL):
        self.dir = tempfile.mkdtemp(dir=work)
        with open(f"{self.dir}/p.yaml", "w") as f:
            f.write(pipelines)
        server = "listen: 127.0.0.1:0\nlog_level: info\n"
        if interval:
            server += f"checkpoint: {{interval_secs: {interval}}}\n"
        with open(f"{self.dir}/s.yaml", "w") as f:
            f.write(server)
        args = [KAYAK, "--config", f"{self.dir}/p.yaml", "--server-config", f"{self.dir}/s.yaml"]
        if state is not None:
            args += ["--state-dir", state]
        self.err = open(f"{self.dir}/stderr", "w+")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, stderr=self.err, stdout=stdout)
        self.url = wait(self._url, 60, "kayak to listen", 0.01)

    def log(self):
        self.err.seek(0)
        return self.err.read()

    def _url(self):
        for line in self.log().splitlines():
            if "API listening on " in line:
                return line.split("API listening on ")[1].strip()
        if self.proc.poll() is not None:
            raise SystemExit(f"kayak exited:\n{self.log()}")
        return None

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=120)
        self.err.close()


def write_data(path, n, keys, start=0, v_shift=0):
    with open(path, "a") as f:
        step = 100_000
        for lo in range(start, start + n, step):
            f.write("".join(
                f'{{"seq":{i},"k":"key-{i % keys}","v":{(i + v_shift) % 1000},"sensor":"thermo-7",'
                f'"site":"plant-north","unit":"celsius","tags":["a","b","c"],"note":"steady"}}\n'
                for i in range(lo, min(lo + step, start + n))))


def ceiling(work, n, binary):
    out = os.path.join(work, "ceiling.ndjson")
    r = subprocess.run([binary, out, str(n), TEMPLATE], capture_output=True, text=True,
                       check=True, timeout=600)
    os.unlink(out)
    return float(r.stdout.split()[0])


def line_copy(work, src, binary):
    """The plain line copy (bench/line_copy.c) of the same file, lines/s."""
    out = os.path.join(work, "copy.ndjson")
    r = subprocess.run([binary, src, out], capture_output=True, text=True, check=True, timeout=600)
    os.unlink(out)
    return float(r.stdout.split()[0])


# What a user would run instead for `filter + map` on one machine: the same
# file, the same filter and the same new field, into a file that is fsynced.
EXTERNAL = [
    ("jq -c (filter + map)", ["jq", "-c", "select(.v >= 0) | .w = .v * 2"]),
    ("mlr --ijson --ojsonl (filter + map)",
     ["mlr", "--ijson", "--ojsonl", "filter", "$v >= 0", "then", "put", "$w = $v * 2"]),
]


# The stream processors a user would pick instead that read and write files
# (bench/peers; Kafka Streams and Quix Streams read topics only): the same file,
# filter and map, timed from the start of the process to its end and the
# output's fsync, a JVM's and an interpreter's start-up included as jq's is.
PEERS = os.path.join(ROOT, "bench", "peers")
PEER_JOBS = {
    "Flink (FileSource -> FileSink, batch)": os.path.join(PEERS, "flink", "classes"),
    "Bytewax (files connectors)": os.path.join(PEERS, "bytewax", "venv"),
}


def peer_file(work, name, src, n):
    sys.path.insert(0, PEERS)
    import run as peers  # noqa: E402 (the peers' launch settings)
    out = os.path.join(work, "peer-out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = None
    if name.startswith("Flink"):
        d = os.path.join(PEERS, "flink")
        argv = [peers.JAVA, "-Xmx1g", *peers.FLINK_JVM, "-cp",
                os.path.join(d, "libs", "*") + ":" + os.path.join(d, "classes"),
                "kayak.bench.Files", src, out]
    else:
        d = os.path.join(PEERS, "bytewax")
        target = os.path.join(out, "out.ndjson")
        open(target, "w").close()  # its sink writes into a file that is there
        # One worker: a file is one partition of its source, and its sink
        # has one writer.
        argv = [os.path.join(d, "venv", "bin", "python"), "-m", "bytewax.run", "job:flow()",
                "-w", "1"]
        env = {**os.environ, "PYTHONPATH": d, "JOB": "files", "IN": src, "OUT": target}
    t0 = time.monotonic()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{name} failed: {r.stderr[-2000:]}")
    lines = 0
    for root, _, names in os.walk(out):
        for f in names:
            with open(os.path.join(root, f), "rb") as fh:
                lines += fh.read().count(b"\n")
                os.fsync(fh.fileno())
    t = time.monotonic() - t0
    shutil.rmtree(out, ignore_errors=True)
    if lines != n:
        raise SystemExit(f"{name} wrote {lines} lines of {n}")
    return n / t


def external(work, cmd, src, n):
    out = os.path.join(work, "external.ndjson")
    with open(out, "w") as f:
        t0 = time.monotonic()
        subprocess.run(cmd + [src], stdout=f, check=True, timeout=1800)
        f.flush()
        os.fsync(f.fileno())
        t = time.monotonic() - t0
    os.unlink(out)
    return n / t


def timed_run(work, pipelines, n, interval, state):
    """msg/s from the first message in to the n-th out, the peak RSS, and with a state dir
    the checkpoints committed and the longest barrier pause (µs)."""
    k = Kayak(work, pipelines, interval=interval, state=state)
    try:
        t0 = wait(lambda: card(k.url, "p", "input")["messages_in"] > 0 and time.monotonic(),
                  120, "the first message")
        t1 = wait(lambda: card(k.url, "p", "outputs[0]")["messages_out"] >= n and time.monotonic(),
                  900, "every message out")
        rss = peak_rss_mb(k.proc.pid)
        cps, pause_us = 0, 0
        if state is not None:
            regions = get(k.url, "/api/v1/checkpoints")["regions"]
            cps = sum(r["committed"] for r in regions)
            pause_us = max((r["longest_barrier_pause_us"] for r in regions), default=0)
        return n / (t1 - t0), rss, cps, pause_us
    finally:
        k.stop()
        shutil.rmtree(k.dir, ignore_errors=True)
        if state:
            shutil.rmtree(state, ignore_errors=True)


def throughput(a, work, ceiling_bin, copy_bin, rows):
    n = a.messages
    small = os.path.join(work, "data-10k.ndjson")
    big = os.path.join(work, "data-big.ndjson")
    write_data(small, n, 10_000)
    write_data(big, n, a.keys_big)
    out = lambda d: f"{{file: {{path: {d}}}}}"
    workloads = [
        ("dummy -> file",
         lambda d: f"pipelines:\n  p:\n    input: {{dummy: {{count: {n}, batch_size: 1000, "
                   f"template: '{TEMPLATE}'}}}}\n    outputs: [{out(d)}]\n"),
        ("file -> filter + map -> file",
         lambda d: f"pipelines:\n  p:\n    input: {{file: {{path: {small}}}}}\n"
                   f"    transforms: [{{filter: 'v >= 0'}}, {{map: {{w: 'v * 2'}}}}]\n"
                   f"    outputs: [{out(d)}]\n"),
    ]
    for keys, data in (("10k", small), (f"{a.keys_big // 1000}k", big)):
        workloads.append((
            f"file -> rolling_window + bucket -> file, {keys} keys",
            lambda d, data=data: (
                f"buckets:\n  sums: {{}}\npipelines:\n  p:\n    input: {{file: {{path: {data}}}}}\n"
                f"    transforms:\n      - rolling_window: {{key: k, field: v, window_messages: 10,"
                f" aggregates: [count, sum]}}\n"
                f"      - bucket: {{name: sums, key: k, op: add, field: v, as: total}}\n"
                f"    outputs: [{out(d)}]\n")))
    modes = [("", None), (", --state-dir (10 s)", 10), (", --state-dir (1 s)", 1)]
    results = {}
    ceilings = []
    copies = []
    others = {name: [] for name, cmd in EXTERNAL if shutil.which(cmd[0]) and not a.smoke}
    peer_rates = {name: [] for name, built in PEER_JOBS.items()
                  if os.path.exists(built) and not a.smoke}
    for r in range(a.runs):
        ceilings.append(ceiling(work, n, ceiling_bin))
        print(f"round {r + 1} fwrite ceiling: {ceilings[-1]:,.0f} msg/s", flush=True)
        copies.append(line_copy(work, small, copy_bin))
        print(f"round {r + 1} plain line copy: {copies[-1]:,.0f} lines/s", flush=True)
        for name, cmd in EXTERNAL:
            if name in others:
                others[name].append(external(work, cmd, small, n))
                print(f"round {r + 1} {name}: {others[name][-1]:,.0f} msg/s", flush=True)
        for name in peer_rates:
            peer_rates[name].append(peer_file(work, name, small, n))
            print(f"round {r + 1} {name}: {peer_rates[name][-1]:,.0f} msg/s", flush=True)
        for name, make in workloads:
            for suffix, interval in modes:
                d = tempfile.mkdtemp(dir=work)
                state = os.path.join(work, "state") if interval else None
                rate, rss, cps, _ = timed_run(work, make(d), n, interval, state)
                shutil.rmtree(d, ignore_errors=True)
                results.setdefault(name + suffix, []).append((rate, rss, cps))
                print(f"round {r + 1} {name}{suffix}: {rate:,.0f} msg/s, peak {rss:.0f} MB, "
                      f"{cps} checkpoints", flush=True)
    ceil = statistics.median(ceilings)
    copy = statistics.median(copies)
    rows.append(("fwrite ceiling (C, buffered)", ceilings, "msg/s", 1.0, None, ""))
    rows.append(("plain line copy (C: getline + fwrite + fsync)", copies, "msg/s", copy / ceil,
                 None, "the 10k-key file of the filter + map workload"))
    for name, rates in others.items():
        rows.append((name, rates, "msg/s", statistics.median(rates) / ceil, None,
                     "the same file, filter and map"))
    for name, rates in peer_rates.items():
        rows.append((name, rates, "msg/s", statistics.median(rates) / ceil, None,
                     "the same file, filter and map; from the process's start"))
    for name, rs in results.items():
        rates = [x[0] for x in rs]
        base = name.split(", --state-dir")[0]
        note = ""
        if "--state-dir" in name:
            plain = statistics.median(x[0] for x in results[base])
            note = f"{statistics.median(rates) / plain - 1:+.1%} vs no state dir; " \
                   f"{statistics.median(x[2] for x in rs):.0f} checkpoints"
        if name.startswith("file -> filter + map -> file"):
            m = statistics.median(rates)
            note = "; ".join(x for x in [note, f"{m / copy:.2f} of the line copy"] + [
                f"{m / statistics.median(v):.1f}x {k.split()[0]}"
                for k, v in list(others.items()) + list(peer_rates.items())] if x)
        rows.append((name, rates, "msg/s", statistics.median(rates) / ceil,
                     max(x[1] for x in rs), note))


def checkpoints(a, work, rows):
    keys = a.keys_big
    data = os.path.join(work, "ck.ndjson")
    state = os.path.join(work, "ck-state")
    write_data(data, keys, keys)
    cfg = (f"buckets:\n  b: {{}}\npipelines:\n  p:\n    input: {{file: {{path: {data}, follow: true,"
           f" poll_ms: 20}}}}\n    transforms: [{{bucket: {{name: b, key: k, op: set, field: v}}}}]\n"
           f"    outputs: [{{file: {{path: {work}/ck-out}}}}]\n")
    k = Kayak(work, cfg, interval=3600, state=state)
    total = keys

    def settle(n):
        wait(lambda: card(k.url, "p", "outputs[0]")["messages_out"] >= n, 600, f"{n} out")

    full = []  # the first checkpoint's bytes: every key in a full chunk

    def checkpoint(label):
        t0 = time.monotonic()
        reg = get(k.url, "/api/v1/checkpoints", "POST")["regions"][0]
        wall = time.monotonic() - t0
        if not full:
            full.append(reg["bytes_written"])
        share = reg["bytes_written"] / full[0]
        rows.append((f"checkpoint, {keys:,} keys, {label}", [reg["bytes_written"]], "bytes",
                     None, None, f"{share:.1%} of the first; "
                                 f"duration {reg['duration_ms']} ms (call {wall * 1000:.0f} ms); "
                                 f"longest barrier pause {reg['barrier_pause_us'] / 1000:.1f} ms"))
        print(f"checkpoint {label}: {reg['bytes_written']:,} bytes, {reg['duration_ms']} ms, "
              f"pause {reg['barrier_pause_us']} us", flush=True)

    try:
        settle(total)
        checkpoint("first (every key new)")
        checkpoint("0% changed")
        for label, n in (("1% changed", keys // 100), ("1% changed again", keys // 100),
                         ("10% changed", keys // 10), ("100% changed", keys)):
            write_data(data, n, n, start=total, v_shift=1)
            total += n
            settle(total)
            checkpoint(label)
        rows.append((f"peak memory, {keys:,}-key bucket", [peak_rss_mb(k.proc.pid)], "MB", None,
                     None, ""))
    finally:
        k.stop()
    # Restore: a savepoint was taken at the stop; the next start restores it.
    k = Kayak(work, cfg, interval=3600, state=state)
    try:
        line = wait(lambda: next((l for l in k.log().splitlines() if "state restored in" in l),
                                 None), 300, "the restore")
        ms = int(line.split("state restored in ")[1].split(" ms")[0])
        rows.append((f"restore of {keys:,} keys at start", [ms], "ms", None, None, ""))
        # kill -9 with messages after the last checkpoint: time to the first new output.
        write_data(data, 1000, 1000, start=total, v_shift=2)
        total += 1000
        settle(1000)
    finally:
        k.stop(signal.SIGKILL)
    t0 = time.monotonic()
    k = Kayak(work, cfg, interval=3600, state=state)
    try:
        wait(lambda: card(k.url, "p", "outputs[0]")["messages_out"] > 0, 300, "new output",
             0.002)
        rows.append((f"kill -9 to first new output, {keys:,} keys", [
            (time.monotonic() - t0) * 1000], "ms", None, None, "process start, restore, replay"))
    finally:
        k.stop()
        shutil.rmtree(state, ignore_errors=True)


def backpressure(a, work, rows):
    cfg = (f"pipelines:\n  p:\n    input: {{dummy: {{batch_size: 1000, template: '{TEMPLATE}'}}}}\n"
           f"    outputs: [{{stdout: {{}}}}]\n")
    k = Kayak(work, cfg, stdout=subprocess.PIPE)  # nobody reads it: the output blocks
    try:
        samples = []
        for _ in range(a.hold_secs):
            time.sleep(1)
            samples.append((rss_mb(k.proc.pid), card(k.url, "p", "input")["messages_in"]))
        first, last = samples[min(4, len(samples) - 1)], samples[-1]
        rows.append((f"memory with a blocked output, {a.hold_secs} s", [last[0]], "MB", None,
                     None, f"RSS {first[0]:.1f} MB at {min(5, len(samples))} s, {last[0]:.1f} MB "
                           f"at the end, max {max(s[0] for s in samples):.1f}; input held at "
                           f"{last[1]:,} messages (was {first[1]:,})"))
        print(f"blocked output: {[round(s[0], 1) for s in samples]}", flush=True)
    finally:
        k.proc.kill()
        k.proc.wait()


def from_script(cmd, rows, pick):
    """Runs another bench script and takes the rows of its final table."""
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    print(r.stdout[-3000:], flush=True)
    if r.returncode != 0:
        rows.append((cmd[0], [], "", None, None, "failed: " + r.stderr[-300:]))
        return
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and not cells[0].startswith(("---", "target",
                                                                                 "pipeline")):
            rows.append(pick(cells))


def micro(a, rows):
    """The Google Benchmark micro benchmarks (bench/micro), medians of 3."""
    binary = os.environ.get("KAYAK_MICRO_BENCH", os.path.join(ROOT, "build", "tests",
                                                              "micro_bench"))
    out = tempfile.mktemp(prefix="kayak-micro-", suffix=".json")
    args = [binary, f"--benchmark_out={out}", "--benchmark_out_format=json"]
    args += (["--benchmark_min_time=0.001"] if a.smoke else
             ["--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"])
    subprocess.run(args, capture_output=True, text=True, timeout=900, check=True)
    with open(out) as f:
        report = json.load(f)
    os.unlink(out)
    for b in report["benchmarks"]:
        if b.get("aggregate_name", "median") != "median":
            continue
        name = b.get("run_name", b["name"]).replace("BM_", "micro: ")
        if "items_per_second" in b:
            rows.append((name, [1e9 / b["items_per_second"]], "ns per message", None, None, ""))
        else:
            extra = f"{b['bytes'] / 1e6:.1f} MB" if "bytes" in b else ""
            rows.append((name, [b["real_time"]], b["time_unit"], None, None, extra))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keys-big", type=int, default=1_000_000)
    ap.add_argument("--hold-secs", type=int, default=60)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--with-http", action="store_true")
    ap.add_argument("--with-kafka", action="store_true")
    ap.add_argument("--with-micro", action="store_true")
    ap.add_argument("--parts", default="throughput,checkpoints,memory",
                    help="which of throughput, checkpoints, memory to run")
    a = ap.parse_args()
    if a.smoke:
        a.messages, a.runs, a.keys_big, a.hold_secs = 2000, 1, 3000, 3
    work = tempfile.mkdtemp(prefix="kayak-bench-")
    started = time.monotonic()
    rows = []
    if a.with_micro or a.smoke:
        micro(a, rows)
    try:
        ceiling_bin = os.path.join(work, "fwrite_ceiling")
        subprocess.run(["cc", "-O2", "-o", ceiling_bin,
                        os.path.join(ROOT, "bench", "fwrite_ceiling.c")], check=True)
        copy_bin = os.path.join(work, "line_copy")
        subprocess.run(["cc", "-O2", "-o", copy_bin,
                        os.path.join(ROOT, "bench", "line_copy.c")], check=True)
        parts = a.parts.split(",")
        if "throughput" in parts:
            throughput(a, work, ceiling_bin, copy_bin, rows)
        if "checkpoints" in parts:
            checkpoints(a, work, rows)
        if "memory" in parts:
            backpressure(a, work, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.with_http:
        from_script(["bench/http_ingest.sh", "3", "5", "64"], rows,
                    lambda c: ("http -> file: " + c[0], [c[1]], "posts/s", c[2],
                               float(c[6]) if len(c) > 6 and c[6] else None,
                               f"p50 {c[3]} ms, p99 {c[4]} ms"
                               + (f", {c[7]} µs CPU a post" if len(c) > 7 and c[7] else "")))
    if a.with_kafka:
        from_script([sys.executable, "bench/kafka_pipe.py", "--runs", "3"], rows,
                    lambda c: (c[0], [c[1]], "msg/s", c[3],
                               float(c[4]) if len(c) > 4 and c[4] else None, f"{c[2]} MB/s"))
    print(f"\n{a.runs} runs of {a.messages:,} messages each (~200 bytes), "
          f"{time.monotonic() - started:.0f} s in all; medians (min-max):\n")
    print("| benchmark | median (min-max) | unit | ratio to ceiling | peak RSS MB | notes |")
    print("|---|---|---|---|---|---|")
    for name, vs, unit, ratio, rss, note in rows:
        if vs and isinstance(vs[0], (int, float)):
            m = statistics.median(vs)
            v = f"{m:,.0f}" + (f" ({min(vs):,.0f}-{max(vs):,.0f})" if len(vs) > 1 else "")
        else:
            v = ", ".join(map(str, vs))
        r = f"{ratio:.2f}" if isinstance(ratio, float) else (ratio or "")
        print(f"| {name} | {v} | {unit} | {r} | {'' if rss is None else f'{rss:.0f}'} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
