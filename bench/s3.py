#!/usr/bin/env python3
"""The s3 output next to curl uploading the same bytes to the same server, in
the same run (docs/benchmarks.md):

    python3 bench/s3.py [--mb M] [--runs R] [--smoke]

Starts its own s3rver (tests/servers/servers.sh start s3), writes an NDJSON file
of about M MB, then R rounds of, alternately:

  curl    `curl -T` of the file to one object (a single PUT, the same server)
  kayak   kayak's file input into the s3 output (parts of 5 MiB, one object),
          timed from the process's start to the object being complete
          (HEAD answers), and checked byte-identical to the file

Prints MB/s per round, the medians and the ratio.
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
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from pipelines import Kayak, wait  # noqa: E402

SERVERS = os.path.join(ROOT, "tests", "servers", "servers.sh")


def exists(url):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10):
            return True
    except Exception:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny, for the test suite")
    a = ap.parse_args()
    if a.smoke:
        a.mb, a.runs = 2, 1
    work = tempfile.mkdtemp(prefix="kayak-bench-s3-")
    d = os.path.join(work, "s3")
    subprocess.run([SERVERS, "start", "s3", d], check=True)
    try:
        env = dict(l.strip().split("=", 1) for l in open(os.path.join(d, "env")) if "=" in l)
        ep = env["S3_ENDPOINT"]
        data = os.path.join(work, "in.ndjson")
        with open(data, "w") as f:
            i = 0
            while f.tell() < a.mb * 1_000_000:
                f.write(json.dumps({"seq": i, "device": f"d{i % 1000}", "value": i * 0.5,
                                    "note": "x" * (i % 40)}, separators=(",", ":")) + "\n")
                i += 1
        size = os.path.getsize(data)
        with open(data, "rb") as f:
            want = f.read()
        rates = {"curl": [], "kayak": []}
        for r in range(a.runs):
            t0 = time.monotonic()
            subprocess.run(["curl", "-sSf", "-T", data, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                            "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER",
                            f"{ep}/kayak/curl-{r}.ndjson"], check=True)
            rates["curl"].append(size / 1e6 / (time.monotonic() - t0))
            key = f"kayak-{r}/0000000001.ndjson"
            k = Kayak(work, f"pipelines:\n  p:\n    input: {{file: {{path: {data}, "
                            f"batch_size: 1000}}}}\n    outputs:\n      - s3: {{endpoint: '{ep}', "
                            f"bucket: kayak, path_style: true, access_key_id: S3RVER, "
                            f"secret_access_key: S3RVER, key: 'kayak-{r}/{{{{seq}}}}.ndjson', "
                            f"max_object_bytes: {size}" + "}\n")
            try:
                t1 = wait(lambda: exists(f"{ep}/kayak/{key}") and time.monotonic(), 1800,
                          "the object complete", 0.02)
                rates["kayak"].append(size / 1e6 / (t1 - k.started))
            finally:
                k.stop()
                shutil.rmtree(k.dir, ignore_errors=True)
            with urllib.request.urlopen(f"{ep}/kayak/{key}", timeout=600) as resp:
                if resp.read() != want:
                    raise SystemExit("the object is not the file's bytes")
            print(f"round {r + 1}: curl {rates['curl'][-1]:.1f} MB/s, kayak "
                  f"{rates['kayak'][-1]:.1f} MB/s", flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"\n{size / 1e6:.0f} MB, {a.runs} rounds, medians (min-max):")
        print("| what | MB/s | ratio |")
        print("|---|---|---|")
        for k in ("curl", "kayak"):
            v = rates[k]
            print(f"| {k} | {med[k]:.1f} ({min(v):.1f}-{max(v):.1f}) | {med[k] / med['curl']:.2f} |")
    finally:
        subprocess.run([SERVERS, "stop", "s3", d])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
