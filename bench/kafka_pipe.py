#!/usr/bin/env python3
"""kafka -> filter/map -> kafka and kafka -> file, next to kcat piping the same topic.

    python3 bench/kafka_pipe.py [--messages N] [--runs R]

Starts a real Apache Kafka broker on 127.0.0.1 (tests/servers/kafka_cluster.py,
KRaft, one broker, its jars installed by scripts/install-deps.sh), produces N
messages to `in` (4 partitions) with build/tests/kafkatool's client, then in
each run measures:

  broker producer    kafka-producer-perf-test's ProducerPerformance (the
                     broker's own Java client, same jars): N records of 40
                     bytes, acks=all, idempotent, as fast as it can
  broker consumer    kafka-consumer-perf-test's ConsumerPerformance reading
                     `in` (its fetch rate, without the group join)

  kcat pipe          kcat -C -t in -e | kcat -P -t <fresh topic>, the same with
                     the producer idempotent, as kayak's is by default, and
                     that with each message's key kept (-K), as kayak does
  kayak k->k         kafka input -> filter + map -> kafka output, no state dir
  kayak k->k state   the same with --state-dir (checkpoint every 10 s)
  kayak k->k state exactly_once   the same with `exactly_once: true` on the output
                     and a checkpoint every second: a transaction per checkpoint,
                     its messages shown to readers at its commit
  kayak k->file      kafka input -> file output, with --state-dir

Every run is timed from the start of its processes (kayak, or kcat's two) to
the moment the last message is there: into kafka, when a read_committed
reader of the output topic sees every message (`kafkatool wait` polls the
topic's watermarks every 2 ms); into a file, when the output card counts every
message. Start-up counts for both: on the real broker a group join takes
milliseconds (no initial rebalance delay). The broker's own clients report
their rates themselves.
Prints one line per run and a table of medians with the ratio to kcat.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAYAK = os.environ.get("KAYAK_BIN", os.path.join(ROOT, "build", "kayak"))
TOOL = os.environ.get("KAYAK_KAFKATOOL", os.path.join(ROOT, "build", "tests", "kafkatool"))
sys.path.insert(0, os.path.join(ROOT, "tests", "servers"))
from kafka_cluster import JAVA, LIBS, Cluster  # noqa: E402


def wait(cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def card(url, pipeline, name):
    with urllib.request.urlopen(f"{url}/api/v1/pipelines/{pipeline}", timeout=5) as r:
        for c in json.load(r)["components"]:
            if c["name"] == name:
                return c
    return None


def kayak_args(d, bootstrap, output, state, eos=False, transforms=None, head="",
               interval_secs=None, input_extra="", src="in", group=None):
    """kayak's command line for one run in the fresh directory `d`: its
    pipelines file (kafka `src` -> `transforms` -> `output`, kafka or file)
    and server config, written there. Into kafka the output topic is
    out-<group>."""
    group = group or "b-" + uuid.uuid4().hex[:8]
    if output == "kafka":
        txn = ", exactly_once: true" if eos else ""
        out = f"{{kafka: {{brokers: '{bootstrap}', topic: out-{group}{txn}}}}}"
        if transforms is None:
            transforms = "[{filter: 'v >= 0'}, {map: {w: 'v * 2'}}]"
    else:
        out = f"{{file: {{path: {d}/out}}}}"
        transforms = "[]"
    with open(f"{d}/p.yaml", "w") as f:
        f.write(f"{head}pipelines:\n  p:\n    input: {{kafka: {{brokers: '{bootstrap}', "
                f"topics: [{src}], group: {group}, batch_size: 5000{input_extra}}}}}\n"
                f"    transforms: {transforms}\n    outputs: [{out}]\n")
    with open(f"{d}/s.yaml", "w") as f:
        # exactly_once shows messages at each commit: a checkpoint a second
        if interval_secs is None and eos:
            interval_secs = 1
        f.write("listen: 127.0.0.1:0\nlog_level: info\n" +
                (f"checkpoint: {{interval_secs: {interval_secs}}}\n" if interval_secs else ""))
    args = [KAYAK, "--config", f"{d}/p.yaml", "--server-config", f"{d}/s.yaml"]
    if state:
        args += ["--state-dir", f"{d}/state"]
    return args


def listen_url(err):
    """The admin API's address in a kayak's stderr (an open file), or None
    before it listens."""
    err.seek(0)
    for line in err:
        if "listening on http://" in line:
            return line.split("listening on ")[1].strip()
    return None


def run_kayak(work, bootstrap, n, output, state, eos=False, label="", transforms=None,
              head="", interval_secs=None, input_extra=""):
    """msg/s of one kayak run. `transforms` (YAML flow list) replaces the
    filter + map, `head` is put before `pipelines:` (buckets), and
    `interval_secs` sets the checkpoint interval (default: 1 s with
    exactly_once, the server's default otherwise); `input_extra` is added to
    the kafka input's options (", properties: {...}")."""
    d = tempfile.mkdtemp(dir=work)
    group = "b-" + uuid.uuid4().hex[:8]
    args = kayak_args(d, bootstrap, output, state, eos, transforms, head, interval_secs,
                      input_extra, group=group)
    err = open(f"{d}/stderr", "w+")
    # Into kafka, a message counts once the broker shows it to a read_committed
    # reader (for exactly_once, at the checkpoint's commit); into a file, once
    # the output card counts it.
    done = None
    if output == "kafka":
        done = subprocess.Popen([TOOL, "wait", bootstrap, f"out-{group}", str(n), "600"],
                                stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    p = subprocess.Popen(args, stderr=err, stdout=subprocess.DEVNULL)
    try:
        u = wait(lambda: listen_url(err), 30, "kayak to listen")
        if done is not None:
            first, end = watched(done, f"out-{group}", n)
            FIRSTS.setdefault(label, []).append(first - t0)
            ENDS.setdefault(label, []).append(end - t0)
            return n / (end - t0)
        wait(lambda: card(u, "p", "outputs[0]")["messages_out"] >= n, 600, "every message out")
        return n / (time.monotonic() - t0)
    finally:
        PEAKS.setdefault(label, []).append(peak_rss_mb(p.pid))
        CPUS.setdefault(label, []).append(cpu_secs(p.pid))
        p.terminate()
        p.wait(timeout=60)
        err.close()


PEAKS = {}  # run name -> kayak's peak resident MB per run
CPUS = {}  # run name -> kayak's CPU seconds (user + system) per run
# run name -> seconds from kayak's start to the first and to the last message
# seen in its output topic, per run (into kafka)
FIRSTS = {}
ENDS = {}


def cpu_secs(pid):
    """The CPU seconds `pid` used so far, user and system, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def peak_rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


LAST_TOPIC = None  # the output topic of the newest run


def watched(proc, topic, n):
    """(first, done): when `kafkatool wait` saw the first message in `topic`
    and the n-th, on the clock of time.monotonic()."""
    global LAST_TOPIC
    LAST_TOPIC = topic
    out, _ = proc.communicate(timeout=610)
    if proc.returncode != 0:
        raise SystemExit(f"{topic} never held {n} messages")
    first, done = map(float, out.split())
    return first, done


def run_kcat(bootstrap, n, idempotent=False, keys=False):
    topic = "kcat-" + uuid.uuid4().hex[:8]
    done = subprocess.Popen([TOOL, "wait", bootstrap, topic, str(n), "600"],
                            stdout=subprocess.PIPE, text=True)
    key = ["-K", "\t"] if keys else []
    t0 = time.monotonic()
    c = subprocess.Popen(["kcat", "-C", "-b", bootstrap, "-t", "in", "-e", "-q", "-o", "beginning"]
                         + key, stdout=subprocess.PIPE)
    extra = ["-X", "enable.idempotence=true"] if idempotent else []
    pr = subprocess.Popen(["kcat", "-P", "-b", bootstrap, "-t", topic] + extra + key,
                          stdin=c.stdout, stderr=subprocess.PIPE)
    c.stdout.close()
    # Timed like kayak: from the start of the processes to the last message
    # in the new topic.
    _, end = watched(done, topic, n)
    _, err = pr.communicate(timeout=60)
    c.wait(timeout=60)
    if pr.returncode != 0:
        raise SystemExit(f"kcat pipe failed: {err.decode()}")
    return n / (end - t0)


def run_perf(bootstrap, n, which):
    """The broker's own Java clients, their reported msg/s."""
    cp = os.path.join(LIBS, "*")
    if which == "producer":
        topic = "perf-" + uuid.uuid4().hex[:8]
        subprocess.run([TOOL, "create", bootstrap, f"{topic}:4"], check=True)
        out = subprocess.run(
            [JAVA, "-Xmx512m", "-cp", cp, "org.apache.kafka.tools.ProducerPerformance",
             "--topic", topic, "--num-records", str(n), "--record-size", "40",
             "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
             "acks=all", "enable.idempotence=true", "linger.ms=5"],
            capture_output=True, text=True, timeout=600, check=True).stdout
        # "N records sent, R records/sec (...)", the last line
        line = [l for l in out.splitlines() if "records sent" in l][-1]
        return float(line.split(",")[1].split()[0])
    out = subprocess.run(
        [JAVA, "-Xmx512m", "-cp", cp, "org.apache.kafka.tools.ConsumerPerformance",
         "--bootstrap-server", bootstrap, "--topic", "in", "--messages", str(n),
         "--group", "perf-" + uuid.uuid4().hex[:8]],
        capture_output=True, text=True, timeout=600, check=True).stdout
    header, row = [l for l in out.splitlines() if l.strip()][-2:]
    fields = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in row.split(","))))
    return float(fields["fetch.nMsg.sec"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not shutil.which("kcat"):
        raise SystemExit("needs kcat: apt-get install kcat")
    work = tempfile.mkdtemp(prefix="kayak-bench-kafka-")
    broker = Cluster(os.path.join(work, "kafka"), 1)
    try:
        broker.start()
        bootstrap = broker.bootstrap
        subprocess.run([TOOL, "create", bootstrap, "in:4"], check=True)
        subprocess.run([TOOL, "produce", bootstrap, "in", str(a.messages)], check=True)
        size = a.messages * 40  # kafkatool's messages are about 40 bytes
        results = {k: [] for k in ("broker producer", "broker consumer",
                                    "kcat pipe", "kcat pipe, idempotent producer",
                                    "kcat pipe, idempotent, keys kept", "kayak k->k",
                                    "kayak k->k state", "kayak k->k state exactly_once",
                                    "kayak k->file state")}
        for r in range(a.runs):
            for name in results:
                if name.startswith("broker"):
                    v = run_perf(bootstrap, a.messages, name.split()[1])
                elif name.startswith("kcat"):
                    v = run_kcat(bootstrap, a.messages, "idempotent" in name, "keys" in name)
                else:
                    v = run_kayak(work, bootstrap, a.messages,
                                  "file" if "file" in name else "kafka", "state" in name,
                                  "exactly_once" in name, name)
                results[name].append(v)
                print(f"run {r + 1} {name}: {v:,.0f} msg/s", flush=True)
        base = statistics.median(results["kcat pipe"])
        print(f"\n{a.runs} runs, {a.messages:,} messages of about 40 bytes, medians (min-max):")
        print("| pipeline | msg/s | MB/s | ratio to kcat | peak RSS MB |")
        print("|---|---|---|---|---|")
        for name, vs in results.items():
            m = statistics.median(vs)
            peak = f"{max(PEAKS[name]):.0f}" if name in PEAKS else ""
            print(f"| {name} | {m:,.0f} ({min(vs):,.0f}-{max(vs):,.0f}) | "
                  f"{m * size / a.messages / 1e6:.1f} | {m / base:.2f} | {peak} |")
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
