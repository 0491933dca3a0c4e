#!/usr/bin/env python3
"""What checkpoints every second cost a stateful pipeline with many keys.

`file -> rolling_window + bucket -> file` over MESSAGES messages spread over KEYS keys, without
a state directory and with one checkpointed every second, for each binary given (an older
build next to the current one, say), in turn, ROUNDS times; prints each run and the medians.

    python3 -u bench/state_interval.py [--messages N] [--keys K] [--rounds R]
        [--transforms both|window|bucket|none] [BIN ...]

With no BIN, build/kayak alone. `--transforms` keeps one of the two stateful transforms (or
neither), to see which one a difference comes from. docs/benchmarks.md, "State at scale".
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pipelines as P  # noqa: E402


WINDOW = ("      - rolling_window: {key: k, field: v, window_messages: 10,"
          " aggregates: [count, sum]}\n")
BUCKET = "      - bucket: {name: sums, key: k, op: add, field: v, as: total}\n"
TRANSFORMS = {"both": WINDOW + BUCKET, "window": WINDOW, "bucket": BUCKET, "none": ""}


def config(data, out, transforms="both"):
    chain = TRANSFORMS[transforms]
    return ("buckets:\n  sums: {}\n" if BUCKET in chain else "") + \
        (f"pipelines:\n  p:\n    input: {{file: {{path: {data}}}}}\n") + \
        (f"    transforms:\n{chain}" if chain else "") + \
        f"    outputs: [{{file: {{path: {out}}}}}]\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transforms", choices=sorted(TRANSFORMS), default="both")
    ap.add_argument("bins", nargs="*", default=[P.KAYAK])
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kayak-bench-state-")
    try:
        data = os.path.join(work, "data.ndjson")
        P.write_data(data, a.messages, a.keys)
        res = {}
        pauses = {}
        for r in range(a.rounds):
            for b in a.bins:
                P.KAYAK = b
                for mode, interval in (("no state dir", None), ("--state-dir, 1 s", 1)):
                    out = tempfile.mkdtemp(dir=work)
                    state = os.path.join(work, "state") if interval else None
                    rate, rss, cps, pause = P.timed_run(work, config(data, out, a.transforms), a.messages,
                                                        interval, state)
                    shutil.rmtree(out, ignore_errors=True)
                    if state:
                        shutil.rmtree(state, ignore_errors=True)
                    res.setdefault((b, mode), []).append(rate)
                    pauses.setdefault(b, []).append(pause)
                    print(f"round {r + 1} {b} {mode}: {rate:,.0f} msg/s, {cps} checkpoints, "
                          f"longest barrier pause {pause / 1000:.1f} ms, peak {rss:.0f} MB",
                          flush=True)
        for b in a.bins:
            plain = statistics.median(res[(b, "no state dir")])
            ck = statistics.median(res[(b, "--state-dir, 1 s")])
            print(f"{b}: no state dir {plain:,.0f} msg/s, --state-dir 1 s {ck:,.0f} msg/s "
                  f"({ck / plain - 1:+.1%}); longest barrier pause "
                  f"{max(pauses[b]) / 1000:.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
