#!/usr/bin/env python3
"""The broker inputs next to the plain C client of the same server, in the
same run (docs/benchmarks.md):

    python3 bench/brokers.py [--messages N] [--runs R] [--only mqtt|nats|redis] [--smoke]

Starts its own mosquitto 2.0, nats-server 2.14 and redis-server 7 on free
loopback ports (tests/servers/servers.sh), then R rounds of each case, the
ceiling and kayak alternately:

  mqtt_qos0, mqtt_qos1  N messages published by mosquitto_pub -l (QoS 0) or
          brokertool mqtt-pub (QoS 1, 1,000 in flight) to a mosquitto
          without queue limits (max_queued_messages 0) to a topic while a
          libmosquitto subscriber (tests/brokers/brokertool mqtt-sub) writes each
          payload and a newline to a file, next to kayak's mqtt input (same QoS)
          into a file output
  nats    N messages published to a core subject while a libnats subscriber
          writes the file, next to kayak's nats input into a file output
  redis   N entries already in a stream, read by a hiredis XREADGROUP loop
          (COUNT 1000, XACK per batch) into the file, next to kayak's redis input
          (a consumer group, batches of 1000) into a file output, and the same
          input over TLS (rediss:// to the server's TLS port, through kayak's
          TlsTunnel: hiredis 0.14 has no TLS of its own)

A live case is timed from the publisher's start to the last byte of the N
messages in the file (the subscriber is ready before); the stream case from the
reader's start to the same. Prints messages/s per round, the medians and each
ratio to its ceiling.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from pipelines import Kayak, card, wait  # noqa: E402

SERVERS = os.path.join(ROOT, "tests", "servers", "servers.sh")
TOOL = os.environ.get("KAYAK_BROKERTOOL", os.path.join(ROOT, "build", "tests", "brokertool"))


def message_bytes(n):
    """Bytes of brokertool's messages 0..n-1, a newline after each."""
    return sum(len(f'{{"seq":{i},"device":"d{i % 4}","value":{i}}}') + 1 for i in range(n))


def dir_bytes(d):
    try:
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    except FileNotFoundError:
        return 0


def tool(*args):
    return subprocess.run([TOOL, *map(str, args)], check=True, capture_output=True, text=True,
                          timeout=600).stdout


def mosquitto_pub(url, topic, qos, lines):
    """mosquitto's own publisher, one message a line of `lines` (a file)."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    with open(lines) as f:
        subprocess.run(["mosquitto_pub", "-h", host, "-p", port, "-t", topic, "-q", str(qos), "-l"],
                       stdin=f, check=True, timeout=600)


def publisher(args):
    """A thread running the publisher `args`: brokertool's arguments, or a callable."""
    if callable(args):
        return threading.Thread(target=args)
    return threading.Thread(target=tool, args=args)


def lines_in(path):
    """Messages in a file, or in every file of a directory."""
    files = [path] if os.path.isfile(path) else \
        [os.path.join(path, f) for f in os.listdir(path)] if os.path.isdir(path) else []
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            n += fh.read().count(b"\n")
    return n


LOST = {}  # case -> messages lost over the rounds (QoS 0 is at most once)


def ceiling_live(sub_args, pub_args, out, want):
    """The plain subscriber ready, then the publisher: (seconds from the
    publisher's start to the last message in the file, messages there). The
    subscriber stops at N, or 10 s after its last message."""
    sub = subprocess.Popen([TOOL, *map(str, sub_args)], stdout=subprocess.PIPE, text=True)
    if sub.stdout.readline().strip() != "ready":
        raise SystemExit("the subscriber did not start")
    t0 = time.monotonic()
    pub = publisher(pub_args)
    pub.start()
    sub.wait(timeout=600)
    t1 = time.monotonic()
    pub.join()
    got = lines_in(out)
    if os.path.getsize(out) < want:
        t1 -= 10  # it waited 10 s for messages that did not come
    return t1 - t0, got


def kayak_live(work, input_yaml, ready, pub_args, want):
    """The same for kayak's input into a file output: (seconds, messages)."""
    d = tempfile.mkdtemp(dir=work)
    k = Kayak(work, f"pipelines:\n  p:\n    input: {input_yaml}\n"
                    f"    outputs: [{{file: {{path: {d}}}}}]\n")
    try:
        wait(lambda: ready(k), 60, "kayak to subscribe", 0.02)
        t0 = time.monotonic()
        pub = publisher(pub_args)
        pub.start()
        last, size, t1 = time.monotonic(), 0, None
        while time.monotonic() - last < 10:  # until every byte, or 10 s without one
            now_size = dir_bytes(d)
            if now_size != size:
                size, last = now_size, time.monotonic()
            if size >= want:
                t1 = time.monotonic()
                break
            time.sleep(0.005)
        pub.join()
        return (t1 or last) - t0, lines_in(d)
    finally:
        k.stop()
        shutil.rmtree(k.dir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def rate(case, n, result):
    seconds, got = result
    if got < n:
        LOST[case] = LOST.get(case, 0) + n - got
    return got / seconds


def report(n, runs, rates, pairs):
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n{n:,} messages, {runs} rounds, medians (min-max); messages/s counts what "
          "arrived, `lost` what did not (over all rounds):")
    print("| what | messages/s | ratio | lost |")
    print("|---|---|---|---|")
    for k, base in pairs:
        v = rates[k]
        print(f"| {k} | {med[k]:,.0f} ({min(v):,.0f}-{max(v):,.0f}) | {med[k] / med[base]:.2f} "
              f"| {LOST.get(k, 0)} |", flush=True)


def start(work, name):
    d = os.path.join(work, name)
    # mosquitto without its queue limits: at its defaults it drops QoS 0
    # messages a subscriber of either kind is not reading yet
    env = dict(os.environ, MOSQUITTO_MAX_QUEUED="0", MOSQUITTO_MAX_INFLIGHT="0")
    subprocess.run([SERVERS, "start", name, d], check=True, env=env)
    return d, dict(l.strip().split("=", 1) for l in open(os.path.join(d, "env")) if "=" in l)


def bench_mqtt(a, work, n):
    d, env = start(work, "mosquitto")
    url = env["MQTT_URL"]
    want = message_bytes(n)
    lines = os.path.join(work, "lines")
    with open(lines, "w") as f:
        for i in range(n):
            f.write(f'{{"seq":{i},"device":"d{i % 4}","value":{i}}}\n')
    try:
        rates = {k: [] for k in ("c_qos0", "kayak_qos0", "c_qos1", "kayak_qos1")}
        for r in range(a.runs):
            for qos in (0, 1):
                topic = f"b{r}q{qos}"
                out = os.path.join(work, "c.out")
                # mosquitto_pub -l is the fastest QoS 0 publisher here; at QoS 1 it keeps
                # 20 in flight and gives up on lines past them, so brokertool publishes
                # (1,000 in flight, every PUBACK awaited)
                pub = (lambda: mosquitto_pub(url, topic, qos, lines)) if qos == 0 else \
                    ("mqtt-pub", url, topic, n, 1)
                rates[f"c_qos{qos}"].append(rate(f"c_qos{qos}", n, ceiling_live(
                    ("mqtt-sub", url, topic, n, qos, out), pub, out, want)))
                rates[f"kayak_qos{qos}"].append(rate(f"kayak_qos{qos}", n, kayak_live(
                    work, f"{{mqtt: {{url: '{url}', topics: [{topic}], qos: {qos}}}}}",
                    lambda k: card(k.url, "p", "input")["position"].startswith("subscribed"),
                    pub, want)))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s"
                                                 for k, v in rates.items()), flush=True)
        report(n, a.runs, rates, (("c_qos0", "c_qos0"), ("kayak_qos0", "c_qos0"),
                                  ("c_qos1", "c_qos1"), ("kayak_qos1", "c_qos1")))
    finally:
        subprocess.run([SERVERS, "stop", "mosquitto", d])


def bench_nats(a, work, n):
    d, env = start(work, "nats")
    url = env["NATS_URL"]
    want = message_bytes(n)
    try:
        rates = {k: [] for k in ("c_core", "kayak_core")}
        for r in range(a.runs):
            subject = f"b.{r}"
            out = os.path.join(work, "c.out")
            rates["c_core"].append(rate("c_core", n, ceiling_live(
                ("nats-sub", url, subject, n, out), ("nats-pub", url, subject, n), out, want)))
            import urllib.request
            import json

            def subscribed(k):
                with urllib.request.urlopen(f"{env['NATS_MONITOR_URL']}/connz?subs=1") as resp:
                    conns = json.loads(resp.read()).get("connections", [])
                return any(subject in (c.get("subscriptions_list") or []) for c in conns)
            rates["kayak_core"].append(rate("kayak_core", n, kayak_live(
                work, f"{{nats: {{url: '{url}', subject: '{subject}', pending_limit: 1000000}}}}",
                subscribed, ("nats-pub", url, subject, n), want)))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s"
                                                 for k, v in rates.items()), flush=True)
        report(n, a.runs, rates, (("c_core", "c_core"), ("kayak_core", "c_core")))
    finally:
        subprocess.run([SERVERS, "stop", "nats", d])


def bench_redis(a, work, n):
    d, env = start(work, "redis")
    url = env["REDIS_URL"]
    want = message_bytes(n)
    try:
        tool("redis-pub", url, "readings", n)
        rates = {k: [] for k in ("c_xreadgroup", "kayak_stream", "kayak_stream_tls")}
        tls_url = env["REDIS_TLS_URL"].replace("127.0.0.1", "localhost")
        tls_extra = f", tls: {{ca_file: {env['REDIS_TLS_DIR']}/ca.crt}}"
        for r in range(a.runs):
            out = os.path.join(work, "c.out")
            t0 = time.monotonic()
            tool("redis-sub", url, "readings", f"c{r}", n, out)
            rates["c_xreadgroup"].append(n / (time.monotonic() - t0))
            if os.path.getsize(out) != want:
                raise SystemExit("the plain reader wrote the wrong number of bytes")
            for name, (u, extra) in (("kayak_stream", (url, "")),
                                     ("kayak_stream_tls", (tls_url, tls_extra))):
                dd = tempfile.mkdtemp(dir=work)
                k = Kayak(work, f"pipelines:\n  p:\n    input: {{redis: {{url: '{u}', stream: "
                                f"readings, group: {name}{r}, batch_size: 1000{extra}}}}}\n"
                                f"    outputs: [{{file: {{path: {dd}}}}}]\n")
                try:
                    t1 = wait(lambda: dir_bytes(dd) >= want and time.monotonic(), 600,
                              "every entry in kayak's file", 0.005)
                    rates[name].append(n / (t1 - k.started))
                finally:
                    k.stop()
                    shutil.rmtree(k.dir, ignore_errors=True)
                    shutil.rmtree(dd, ignore_errors=True)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s"
                                                 for k, v in rates.items()), flush=True)
        report(n, a.runs, rates, (("c_xreadgroup", "c_xreadgroup"),
                                  ("kayak_stream", "c_xreadgroup"),
                                  ("kayak_stream_tls", "c_xreadgroup")))
    finally:
        subprocess.run([SERVERS, "stop", "redis", d])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["mqtt", "nats", "redis"])
    ap.add_argument("--smoke", action="store_true", help="tiny, for the test suite")
    a = ap.parse_args()
    if a.smoke:
        a.messages, a.runs = 2000, 1
    work = tempfile.mkdtemp(prefix="kayak-bench-brokers-")
    try:
        if a.only in (None, "mqtt"):
            bench_mqtt(a, work, a.messages)
        if a.only in (None, "nats"):
            bench_nats(a, work, a.messages)
        if a.only in (None, "redis"):
            bench_redis(a, work, a.messages)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
