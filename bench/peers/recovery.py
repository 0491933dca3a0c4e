#!/usr/bin/env python3
"""Recovery after kill -9 under load, with a million keys of state, in kayak and its peers.

    python3 bench/peers/recovery.py [--messages N] [--keys K] [--checkpoint-secs S]

Needs `scripts/install-deps.sh --bench`. Starts the tests' real Kafka broker,
produces N messages (default 2,000,000) with K keys (default 1,000,000) to
`in`, and runs the windowed workload of bench/peers/run.py (per key a window
of 10 s of event time and a running total) in each engine, checkpointing every
S seconds (default 1). Once all N are in an engine's output topic (every key
has state), a producer adds F messages every half second (--feed, default
10,000: a rate each engine must keep up with); when 30,000 of
them (--kill-after) are out, the engine is killed with SIGKILL while it works and started
again as its own docs say a failed job resumes:

  kayak                 the same command, --state-dir and group (a static member
                        of the group, its id from the state directory; "kayak
                        dynamic": with `group.instance.id: ""`, a dynamic one)
  Kafka Streams         the same application.id and state.dir
  Flink                 a MiniCluster job started from its newest retained
                        checkpoint (`execution.state-recovery.path`), as
                        `flink run -s` would
  Quix Streams          the same consumer group and state directories (its
                        stores restore from their changelog topics)
  Bytewax               the same recovery directory (its newest snapshot and
                        the input offsets in it)

Measured: the time from the kill to the first new message a read_committed
reader sees in the output topic (`kafkatool next`: the restart, the restore,
the replay up to new output), and, once every input message is in the output,
whether each key's newest running total equals the sum of its values as
produced (the oracle), how many keys are over or under it, and how many
messages the output holds twice.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
import run as peers  # noqa: E402
import kafka_pipe  # noqa: E402
from kafka_pipe import JAVA, KAYAK, TOOL, Cluster, peak_rss_mb  # noqa: E402


def kayak_start(d, bootstrap, out, eos, secs, dynamic=False):
    group = os.path.basename(d)
    txn = ", exactly_once: true" if eos else ""
    # By default a static member: a restarted member takes its partitions
    # back at once. A dynamic one waits out the dead one's session (45 s by
    # default).
    props = ", properties: {group.instance.id: ''}" if dynamic else ""
    with open(f"{d}/p.yaml", "w") as f:
        f.write(f"buckets:\n  totals: {{}}\npipelines:\n  p:\n    input: {{kafka: {{brokers: "
                f"'{bootstrap}', topics: [in], group: {group}, batch_size: 5000{props}}}}}\n"
                f"    transforms: {peers.WINDOWED}\n"
                f"    outputs: [{{kafka: {{brokers: '{bootstrap}', topic: {out}{txn}}}}}]\n")
    with open(f"{d}/s.yaml", "w") as f:
        f.write(f"listen: 127.0.0.1:0\ncheckpoint: {{interval_secs: {secs}}}\n")
    return subprocess.Popen([KAYAK, "--config", f"{d}/p.yaml", "--server-config", f"{d}/s.yaml",
                             "--state-dir", f"{d}/state"],
                            stdout=subprocess.DEVNULL, stderr=open(f"{d}/stderr", "a"))


def kayak_exposure(d):
    """What kayak's checkpoints say a kill now would replay: (messages read
    since the last committed checkpoint's barrier, ms since that commit, the
    newest checkpoints' durations in ms), from its API."""
    with open(f"{d}/stderr") as f:
        url = kafka_pipe.listen_url(f)
    with urllib.request.urlopen(url + "/api/v1/checkpoints", timeout=10) as r:
        region = json.load(r)["regions"][0]
    e = region["exposure"]
    return (e["messages"], e["since_commit_ms"],
            [(h["status"], h["duration_ms"]) for h in region["history"][:5]])


def jvm_start(d, bootstrap, out, peer, guarantee, secs, jvm=(), restore=None):
    cp = os.path.join(peer, "libs", "*") + ":" + os.path.join(peer, "classes")
    app = os.path.basename(d)
    args = [JAVA, "-Xmx1g", *jvm, "-cp", cp, "kayak.bench.Windowed", bootstrap, "in", out, app,
            guarantee, str(secs * 1000), f"{d}/state", "10000"]
    if restore:
        args.append(restore)
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(f"{d}/stderr", "a"))


def quix_start(d, bootstrap, out, eos, secs):
    """Quix Streams: one process a core in one consumer group, each with its
    own state directory (a restart reuses them: the stores and the changelog
    topics they restore from)."""
    app = os.path.basename(d)
    return [subprocess.Popen(
        [os.path.join(peers.QUIX, "venv", "bin", "python"), os.path.join(peers.QUIX, "job.py"),
         "windowed", bootstrap, "in", out, app, "exactly-once" if eos else "at-least-once",
         str(secs * 1000), f"{d}/state/{i}", "10000"],
        stdout=subprocess.DEVNULL, stderr=open(f"{d}/stderr", "a")) for i in range(os.cpu_count())]


def bytewax_start(d, bootstrap, out, secs):
    """Bytewax: its recovery store, made before the first start; a restart
    resumes from the newest snapshot in it, as its docs say."""
    python = os.path.join(peers.BYTEWAX, "venv", "bin", "python")
    db = f"{d}/recovery"
    if not os.path.isdir(db):
        os.makedirs(db)
        subprocess.run([python, "-m", "bytewax.recovery", db, "1"], check=True,
                       stdout=subprocess.DEVNULL)
    return subprocess.Popen(
        [python, "-m", "bytewax.run", "job:flow()", "-w", str(os.cpu_count()), "-r", db,
         "-s", str(secs), "-b", "0"],
        env={**os.environ, "PYTHONPATH": peers.BYTEWAX, "JOB": "windowed",
             "BOOTSTRAP": bootstrap, "IN": "in", "OUT": out, "WINDOW_MS": "10000"},
        stdout=subprocess.DEVNULL, stderr=open(f"{d}/stderr", "a"))


def newest_flink_checkpoint(d):
    """The newest checkpoint directory Flink completed (it has _metadata)."""
    done = glob.glob(f"{d}/state/*/chk-*/_metadata")
    if not done:
        return None
    return os.path.dirname(max(done, key=lambda p: int(p.split("chk-")[1].split("/")[0])))


def consume_all(bootstrap, topic):
    r = subprocess.run([TOOL, "consume", bootstrap, topic, "-1", "300"], capture_output=True,
                       text=True, check=True)
    return [json.loads(x) for x in r.stdout.split("\n") if x]


def judge(msgs, n, keys):
    """(keys over the oracle, keys under, messages held twice, all n seen)"""
    seqs, totals = {}, {}
    for m in msgs:
        seqs[m["seq"]] = seqs.get(m["seq"], 0) + 1
        totals[m["k"]] = max(totals.get(m["k"], 0), m["total"])
    want = {}
    for i in range(n):
        want[f"k{i % keys}"] = want.get(f"k{i % keys}", 0) + (i * 31) % 97
    over = sum(1 for k, v in want.items() if totals.get(k, 0) > v)
    under = sum(1 for k, v in want.items() if totals.get(k, 0) < v)
    twice = sum(c - 1 for c in seqs.values())
    return over, under, twice, len(seqs) == n


class Feeder(threading.Thread):
    """Produces messages N, N+1, ... to `in`, `each` every half second, until
    stopped or for 120 s at most."""

    def __init__(self, bootstrap, start, keys, each):
        super().__init__(daemon=True)
        self.bootstrap, self.next, self.keys, self.each = bootstrap, start, keys, each
        self.stop = threading.Event()

    def run(self):
        until = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < until:
            subprocess.run([TOOL, "produce", self.bootstrap, "in", str(self.each), str(self.next),
                            str(self.keys)], check=True, capture_output=True)
            self.next += self.each
            self.stop.wait(0.5)


def one(work, bootstrap, name, n, keys, secs, produced, feed, kill_after):
    d = tempfile.mkdtemp(dir=work, prefix=name.replace(" ", "-") + "-")
    out = "out-" + uuid.uuid4().hex[:8]
    subprocess.run([TOOL, "create", bootstrap, f"{out}:4"], check=True)
    eos = "exactly" in name

    def start(restart):
        """The engine's processes."""
        if name.startswith("kayak"):
            return [kayak_start(d, bootstrap, out, eos, secs, "dynamic" in name)]
        if name.startswith("kafka streams"):
            return [jvm_start(d, bootstrap, out, peers.KSTREAMS,
                              "exactly_once_v2" if eos else "at_least_once", secs)]
        if name.startswith("quix"):
            return quix_start(d, bootstrap, out, eos, secs)
        if name == "bytewax":
            return [bytewax_start(d, bootstrap, out, secs)]
        return [jvm_start(d, bootstrap, out, peers.FLINK,
                          "exactly_once" if eos else "at_least_once", secs, peers.FLINK_JVM,
                          newest_flink_checkpoint(d) if restart else None)]

    ps = start(False)
    feeder = Feeder(bootstrap, produced, keys, feed)
    try:
        # `wait` counts offsets: a transaction's marker takes one too, so the
        # engines with exactly-once output may be a few messages short here.
        subprocess.run([TOOL, "wait", bootstrap, out, str(n), "900"], check=True,
                       capture_output=True)
        feeder.start()
        subprocess.run([TOOL, "wait", bootstrap, out, str(n + kill_after), "900"], check=True,
                       capture_output=True)
        exposure = kayak_exposure(d) if name.startswith("kayak") else None
        for p in ps:
            os.kill(p.pid, signal.SIGKILL)
        t_kill = time.monotonic()
        for p in ps:
            p.wait()
        nxt = subprocess.Popen([TOOL, "next", bootstrap, out, "900"], stdout=subprocess.PIPE,
                               text=True)
        if nxt.stdout.readline().strip() != "ready":
            raise SystemExit("kafkatool next did not start")
        settle = time.monotonic() - t_kill
        t_restart = time.monotonic()
        ps = start(True)
        first = float(nxt.stdout.readline())
        nxt.wait()
        feeder.stop.set()
        feeder.join()
        n = feeder.next
        # Every input message in the output: read it all until it is (bounded).
        deadline = time.monotonic() + 900
        while True:
            msgs = consume_all(bootstrap, out)
            over, under, twice, complete = judge(msgs, n, keys)
            if complete or time.monotonic() > deadline:
                break
            time.sleep(2)
        peak = sum(peak_rss_mb(p.pid) for p in ps)
        return {"restart_to_first": first - t_restart, "settle": settle, "over": over,
                "under": under, "twice": twice, "complete": complete, "peak": peak,
                "produced": n, "exposure": exposure}
    finally:
        feeder.stop.set()
        for p in ps:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2000000)
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--feed", type=int, default=10000,
                    help="messages produced every half second once the engine caught up")
    ap.add_argument("--checkpoint-secs", type=int, default=1)
    ap.add_argument("--kill-after", type=int, default=30000,
                    help="fed messages out before the kill (the feed gives `--feed` twice a "
                         "second, the feeder stops after 120 s)")
    ap.add_argument("--engines", default="kayak,kayak exactly_once,kafka streams,"
                    "kafka streams exactly_once_v2,flink,flink exactly_once")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kayak-bench-recovery-")
    broker = Cluster(os.path.join(work, "kafka"), 1)
    rows = []
    try:
        broker.start()
        bootstrap = broker.bootstrap
        subprocess.run([TOOL, "create", bootstrap, "in:4"], check=True)
        subprocess.run([TOOL, "produce", bootstrap, "in", str(a.messages), "0", str(a.keys)],
                       check=True)
        produced = a.messages
        for name in a.engines.split(","):
            # Each engine reads `in` from the start: the messages fed to the
            # engines before it are part of its input too.
            r = one(work, bootstrap, name, produced, a.keys, a.checkpoint_secs, produced, a.feed,
                    a.kill_after)
            produced = r["produced"]
            rows.append((name, r))
            print(f"{name}: restart to first new output {r['restart_to_first']:.2f} s "
                  f"(the kill settled in {r['settle']:.2f} s), keys over the oracle "
                  f"{r['over']:,}, under {r['under']:,}, messages twice {r['twice']:,}, "
                  f"every message out: {r['complete']}, peak after restart {r['peak']:.0f} MB",
                  flush=True)
            if r["exposure"] is not None:
                m, ms, history = r["exposure"]
                print(f"  at the kill: {m:,} messages read since the last committed checkpoint's "
                      f"barrier, {ms} ms since its commit; newest checkpoints (status, ms): "
                      f"{history}", flush=True)
        print(f"\n{a.messages:,} messages and more fed, {a.keys:,} keys, a checkpoint every "
              f"{a.checkpoint_secs} s, kill -9 while working:")
        print("| engine | restart to first new output s | keys over the oracle | keys under "
              "| messages twice | peak RSS after restart MB |")
        print("|---|---|---|---|---|---|")
        for name, r in rows:
            print(f"| {name} | {r['restart_to_first']:.2f} | {r['over']:,} | {r['under']:,} | "
                  f"{r['twice']:,} | {r['peak']:.0f} |")
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
