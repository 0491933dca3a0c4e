#!/usr/bin/env python3
"""kayak beside the engines a user would pick instead, on the same work, in one run.

    python3 bench/peers/run.py [--messages N] [--runs R]

Needs `scripts/install-deps.sh --bench` (kcat, Kafka Streams' jars). Starts
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

Each run is timed from the start of its process to the moment a
read_committed reader of its output topic sees the N-th message (`kafkatool
wait`); `steady` is N over the time from the first output message to the last
(start-up left out: a JVM and a group join cost the peers seconds). CPU is the
process's user + system seconds per million messages; peak RSS its VmHWM.
Prints one line per run and a table of medians with ratios to kcat.
"""
import argparse
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


def steady(n, first, end):
    """Messages a second from the first output message to the last; None when
    they were all shown at once (a transaction's commit)."""
    return n / (end - first) if end - first > 0.05 else None


def run_kstreams(work, bootstrap, n, guarantee):
    """(msg/s from start, steady msg/s, CPU s, peak MB, s to the first output)
    of the Kafka Streams job."""
    app = "ks-" + uuid.uuid4().hex[:8]
    out = f"out-{app}"
    subprocess.run([TOOL, "create", bootstrap, f"{out}:4"], check=True)
    done = subprocess.Popen([TOOL, "wait", bootstrap, out, str(n), "600"],
                            stdout=subprocess.PIPE, text=True)
    cp = os.path.join(KSTREAMS, "libs", "*") + ":" + os.path.join(KSTREAMS, "classes")
    commit_ms = "1000" if guarantee == "exactly_once_v2" else "30000"
    t0 = time.monotonic()
    p = subprocess.Popen([JAVA, "-Xmx1g", "-cp", cp, "kayak.bench.Stateless", bootstrap, "in", out,
                          app, guarantee, commit_ms, os.path.join(work, app)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        first, end = watched(done, out, n)
        return (n / (end - t0), steady(n, first, end), cpu_secs(p.pid), peak_rss_mb(p.pid),
                first - t0)
    finally:
        p.terminate()
        p.wait(timeout=60)


def run_kayak(work, bootstrap, n, eos, label):
    """The same four figures for kayak, through bench/kafka_pipe.py's runner."""
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


def rate(v):
    return "-" if v is None else f"{v:,.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=500000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not shutil.which("kcat"):
        raise SystemExit("needs kcat: scripts/install-deps.sh --bench")
    if not os.path.isdir(os.path.join(KSTREAMS, "classes")):
        raise SystemExit("needs Kafka Streams' jars: scripts/install-deps.sh --bench")
    work = tempfile.mkdtemp(prefix="kayak-bench-peers-")
    broker = Cluster(os.path.join(work, "kafka"), 1)
    names = ["kcat pipe", "kayak", "kayak exactly_once", "kafka streams",
             "kafka streams exactly_once_v2"]
    results = {k: [] for k in names}
    try:
        broker.start()
        bootstrap = broker.bootstrap
        subprocess.run([TOOL, "create", bootstrap, "in:4"], check=True)
        subprocess.run([TOOL, "produce", bootstrap, "in", str(a.messages)], check=True)
        for r in range(a.runs):
            for name in names:
                if name == "kcat pipe":
                    v = run_kcat(bootstrap, a.messages)
                elif name.startswith("kayak"):
                    v = run_kayak(work, bootstrap, a.messages, "exactly_once" in name, name)
                else:
                    v = run_kstreams(work, bootstrap, a.messages,
                                     "exactly_once_v2" if "exactly" in name else "at_least_once")
                results[name].append(v)
                print(f"run {r + 1} {name}: {v[0]:,.0f} msg/s from start, first after "
                      f"{v[4]:.2f} s, steady {rate(v[1])}, {v[2]:.1f} CPU s, {v[3]:.0f} MB peak",
                      flush=True)

        def med(vs, i):
            xs = [x[i] for x in vs if x[i] is not None]
            return statistics.median(xs) if xs else None
        base = med(results["kcat pipe"], 0)
        print(f"\n{a.runs} runs, {a.messages:,} messages of about 40 bytes, kafka -> kafka, medians:")
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
