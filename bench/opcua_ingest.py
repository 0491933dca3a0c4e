#!/usr/bin/env python3
"""OPC UA data changes into kayak, next to node-opcua's own client.

    python3 bench/opcua_ingest.py [--items 1000] [--seconds 10] [--runs 3]
                                  [--security Basic256Sha256]

Starts the test server (tests/servers/opcua-server.js, node-opcua) on
127.0.0.1 with `--items N` variables Bench.V0..V<N-1>, each changed every
100 ms (N x 10 changes a second), then in each run, one after the other:

  node-opcua client  bench/opcua_client.js subscribed to every variable
                     (sampling 100 ms, publishing 500 ms, queue 10), counting
                     the changes it receives: the ceiling
  kayak              the opcua input with the same settings -> file output

Each counts over the same window after a warm-up (the subscription made and
the first values in): changes received per second, and the CPU time the
receiver spent in the window (utime + stime from /proc/<pid>/stat for kayak,
process.cpuUsage() for node) per change. Prints one line per run and a table
of medians with kayak's ratio to the ceiling. With --security POLICY both
connect under that policy in mode SignAndEncrypt (node-opcua's client with a
certificate it makes, kayak with one made by tests/e2e/tls_ca.py).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from pipelines import Kayak, card, wait  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import tls_ca  # noqa: E402

SERVERS = os.path.join(ROOT, "tests", "servers")
NODE_PATH = os.path.join(SERVERS, "npm", "node_modules")
SAMPLING, PUBLISHING, QUEUE = 100, 500, 10


def cpu_secs(pid):
    """utime + stime of a process, from /proc/<pid>/stat, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_node(url, items, warmup, seconds, security, work):
    r = subprocess.run(["node", os.path.join(ROOT, "bench", "opcua_client.js"), url, str(items),
                        str(SAMPLING), str(PUBLISHING), str(QUEUE), str(warmup), str(seconds),
                        security, os.path.join(work, "node-pki")],
                       capture_output=True, text=True, timeout=warmup + seconds + 120,
                       env=dict(os.environ, NODE_PATH=NODE_PATH))
    line = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not line:
        raise SystemExit(f"opcua_client.js failed: {r.stderr[-2000:]}")
    d = json.loads(line[-1])
    return d["changes"] / d["secs"], d["cpu_secs"] / max(d["changes"], 1) * 1e6


def run_kayak(url, items, warmup, seconds, security, work):
    nodes = ", ".join(f"'ns=1;s=Bench.V{i}'" for i in range(items))
    secure = ""
    if security != "None":
        secure = (f", security_policy: {security}, certificate_file: {work}/app.crt, "
                  f"private_key_file: {work}/app.key")
    k = Kayak(work, f"pipelines:\n  p:\n    input: {{opcua: {{endpoint: '{url}', nodes: [{nodes}], "
                    f"sampling_ms: {SAMPLING}, publishing_ms: {PUBLISHING}, "
                    f"queue_size: {QUEUE}{secure}}}}}\n"
                    f"    outputs: [{{file: {{path: {work}/out-{time.monotonic_ns()}}}}}]\n")
    try:
        n_in = lambda: card(k.url, "p", "input")["messages_in"]  # noqa: E731
        wait(lambda: n_in() >= items, 60, "the first values")
        time.sleep(warmup)  # a window after the first values: the measurement, not a wait
        n0, c0, t0 = n_in(), cpu_secs(k.proc.pid), time.monotonic()
        time.sleep(seconds)
        n1, c1, t1 = n_in(), cpu_secs(k.proc.pid), time.monotonic()
        return (n1 - n0) / (t1 - t0), (c1 - c0) / max(n1 - n0, 1) * 1e6
    finally:
        k.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--security", default="None",
                    choices=["None", "Basic256Sha256", "Aes128_Sha256_RsaOaep",
                             "Aes256_Sha256_RsaPss"])
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kayak-bench-opcua-")
    if a.security != "None":
        tls_ca.self_signed("app", "kayak", work, 2048, "subjectAltName=URI:urn:kayak:bench",
                           "keyUsage=critical,digitalSignature,nonRepudiation,keyEncipherment,"
                           "dataEncipherment")
    srv = os.path.join(work, "server")
    env = dict(os.environ, OPCUA_ARGS=f"--items {a.items}")
    subprocess.run([os.path.join(SERVERS, "servers.sh"), "start", "opcua", srv], check=True,
                   env=env, timeout=180)
    try:
        with open(os.path.join(srv, "env")) as f:
            url = dict(l.strip().split("=", 1) for l in f if "=" in l)["OPCUA_URL"]
        rows = {"node-opcua client": [], "kayak opcua -> file": []}
        print(f"{a.items} variables changed every 100 ms ({a.items * 10} changes/s offered), "
              f"{a.runs} runs of {a.seconds:g} s, SecurityPolicy {a.security}", flush=True)
        for i in range(a.runs):
            rate, cpu = run_node(url, a.items, a.warmup, a.seconds, a.security, work)
            rows["node-opcua client"].append((rate, cpu))
            print(f"run {i + 1}: node-opcua client {rate:,.0f} changes/s, {cpu:.1f} us CPU/change",
                  flush=True)
            rate, cpu = run_kayak(url, a.items, a.warmup, a.seconds, a.security, work)
            rows["kayak opcua -> file"].append((rate, cpu))
            print(f"run {i + 1}: kayak {rate:,.0f} changes/s, {cpu:.1f} us CPU/change", flush=True)
        if any(r <= 0 for vals in rows.values() for r, _ in vals):
            raise SystemExit("a receiver received no changes")
        ceiling = statistics.median(r for r, _ in rows["node-opcua client"])
        print("\n| receiver | changes/s (median) | ratio | CPU µs/change |")
        print("|---|---|---|---|")
        for name, vals in rows.items():
            rate = statistics.median(r for r, _ in vals)
            cpu = statistics.median(c for _, c in vals)
            print(f"| {name} | {rate:,.0f} | {rate / ceiling:.2f} | {cpu:.1f} |")
    finally:
        subprocess.run([os.path.join(SERVERS, "servers.sh"), "stop", "opcua", srv], timeout=120)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
