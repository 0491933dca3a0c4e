#!/usr/bin/env python3
"""kafka -> window + bucket -> kafka on a cluster of 1, 2 and 3 kayak members
(docs/cluster.md), on this machine's cores.

    python3 bench/cluster.py [--messages N] [--keys K] [--runs R] [--repartition]

Starts a real Apache Kafka broker on 127.0.0.1 (tests/servers/kafka_cluster.py).
Each run makes a topic of six partitions, starts M members of a cluster (one
consumer group, a shared store in a temporary directory, each member its own
state directory, a checkpoint every 5 s, so shards are published while they
work; per key a 10 s window of event time and a running total) and waits until the group has given all six partitions out. Then it
produces N messages over K keys (build/tests/kafkatool, librdkafka's default
partitioner, which the cluster is told) and times from the start of the
production to the moment a read_committed reader of the output topic has seen
N messages. Each member's CPU seconds over that time are read from /proc. The
same graph on one server without `cluster:` is the baseline.

Then, with the 2-member cluster still holding the state of its run, a third
member joins: the rebalance pause is the time from its start until the group
has given all six partitions out again and every member has claimed or kept
its shards (each claim restores its state).

With --repartition the window and the bucket are keyed by another field
(g = seq % K) after a `repartition` step through a topic of six partitions
(exactly once: its transactions commit with the checkpoints), so every
message is produced and consumed once more: what keying state by a field
the input is not partitioned by costs.

Prints one line per run and a table of medians.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from kafka_pipe import KAYAK, TOOL, Cluster, cpu_secs, wait, watched  # noqa: E402

PARTITIONS = 6
ASSIGNED = re.compile(r"kafka input: assigned (\d+) partitions")


class Member:
    def __init__(self, work, name, bootstrap, topic, group, out, store, cluster=True,
                 repartition=None):
        self.name = name
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        key, steps = "k", ""
        if repartition:
            key = "g"
            steps = (f"      - map: {{g: 'seq % {repartition[2]}'}}\n"
                     f"      - repartition: {{key: g, topic: {repartition[0]}, "
                     f"marker_topic: {repartition[1]}}}\n")
        with open(f"{d}/p.yaml", "w") as f:
            f.write(f"""buckets:
  sums: {{}}
pipelines:
  p:
    input: {{kafka: {{brokers: '{bootstrap}', topics: [{topic}], group: {group}, batch_size: 5000,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}
    transforms:
{steps}      - rolling_window: {{key: {key}, field: v, window_secs: 10, time_field: ts, aggregates: [count, sum]}}
      - bucket: {{name: sums, key: {key}, op: add, field: v, as: total}}
    outputs: [{{kafka: {{brokers: '{bootstrap}', topic: {out}}}}}]
""")
        with open(f"{d}/s.yaml", "w") as f:
            f.write("listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 5}\n")
            if cluster:
                f.write(f"cluster: {{name: bench, member: {name}, store: {store}, "
                        "partitioner: crc32}\n")
        self.err = open(f"{d}/stderr", "w+")
        self.proc = subprocess.Popen([KAYAK, "--config", f"{d}/p.yaml", "--server-config",
                                      f"{d}/s.yaml", "--state-dir", f"{d}/state"],
                                     stderr=self.err, stdout=subprocess.DEVNULL)

    def regions_assigned_all(self):
        """How many of its regions were given every partition (one server:
        each region's input logs its assignment alike)."""
        self.err.seek(0)
        return sum(1 for line in self.err if f"assigned {PARTITIONS} partitions" in line)

    def shards_owned(self, store):
        """How many shards its member file in `store` says it owns."""
        try:
            with open(os.path.join(store, "bench", "members", f"{self.name}.json")) as f:
                j = json.load(f)
        except (OSError, ValueError):
            return 0
        return sum(len(r.get("owned", [])) for r in j.get("regions", []))

    def assigned(self):
        """The partitions of its newest assignment (0 after a revocation)."""
        self.err.seek(0)
        n = 0
        for line in self.err:
            m = ASSIGNED.search(line)
            if m:
                n = int(m.group(1))
            elif "partitions revoked" in line:
                n = 0
        return n

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.err.close()


def settled(members, regions=1, store=None):
    """True when the members' newest assignments cover every partition (of
    each region's topic)."""
    if regions == 1:
        return sum(m.assigned() for m in members) == PARTITIONS
    if store is None:
        return members[0].regions_assigned_all() >= regions
    return sum(m.shards_owned(store) for m in members) == PARTITIONS * regions


def run(work, bootstrap, n, keys, count, join=False, repartition=False):
    """(msg/s, [CPU s per member], rebalance pause s or None). count 0: one
    server without `cluster:`."""
    tag = uuid.uuid4().hex[:8]
    topic, out, group = f"in-{tag}", f"out-{tag}", f"g-{tag}"
    store = os.path.join(work, f"store-{tag}")
    topics = [f"{topic}:{PARTITIONS}", out + ":6"]
    between = None
    if repartition:
        between = (f"by-g-{tag}", f"markers-{tag}", keys)
        topics += [f"{between[0]}:{PARTITIONS}", f"{between[1]}:1"]
    regions = 2 if repartition else 1
    subprocess.run([TOOL, "create", bootstrap, *topics], check=True)
    d = os.path.join(work, tag)
    members = []
    try:
        for i in range(max(count, 1)):
            members.append(Member(d, f"m{i}", bootstrap, topic, group, out, store,
                                  cluster=count > 0, repartition=between))
        at = store if count > 0 else None
        wait(lambda: settled(members, regions, at), 120, "the group to give out every partition")
        time.sleep(1)  # a member that joined last may still cause one more rebalance
        wait(lambda: settled(members, regions, at), 120, "the group to settle")
        done = subprocess.Popen([TOOL, "wait", bootstrap, out, str(n), "600"],
                                stdout=subprocess.PIPE, text=True)
        cpu0 = [cpu_secs(m.proc.pid) for m in members]
        t0 = time.monotonic()
        subprocess.run([TOOL, "produce", bootstrap, topic, str(n), "0", str(keys)], check=True)
        _, end = watched(done, out, n)
        cpus = [cpu_secs(m.proc.pid) - c for m, c in zip(members, cpu0)]
        pause = None
        if join:
            t = time.monotonic()
            members.append(Member(d, f"m{count}", bootstrap, topic, group, out, store,
                                  repartition=between))
            wait(lambda: members[-1].assigned() > 0 and settled(members), 120,
                 "the group to give the new member partitions")
            pause = time.monotonic() - t
        return n / (end - t0), cpus, pause
    finally:
        for m in members:
            m.close()


def label(count):
    return "one server, no cluster" if count == 0 else f"{count} member(s)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repartition", action="store_true",
                    help="key the state by another field, after a repartition step")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kayak-bench-cluster-")
    broker = Cluster(os.path.join(work, "kafka"), 1)
    rates = {0: [], 1: [], 2: [], 3: []}
    cpus = {0: [], 1: [], 2: [], 3: []}
    pauses = []
    try:
        broker.start()
        for r in range(a.runs):
            for count in (0, 1, 2, 3):
                rate, cpu, pause = run(work, broker.bootstrap, a.messages, a.keys, count,
                                       join=count == 2 and not a.repartition,
                                       repartition=a.repartition)
                rates[count].append(rate)
                cpus[count].append(cpu)
                if pause is not None:
                    pauses.append(pause)
                print(f"run {r + 1}, {label(count)}: {rate:,.0f} msg/s, CPU s per member "
                      f"{', '.join(f'{c:.1f}' for c in cpu)}"
                      + (f"; a third joining: {pause:.2f} s until every partition is out again"
                         if pause is not None else ""), flush=True)
        print(f"\n{a.runs} runs, {a.messages:,} messages over {a.keys:,} keys, "
              f"{PARTITIONS} partitions, {os.cpu_count()} cores, medians:")
        print("| servers | msg/s | ratio to one server | CPU s per member | msgs per CPU s |")
        print("|---|---|---|---|---|")
        base = statistics.median(rates[0])
        for count in (0, 1, 2, 3):
            m = statistics.median(rates[count])
            per = [statistics.median(c[i] for c in cpus[count]) for i in range(max(count, 1))]
            total = sum(per)
            print(f"| {label(count)} | {m:,.0f} | {m / base:.2f} | {', '.join(f'{c:.2f}' for c in per)} | "
                  f"{a.messages / total:,.0f} |")
        if pauses:
            print(f"\nrebalance pause, a third member joining two that hold {a.keys:,} keys: "
                  f"{statistics.median(pauses):.2f} s (median)")
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
