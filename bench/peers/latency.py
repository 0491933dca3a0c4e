#!/usr/bin/env python3
"""Each engine's latency on the windowed workload of bench/peers/run.py, under
a steady load it can keep up with, in one run.

    python3 bench/peers/latency.py [--rate R] [--runs N] [--checkpoint-secs S]
                                   [--keys K] [--measure-secs M] [--engines a,b]

Needs `scripts/install-deps.sh --bench` and `scripts/build.sh`. Starts the
real Kafka broker of the tests; for each engine, run after run, a fresh input
and output topic (4 partitions each), the engine on them (as run.py starts
it: kayak's rolling_window + bucket with --state-dir, and that with the
kafka input's `batch_wait_ms: 5` instead of its 50; Kafka Streams, Flink,
Quix Streams, Bytewax, each at least once and exactly once where it offers
it, a checkpoint every S s), and bench/peers/probe.py beside it. The probe
produces R messages a second (default 5,000: below every engine's rate on
this machine) and reads the output as a read_committed consumer. Once the
engine's first output is in and S + 5 s more have passed (its warm-up and
a first checkpoint), it measures the messages of the next M s (default 30)
from its producer's call to its reader, and waits for the last of them.
`probe alone` reads its own input topic: the floor of the measure (its
producer's batching and the broker). Prints one line per run and a table of
medians: p50, p99 and the worst
message, how many never came, and the engine's peak RSS.
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
sys.path.insert(0, HERE)
import run as peers  # noqa: E402
from kafka_pipe import TOOL, Cluster, cpu_secs, kayak_args, peak_rss_mb  # noqa: E402

ENGINES = ["probe alone", "kayak", "kayak batch_wait_ms:5", "kayak exactly_once", "kafka streams",
           "kafka streams exactly_once_v2", "flink", "flink exactly_once", "quix streams",
           "quix streams exactly_once", "bytewax"]
PROBE_PYTHON = os.path.join(peers.QUIX, "venv", "bin", "python")  # has confluent-kafka


def one(name, work, bootstrap, a):
    """One engine's run: the probe's figures, its CPU seconds and peak RSS."""
    tag = uuid.uuid4().hex[:8]
    src = f"lat-in-{tag}"
    d = os.path.join(work, tag)
    os.makedirs(d)
    if name == "probe alone":
        out, argvs, env = src, [], None  # the floor: the probe reads what it writes
    elif name.startswith("kayak"):
        out = f"out-{tag}"  # kayak_args' output topic: out-<group>
        # The input's batch_wait_ms (default 50) is how long it lingers to
        # fill a batch once a message is in: the latency it trades for
        # fewer, fuller batches at a low rate.
        extra = ", batch_wait_ms: 5" if "batch_wait_ms:5" in name else ""
        argvs = [kayak_args(d, bootstrap, "kafka", True, "exactly_once" in name, peers.WINDOWED,
                            "buckets:\n  totals: {}\n", a.checkpoint_secs, extra, src=src,
                            group=tag)]
        env = None
    else:
        out = f"lat-out-{tag}"
        argvs, env = peers.peer_procs(name, work, bootstrap, src, out, True, a.checkpoint_secs)
    subprocess.run([TOOL, "create", bootstrap, *{f"{src}:4", f"{out}:4"}], check=True)
    logs = [open(os.path.join(d, f"engine{i}.log"), "w") for i in range(len(argvs))]
    ps = [subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                           env=None if env is None else {**os.environ, **env})
          for argv, log in zip(argvs, logs)]
    try:
        drain = 2 * a.checkpoint_secs + 30
        r = subprocess.run([PROBE_PYTHON, os.path.join(HERE, "probe.py"), bootstrap, src, out,
                            str(a.rate), str(a.keys), str(a.checkpoint_secs + 5),
                            str(a.measure_secs), str(drain)],
                           capture_output=True, text=True,
                           timeout=180 + a.checkpoint_secs + 5 + a.measure_secs + drain + 60)
        if r.returncode != 0 or not r.stdout.strip():
            raise SystemExit(f"{name}: the probe failed: {r.stdout}{r.stderr}")
        v = json.loads(r.stdout.strip().splitlines()[-1])
        v["cpu_s"] = sum(cpu_secs(p.pid) for p in ps)
        v["rss_mb"] = sum(peak_rss_mb(p.pid) for p in ps)
        return v
    finally:
        peers.stop_procs(ps)
        for log in logs:
            log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--checkpoint-secs", type=int, default=10)
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--measure-secs", type=int, default=30)
    ap.add_argument("--engines", help="a comma-separated subset of: " + ", ".join(ENGINES))
    a = ap.parse_args()
    names = a.engines.split(",") if a.engines else ENGINES
    for n in names:
        if n not in ENGINES:
            raise SystemExit(f"no engine {n!r}")
    if not os.path.exists(PROBE_PYTHON):
        raise SystemExit("needs the peers' venvs: scripts/install-deps.sh --bench")
    work = tempfile.mkdtemp(prefix="kayak-bench-latency-")
    broker = Cluster(os.path.join(work, "kafka"), 1)
    results = {k: [] for k in names}
    try:
        broker.start()
        for r in range(a.runs):
            for name in names:
                v = one(name, work, broker.bootstrap, a)
                results[name].append(v)
                print(f"run {r + 1} {name}: p50 {v['p50_ms']} ms, p99 {v['p99_ms']} ms, "
                      f"max {v['max_ms']} ms, {v['missing']} of {v['measured']} missing, "
                      f"{v['cpu_s']:.1f} CPU s, {v['rss_mb']:.0f} MB peak", flush=True)

        def med(vs, k):
            xs = [x[k] for x in vs if x[k] is not None]
            return statistics.median(xs) if xs else None
        print(f"\n{a.runs} runs, {a.rate:,} msg/s for {a.measure_secs} s measured, {a.keys:,} "
              f"keys, window + running total, a checkpoint every {a.checkpoint_secs} s, medians:")
        print("| engine | p50 ms | p99 ms | max ms | missing | peak RSS MB |")
        print("|---|---|---|---|---|---|")
        for k, vs in results.items():
            print(f"| {k} | {med(vs, 'p50_ms'):,.0f} | {med(vs, 'p99_ms'):,.0f} | "
                  f"{med(vs, 'max_ms'):,.0f} | {max(x['missing'] for x in vs)} | "
                  f"{med(vs, 'rss_mb'):.0f} |")
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
