#!/usr/bin/env python3
"""The udp input next to a plain recvmmsg receiver, in the same run
(docs/benchmarks.md):

    python3 bench/udp.py [--messages N] [--rates R,...] [--runs R] [--senders K] [--smoke]

bench/udp_tool.c (compiled by this script) sends N datagrams of about 40
bytes to 127.0.0.1 at each offered rate (0: as fast as it can; from K
processes at once), in turn to its
own receiver (recvmmsg 64 at a time, each datagram and a newline written to a
file: the bytes kayak's file output writes; a 4 MiB receive buffer) and to
kayak's udp input (buffer_bytes 4 MiB) into a file output. UDP has no
backpressure, so what a receiver cannot keep up with the kernel drops: each
row gives the datagrams that reached the file and the rate of the send, and
kayak's card must count every datagram it did not deliver (checked).
Medians over the rounds.
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pipelines import Kayak, card, wait  # noqa: E402


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lines_in(path):
    files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in os.listdir(path)]
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            n += fh.read().count(b"\n")
    return n


SENDERS = 1


def send(tool, port, n, rate):
    """n datagrams from SENDERS processes at once (each n / SENDERS, at rate / SENDERS)."""
    k = SENDERS if n >= SENDERS else 1
    t0 = time.monotonic()
    procs = [subprocess.Popen([tool, "send", str(port), str(n // k + (i < n % k)),
                               str(rate // k)]) for i in range(k)]
    for p in procs:
        if p.wait(timeout=600) != 0:
            raise SystemExit("a sender failed")
    return time.monotonic() - t0


def ceiling(tool, work, n, rate):
    port, out = free_port(), os.path.join(work, "ceiling.out")
    recv = subprocess.Popen([tool, "recv", str(port), out, "1000"], stdout=subprocess.PIPE,
                            text=True)
    if recv.stdout.readline().strip() != "ready":
        raise SystemExit("the receiver did not start")
    secs = send(tool, port, n, rate)
    recv.wait(timeout=600)
    got = lines_in(out)
    os.remove(out)
    return secs, got, 0


def kayak(tool, work, n, rate):
    port, d = free_port(), tempfile.mkdtemp(dir=work)
    k = Kayak(work, f"pipelines:\n  p:\n    input: {{udp: {{listen: '127.0.0.1:{port}', "
                    f"buffer_bytes: 4194304}}}}\n    outputs: [{{file: {{path: {d}}}}}]\n")
    try:
        wait(lambda: card(k.url, "p", "input")["position"].startswith("listening"), 60,
             "kayak to listen", 0.02)
        secs = send(tool, port, n, rate)
        last, got = time.monotonic(), -1
        while time.monotonic() - last < 1.0:  # until a second without a new line
            now = lines_in(d)
            if now != got:
                got, last = now, time.monotonic()
            time.sleep(0.02)
        # the drops are counted with the next datagram the kernel queues
        send(tool, port, 1, 0)
        wait(lambda: lines_in(d) > got, 10, "the datagram after the run", 0.02)
        errors = card(k.url, "p", "input")["errors"]
        return secs, got, errors
    finally:
        k.stop()
        shutil.rmtree(k.dir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rates", default="200000,400000,0")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--senders", type=int, default=1, help="sending processes at once")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    global SENDERS
    SENDERS = args.senders
    if args.smoke:
        args.messages, args.rates, args.runs = 2000, "100000", 1
    work = tempfile.mkdtemp(prefix="kayak-udp-")
    tool = os.path.join(work, "udp_tool")
    subprocess.run(["cc", "-O2", "-o", tool, os.path.join(HERE, "udp_tool.c")], check=True)
    rows = []
    try:
        for rate in [int(r) for r in args.rates.split(",")]:
            results = {"recvmmsg receiver": [], "kayak udp → file": []}
            for _ in range(args.runs):
                for name, fn in (("recvmmsg receiver", ceiling), ("kayak udp → file", kayak)):
                    secs, got, errors = fn(tool, work, args.messages, rate)
                    lost = args.messages - got
                    if name.startswith("kayak") and errors < lost:
                        raise SystemExit(f"kayak lost {lost} datagrams and counted {errors}")
                    results[name].append((got, secs))
                    print(f"rate {rate or 'max'}: {name}: {got} of {args.messages} "
                          f"({100 * got / args.messages:.1f}%), sent in {secs:.2f} s"
                          + (f", {errors} counted on the card" if name.startswith("kayak") else ""),
                          flush=True)
            for name, rs in results.items():
                got = statistics.median(r[0] for r in rs)
                secs = statistics.median(r[1] for r in rs)
                rows.append((rate, name, got, args.messages / secs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| offered rate | receiver | delivered, median | share | sent at |")
    print("|---|---|---|---|---|")
    for rate, name, got, sent in rows:
        print(f"| {rate or 'at once'} | {name} | {int(got):,} | {100 * got / args.messages:.1f}% "
              f"| {sent:,.0f}/s |")


if __name__ == "__main__":
    main()
