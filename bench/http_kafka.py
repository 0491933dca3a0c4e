#!/usr/bin/env python3
"""http posts written ahead to Kafka (the http input's `topic`), next to the
input's own log and to the broker's own producer, in one run.

    bench/http_kafka.py [--runs 3] [--seconds 5] [--connections 64]

Starts a real Apache Kafka broker on 127.0.0.1 (tests/servers/kafka_cluster.py,
its jars installed by scripts/install-deps.sh) and, each loaded in turn by wrk
(2 threads, keep-alive connections, bench/post.lua's 120-byte JSON posts):

  log          kayak, http input -> file output, --state-dir: each 202 after
               the post is in the input's log and fdatasync'ed
  ahead        kayak, http input with `topic` (keyed by `user`) -> file output,
               --state-dir: each 202 once the broker acknowledged the post
               (an idempotent producer, acks=all); the part after the input
               reads the topic back and writes the file
  ahead, 1 s   the same with a checkpoint every second
  producer     the broker's own Java producer (ProducerPerformance), 120-byte
               records, acks=all, idempotent, as fast as it goes: what this
               broker takes from one client, with no HTTP in the way

Prints one line per run, then medians: posts (records) a second, wrk's p50 and
p99, kayak's CPU µs a post (utime + stime over the run / posts) and peak RSS.
After the last run it checks that every post a 202 answered is in the output
file of `ahead` (the part read the topic back).

AHEAD_PROPS adds to the written-ahead inputs' `kafka_properties` (YAML map
entries, such as "linger.ms: '5'").
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAYAK = os.environ.get("KAYAK_BIN", os.path.join(ROOT, "build", "kayak"))
TOOL = os.environ.get("KAYAK_KAFKATOOL", os.path.join(ROOT, "build", "tests", "kafkatool"))
sys.path.insert(0, os.path.join(ROOT, "tests", "servers"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from kafka_cluster import JAVA, LIBS, Cluster  # noqa: E402
from kafka_pipe import cpu_secs, peak_rss_mb, wait  # noqa: E402
from peers.run import stop_procs  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post_ok(url):
    req = urllib.request.Request(url, data=b'{"user":"u0","id":0}', method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 202
    except Exception:
        return False


def start_kayak(work, name, bootstrap, topic, interval):
    d = os.path.join(work, name)
    os.makedirs(d)
    port = free_port()
    ahead = (f", topic: {topic}, brokers: '{bootstrap}', key: user" if topic else "")
    if topic and os.environ.get("AHEAD_PROPS"):
        ahead += f", kafka_properties: {{{os.environ['AHEAD_PROPS']}}}"
    with open(f"{d}/p.yaml", "w") as f:
        f.write("pipelines:\n  ingest:\n"
                f"    input: {{http: {{path: /ingest, max_backlog_bytes: 268435456{ahead}}}}}\n"
                f"    outputs: [{{file: {{path: {d}/out, max_part_bytes: 1073741824}}}}]\n")
    with open(f"{d}/s.yaml", "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\nlog_level: warn\n"
                f"checkpoint: {{interval_secs: {interval}}}\n")
    p = subprocess.Popen([KAYAK, "--config", f"{d}/p.yaml", "--server-config", f"{d}/s.yaml",
                          "--state-dir", f"{d}/state"],
                         stderr=open(f"{d}/stderr", "w"), stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/ingest"
    wait(lambda: post_ok(url), 60, f"kayak ({name}) to take posts")
    return p, url, d


def wrk(url, seconds, conns):
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency", "-s",
                          os.path.join(ROOT, "bench", "post.lua"), url],
                         capture_output=True, text=True, check=True).stdout

    def ms(label):
        m = re.search(r"^\s*" + label + r"%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        v, u = float(m.group(1)), m.group(2)
        return v / 1000 if u == "us" else v * 1000 if u == "s" else v
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    posts = int(re.search(r"(\d+) requests in", out).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rate, ms("50"), ms("99"), posts, int(bad.group(1)) if bad else 0


def producer_perf(bootstrap, seconds):
    """ProducerPerformance for about `seconds`: its records a second."""
    topic = "perf-" + os.urandom(4).hex()
    subprocess.run([TOOL, "create", bootstrap, f"{topic}:1"], check=True)
    out = subprocess.run(
        [JAVA, "-Xmx512m", "-cp", os.path.join(LIBS, "*"),
         "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
         "--num-records", str(60000 * seconds), "--record-size", "120", "--throughput", "-1",
         "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
         "enable.idempotence=true", "linger.ms=5"],
        capture_output=True, text=True, timeout=600, check=True).stdout
    line = [l for l in out.splitlines() if "records sent" in l][-1]
    rate = float(line.split(",")[1].split()[0])
    # "... ms avg latency, ... ms max latency, p50 ms 50th, ... ms 99th, ..."
    p50 = float(re.search(r"([\d.]+) ms 50th", line).group(1))
    p99 = float(re.search(r"([\d.]+) ms 99th", line).group(1))
    return rate, p50, p99


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=64)
    a = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("needs wrk: ./scripts/install-deps.sh --bench")
    work = tempfile.mkdtemp(prefix="kayak-bench-http-kafka-")
    broker = Cluster(os.path.join(work, "kafka"), 1)
    procs = []
    try:
        broker.start()
        bootstrap = broker.bootstrap
        subprocess.run([TOOL, "create", bootstrap, "posts1:1", "posts2:1"], check=True)
        targets = {}
        for name, topic, interval in (("log", None, 10), ("ahead", "posts1", 10),
                                      ("ahead, 1 s", "posts2", 1)):
            p, url, d = start_kayak(work, name.replace(", ", "-").replace(" ", ""), bootstrap,
                                    topic, interval)
            procs.append(p)
            targets[name] = (p, url, d)
        results = {name: [] for name in list(targets) + ["producer"]}
        accepted = {name: 1 for name in targets}  # the post start_kayak made
        for r in range(a.runs):
            for name in results:
                if name == "producer":
                    rate, p50, p99 = producer_perf(bootstrap, a.seconds)
                    row = (rate, p50, p99, -1.0)
                else:
                    p, url, _ = targets[name]
                    before = cpu_secs(p.pid)
                    rate, p50, p99, posts, bad = wrk(url, a.seconds, a.connections)
                    cpu = (cpu_secs(p.pid) - before) * 1e6 / max(posts, 1)
                    if bad:
                        raise SystemExit(f"{name}: {bad} answers were not 202")
                    accepted[name] += posts
                    row = (rate, p50, p99, cpu)
                results[name].append(row)
                print(f"run {r + 1} {name}: posts/s p50_ms p99_ms cpu_us_per_post = "
                      + " ".join(f"{v:.2f}" for v in row), flush=True)
        # Every post answered 202 reaches the output through the topic.
        for name in ("ahead", "ahead, 1 s"):
            p, url, d = targets[name]

            def lines():
                n = 0
                out = os.path.join(d, "out")
                if os.path.isfile(out):
                    with open(out, "rb") as fh:
                        return fh.read().count(b"\n")
                for root, _, files in os.walk(out):
                    for f in files:
                        with open(os.path.join(root, f), "rb") as fh:
                            n += fh.read().count(b"\n")
                return n
            wait(lambda: lines() >= accepted[name], 300, f"{name}: every post in the output")
            print(f"{name}: {lines()} messages out for {accepted[name]} posts answered 202")
        ref = statistics.median(v[0] for v in results["producer"])
        print(f"\n{a.runs} runs x {a.seconds} s, {a.connections} connections, medians:")
        print("| target | posts/s | ratio to the producer | p50 ms | p99 ms | CPU µs a post "
              "| peak RSS MB |")
        print("|---|---|---|---|---|---|---|")
        for name, rows in results.items():
            rate = statistics.median(v[0] for v in rows)
            cpu = statistics.median(v[3] for v in rows)
            rss = f"{peak_rss_mb(targets[name][0].pid):.0f}" if name in targets else ""
            print(f"| {name} | {rate:,.0f} ({min(v[0] for v in rows):,.0f}-"
                  f"{max(v[0] for v in rows):,.0f}) | {rate / ref:.2f} | "
                  f"{statistics.median(v[1] for v in rows):.2f} | "
                  f"{statistics.median(v[2] for v in rows):.2f} | "
                  f"{'' if cpu < 0 else f'{cpu:.1f}'} | {rss} |")
    finally:
        stop_procs(procs)
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
