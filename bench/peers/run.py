#!/usr/bin/env python3
"""kayak beside the engines a user would pick instead, on the same work, in one run.

    python3 bench/peers/run.py [--messages N] [--runs R]
    python3 bench/peers/run.py --workload windowed [--keys K] [--checkpoint-secs S] ...

Needs `scripts/install-deps.sh --bench` (kcat, the peers' jars and venvs). Starts
the real Kafka broker of the tests (tests/servers/kafka_cluster.py), produces
N messages of about 40 bytes to `in` (4 partitions, 7 keys) with
build/tests/kafkatool, then alternates, run after run, over that same topic:

  kcat pipe                 kcat -C | kcat -P with the producer idempotent: the ceiling
  kayak                     kafka input -> filter 'v >= 0' + map w = v * 2 -> kafka
  kayak exactly_once        the same with --state-dir, `exactly_once: true` and a
                            checkpoint every second
  kafka streams             the same job in Kafka Streams' DSL (bench/peers/kstreams),
                            at_least_once, as many stream threads as cores
  kafka streams exactly_once_v2   with exactly_once_v2 and a commit every second
  flink                     the same job in Flink's DataStream API (bench/peers/flink), a
                            local MiniCluster of parallelism = cores, its Kafka sink at
                            least once
  flink exactly_once        the sink's Kafka transactions, a checkpoint every second
  quix streams              the same job in Quix Streams' StreamingDataFrame
                            (bench/peers/quix), one process a core in one group
  quix streams exactly_once with `processing_guarantee="exactly-once"`, a commit every second
  bytewax                   the same job as a Bytewax dataflow (bench/peers/bytewax), one
                            process with a worker a core; its Kafka output is at least once

The windowed workload (`--workload windowed`) produces N messages with K keys
(default 100,000) and an event time `ts`, and runs per key a window of the
last 10 s of event time (count and sum of `v`) and a running total of `v`,
adding all three to each message, with a checkpoint every S seconds (default
10): kayak's `rolling_window` then `bucket: {op: add}` with --state-dir and
`checkpoint.interval_secs: S`; Kafka Streams' value processor over a
persistent (RocksDB) store with its changelog and `commit.interval.ms` S*1000
(bench/peers/kstreams/.../Windowed.java); Flink's KeyedProcessFunction over
ValueState with RocksDB and a checkpoint every S s; Quix Streams' stateful
function (RocksDB, a changelog topic) with `commit_interval` S; Bytewax's
`stateful_map` with its recovery store snapshotted every S s; each at least
once and, where the engine offers it, exactly once.
kcat's pipe stays as the ceiling of moving the bytes.

Each run is timed from the start of its process to the moment a
read_committed reader of its output topic sees the N-th message (`kafkatool
wait`); `steady` is N over the time from the first output message to the last
(start-up left out: a JVM and a group join cost the peers seconds). CPU is the
process's user + system seconds per million messages; peak RSS its VmHWM.
Prints one line per run and a table of medians with ratios to kcat.
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
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import kafka_pipe  # noqa: E402
from kafka_pipe import JAVA, TOOL, Cluster, cpu_secs, peak_rss_mb, watched  # noqa: E402

KSTREAMS = os.path.join(HERE, "kstreams")
FLINK = os.path.join(HERE, "flink")
QUIX = os.path.join(HERE, "quix")
BYTEWAX = os.path.join(HERE, "bytewax")
# What Flink's own launcher passes a JVM 17 (its config.yaml's
# env.java.opts.all): the modules its serializers reach into.
FLINK_JVM = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.lang.reflect", "java.net", "java.io", "java.nio", "sun.nio.ch",
    "java.text", "java.time", "java.util", "java.util.concurrent",
    "java.util.concurrent.atomic", "java.util.concurrent.locks")] + [
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED"]


def steady(n, first, end):
    """Messages a second from the first output message to the last; None when
    they were all shown at once (a transaction's commit)."""
    return n / (end - first) if end - first > 0.05 else None


def run_procs(bootstrap, n, out, argvs, env=None):
    """(msg/s from start, steady msg/s, CPU s, peak MB, s to the first output)
    of the processes `argvs` start, writing topic `out` (created here): their
    CPU and their peaks summed."""
    subprocess.run([TOOL, "create", bootstrap, f"{out}:4"], check=True)
    done = subprocess.Popen([TOOL, "wait", bootstrap, out, str(n), "600"],
                            stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    ps = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=None if env is None else {**os.environ, **env})
          for argv in argvs]
    try:
        first, end = watched(done, out, n)
        return (n / (end - t0), steady(n, first, end), sum(cpu_secs(p.pid) for p in ps),
                sum(peak_rss_mb(p.pid) for p in ps), first - t0)
    finally:
        stop_procs(ps)


def stop_procs(ps):
    """SIGTERM to each process, then SIGKILL to any still there after 60 s."""
    for p in ps:
        p.terminate()
    for p in ps:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def kstreams_procs(work, bootstrap, src, out, guarantee, job="Stateless", commit_ms=None,
                   extra=(), peer=KSTREAMS, jvm=()):
    """The process of the JVM job `job` (a class of bench/peers/kstreams, or of
    `peer`) reading `src` into `out`: (argvs, env)."""
    app = os.path.basename(peer) + "-" + uuid.uuid4().hex[:8]
    cp = os.path.join(peer, "libs", "*") + ":" + os.path.join(peer, "classes")
    if commit_ms is None:
        commit_ms = 1000 if guarantee in ("exactly_once_v2", "exactly_once") else 30000
    return [[JAVA, "-Xmx1g", *jvm, "-cp", cp, f"kayak.bench.{job}", bootstrap, src, out,
             app, guarantee, str(commit_ms), os.path.join(work, app), *extra]], None


def quix_procs(work, bootstrap, src, out, exactly_once, windowed, commit_ms):
    """Quix Streams (bench/peers/quix/job.py): one process a core, in one
    consumer group, as its documentation scales an application."""
    app = "quix-" + uuid.uuid4().hex[:8]
    argv = [os.path.join(QUIX, "venv", "bin", "python"), os.path.join(QUIX, "job.py"),
            "windowed" if windowed else "stateless", bootstrap, src, out, app,
            "exactly-once" if exactly_once else "at-least-once", str(commit_ms)]
    return [argv + [os.path.join(work, app, str(i))] + (["10000"] if windowed else [])
            for i in range(os.cpu_count())], None


def bytewax_procs(work, bootstrap, src, out, windowed, snapshot_secs):
    """Bytewax (bench/peers/bytewax/job.py): one process with a worker a core;
    the windowed job with its recovery store, snapshotted every
    `snapshot_secs`."""
    app = "bytewax-" + uuid.uuid4().hex[:8]
    python = os.path.join(BYTEWAX, "venv", "bin", "python")
    argv = [python, "-m", "bytewax.run", "job:flow()", "-w", str(os.cpu_count())]
    if windowed:
        db = os.path.join(work, app)
        os.makedirs(db)
        subprocess.run([python, "-m", "bytewax.recovery", db, "1"], check=True,
                       stdout=subprocess.DEVNULL)
        argv += ["-r", db, "-s", str(snapshot_secs), "-b", "0"]
    return [argv], {"PYTHONPATH": BYTEWAX, "JOB": "windowed" if windowed else "stateless",
                    "BOOTSTRAP": bootstrap, "IN": src, "OUT": out, "WINDOW_MS": "10000"}


def peer_procs(name, work, bootstrap, src, out, windowed, checkpoint_secs):
    """(argvs, env) of the peer engine `name` (run.py's names, not kayak's or
    kcat's) on the workload, reading `src` into `out`."""
    # The stateless job's exactly-once runs commit every second (as kayak's
    # checkpoint and Kafka Streams' commit there).
    every_ms = 1000 if not windowed and "exactly" in name else checkpoint_secs * 1000
    if name.startswith("flink"):
        return kstreams_procs(work, bootstrap, src, out,
                              "exactly_once" if "exactly" in name else "at_least_once",
                              "Windowed" if windowed else "Stateless", every_ms,
                              ["10000"] if windowed else [], FLINK, FLINK_JVM)
    if name.startswith("quix"):
        return quix_procs(work, bootstrap, src, out, "exactly" in name, windowed, every_ms)
    if name == "bytewax":
        return bytewax_procs(work, bootstrap, src, out, windowed, checkpoint_secs)
    if name.startswith("kafka streams"):
        guarantee = "exactly_once_v2" if "exactly" in name else "at_least_once"
        if windowed:
            return kstreams_procs(work, bootstrap, src, out, guarantee, "Windowed", every_ms,
                                  ["10000"])
        return kstreams_procs(work, bootstrap, src, out, guarantee)
    raise SystemExit(f"no engine {name!r}")


# The windowed workload in kayak: a window of `ts`'s last 10 s per key, then
# the key's running total in a bucket.
WINDOWED = ("[{rolling_window: {key: k, field: v, window_secs: 10, time_field: ts, "
            "aggregates: [count, sum]}}, {bucket: {name: totals, key: k, op: add, field: v, "
            "as: total}}]")


def run_kayak(work, bootstrap, n, eos, label, windowed=False, checkpoint_secs=None):
    """The same four figures for kayak, through bench/kafka_pipe.py's runner."""
    if windowed:
        total = kafka_pipe.run_kayak(work, bootstrap, n, "kafka", True, eos, label,
                                     transforms=WINDOWED, head="buckets:\n  totals: {}\n",
                                     interval_secs=checkpoint_secs)
    else:
        total = kafka_pipe.run_kayak(work, bootstrap, n, "kafka", eos, eos, label)
    first, end = kafka_pipe.FIRSTS[label][-1], kafka_pipe.ENDS[label][-1]
    return (total, steady(n, first, end), kafka_pipe.CPUS[label][-1],
            kafka_pipe.PEAKS[label][-1], first)


def run_kcat(bootstrap, n):
    topic = "kcat-" + uuid.uuid4().hex[:8]
    done = subprocess.Popen([TOOL, "wait", bootstrap, topic, str(n), "600"],
                            stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    c = subprocess.Popen(["kcat", "-C", "-b", bootstrap, "-t", "in", "-e", "-q", "-o", "beginning"],
                         stdout=subprocess.PIPE)
    pr = subprocess.Popen(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X",
                           "enable.idempotence=true"], stdin=c.stdout, stderr=subprocess.PIPE)
    c.stdout.close()
    first, end = watched(done, topic, n)
    pr.stderr.read()
    # Both have ended (the consumer at the end of `in`, the producer at the
    # end of its input): their CPU and peak from the kernel's account.
    cpu, peak = 0.0, 0.0
    for proc in (c, pr):
        _, status, use = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu += use.ru_utime + use.ru_stime
        peak += use.ru_maxrss / 1024
    return n / (end - t0), steady(n, first, end), cpu, peak, first - t0


def verify_windowed(bootstrap, topic, n, keys):
    """Every message is in `topic` once, and the newest running total of each
    key is the sum of its `v`s, as kafkatool produced them."""
    out = subprocess.run([TOOL, "consume", bootstrap, topic, str(n), "120"], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    seqs, totals = set(), {}
    for line in out:
        if line:
            m = json.loads(line)
            seqs.add(m["seq"])
            totals[m["k"]] = max(totals.get(m["k"], 0), m["total"])
    want = {}
    for i in range(n):
        want[f"k{i % keys}"] = want.get(f"k{i % keys}", 0) + (i * 31) % 97
    if len(seqs) != n or totals != want:
        raise SystemExit(f"{topic}: {len(seqs)} of {n} messages, "
                         f"{sum(totals[k] != want.get(k) for k in totals)} totals wrong")


def rate(v):
    return "-" if v is None else f"{v:,.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=500000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workload", choices=["stateless", "windowed"], default="stateless")
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--checkpoint-secs", type=int, default=10)
    ap.add_argument("--engines", help="a comma-separated subset of the engines (kcat's pipe "
                    "always runs: the ratios are to it)")
    ap.add_argument("--verify", action="store_true",
                    help="windowed: check every engine's output against the oracle")
    a = ap.parse_args()
    windowed = a.workload == "windowed"
    if not shutil.which("kcat"):
        raise SystemExit("needs kcat: scripts/install-deps.sh --bench")
    for peer in (KSTREAMS, FLINK):
        if not os.path.isdir(os.path.join(peer, "classes")):
            raise SystemExit(f"needs the jars of {peer}: scripts/install-deps.sh --bench")
    for peer in (QUIX, BYTEWAX):
        if not os.path.isdir(os.path.join(peer, "venv")):
            raise SystemExit(f"needs the venv of {peer}: scripts/install-deps.sh --bench")
    work = tempfile.mkdtemp(prefix="kayak-bench-peers-")
    broker = Cluster(os.path.join(work, "kafka"), 1)
    names = ["kcat pipe", "kayak", "kayak exactly_once", "kafka streams",
             "kafka streams exactly_once_v2", "flink", "flink exactly_once", "quix streams",
             "quix streams exactly_once", "bytewax"]
    if a.engines:
        names = ["kcat pipe"] + [e for e in a.engines.split(",") if e != "kcat pipe"]
    results = {k: [] for k in names}
    try:
        broker.start()
        bootstrap = broker.bootstrap
        subprocess.run([TOOL, "create", bootstrap, "in:4"], check=True)
        subprocess.run([TOOL, "produce", bootstrap, "in", str(a.messages)] +
                       (["0", str(a.keys)] if windowed else []), check=True)
        for r in range(a.runs):
            for name in names:
                if name == "kcat pipe":
                    v = run_kcat(bootstrap, a.messages)
                elif name.startswith("kayak"):
                    v = run_kayak(work, bootstrap, a.messages, "exactly_once" in name, name,
                                  windowed, a.checkpoint_secs)
                else:
                    out = "out-" + uuid.uuid4().hex[:8]
                    argvs, env = peer_procs(name, work, bootstrap, "in", out, windowed,
                                            a.checkpoint_secs)
                    v = run_procs(bootstrap, a.messages, out, argvs, env)
                results[name].append(v)
                if windowed and a.verify and name != "kcat pipe":
                    verify_windowed(bootstrap, kafka_pipe.LAST_TOPIC, a.messages, a.keys)
                print(f"run {r + 1} {name}: {v[0]:,.0f} msg/s from start, first after "
                      f"{v[4]:.2f} s, steady {rate(v[1])}, {v[2]:.1f} CPU s, {v[3]:.0f} MB peak",
                      flush=True)

        def med(vs, i):
            xs = [x[i] for x in vs if x[i] is not None]
            return statistics.median(xs) if xs else None
        base = med(results["kcat pipe"], 0)
        what = (f"{a.keys:,} keys, window + running total, a checkpoint every "
                f"{a.checkpoint_secs} s" if windowed else "filter + map")
        print(f"\n{a.runs} runs, {a.messages:,} messages, kafka -> {what} -> kafka, medians:")
        print("| engine | msg/s from start | ratio to kcat | first output after s | msg/s steady "
              "| CPU s per M msgs | peak RSS MB |")
        print("|---|---|---|---|---|---|---|")
        for k, vs in results.items():
            total = med(vs, 0)
            print(f"| {k} | {total:,.0f} | {total / base:.2f} | {med(vs, 4):.2f} | "
                  f"{rate(med(vs, 1))} | {med(vs, 2) / a.messages * 1e6:.1f} | {med(vs, 3):.0f} |")
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
