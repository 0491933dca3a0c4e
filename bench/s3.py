#!/usr/bin/env python3
"""The s3 output next to curl uploading the same bytes to the same server, in
the same run (docs/benchmarks.md):

    python3 bench/s3.py [--mb M] [--runs R] [--smoke]

Starts its own moto S3 server with S3's rules (tests/servers/servers.sh start
s3strict), writes an NDJSON file
of about M MB, then R rounds of, alternately:

  curl         `curl -T` of the file to one object (a single PUT, the same server)
  kayak        kayak's file input into the s3 output (parts of 5 MiB, one
               object), timed from the process's start to the object being
               complete (HEAD answers), and checked byte-identical to the file
  gzip+curl    `gzip -6` of the file, then `curl -T` of the result
  kayak-gzip   the s3 output with `compression: gzip`, checked by decompressing
  zstd+curl    `zstd -3` of the file, then `curl -T` of the result
  kayak-zstd   the s3 output with `compression: zstd`

MB/s are of the uncompressed file in every row. Prints MB/s per round, the
medians and the ratios (each compressed row also next to its own tool pair).
"""
import argparse
import gzip
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
    subprocess.run([SERVERS, "start", "s3strict", d], check=True)
    try:
        env = dict(l.strip().split("=", 1) for l in open(os.path.join(d, "env")) if "=" in l)
        ep = env["S3_ENDPOINT"]
        key_id, secret = env["S3_ACCESS_KEY_ID"], env["S3_SECRET_ACCESS_KEY"]
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
        rates = {k: [] for k in ("curl", "kayak", "gzip+curl", "kayak-gzip", "zstd+curl",
                                 "kayak-zstd")}

        def curl(path, key):
            subprocess.run(["curl", "-sSf", "-T", path, "-H",
                            "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--aws-sigv4",
                            "aws:amz:us-east-1:s3", "--user", f"{key_id}:{secret}",
                            f"{ep}/kayak/{key}"], check=True)

        def tools(tool, r):  # compress with the tool, then upload
            t0 = time.monotonic()
            packed = os.path.join(work, "packed")
            with open(packed, "wb") as out:
                subprocess.run([tool, "-6" if tool == "gzip" else "-3", "-c", data], stdout=out,
                               check=True)
            curl(packed, f"{tool}-{r}")
            return size / 1e6 / (time.monotonic() - t0)

        def kayak(comp, r):
            key = f"kayak-{comp}-{r}/0000000001.ndjson"
            k = Kayak(work, f"pipelines:\n  p:\n    input: {{file: {{path: {data}, "
                            f"batch_size: 1000}}}}\n    outputs:\n      - s3: {{endpoint: '{ep}', "
                            f"bucket: kayak, path_style: true, access_key_id: {key_id}, "
                            f"secret_access_key: {secret}, key: 'kayak-{comp}-{r}/{{{{seq}}}}.ndjson', "
                            f"max_object_bytes: {size}, compression: {comp}" + "}\n")
            try:
                t1 = wait(lambda: exists(f"{ep}/kayak/{key}") and time.monotonic(), 1800,
                          "the object complete", 0.02)
                rate = size / 1e6 / (t1 - k.started)
            finally:
                k.stop()
                shutil.rmtree(k.dir, ignore_errors=True)
            with urllib.request.urlopen(f"{ep}/kayak/{key}", timeout=600) as resp:
                body = resp.read()
            if comp == "gzip":
                body = gzip.decompress(body)
            elif comp == "zstd":
                body = subprocess.run(["zstd", "-dcq"], input=body, capture_output=True,
                                      check=True).stdout
            if body != want:
                raise SystemExit(f"the {comp} object is not the file's bytes")
            return rate

        for r in range(a.runs):
            t0 = time.monotonic()
            curl(data, f"curl-{r}.ndjson")
            rates["curl"].append(size / 1e6 / (time.monotonic() - t0))
            rates["kayak"].append(kayak("none", r))
            for tool in ("gzip", "zstd"):
                rates[f"{tool}+curl"].append(tools(tool, r))
                rates[f"kayak-{tool}"].append(kayak(tool, r))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()) +
                  " MB/s", flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"\n{size / 1e6:.0f} MB, {a.runs} rounds, medians (min-max):")
        print("| what | MB/s | / curl | / its tools |")
        print("|---|---|---|---|")
        for k, v in rates.items():
            pair = {"kayak-gzip": "gzip+curl", "kayak-zstd": "zstd+curl"}.get(k)
            print(f"| {k} | {med[k]:.1f} ({min(v):.1f}-{max(v):.1f}) | "
                  f"{med[k] / med['curl']:.2f} | {f'{med[k] / med[pair]:.2f}' if pair else ''} |")
    finally:
        subprocess.run([SERVERS, "stop", "s3strict", d])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
