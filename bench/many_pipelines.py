#!/usr/bin/env python3
"""Many pipelines: how soon the listener answers, how long the overview takes, and whether
probes wait behind it; with --state-dir, how soon a stop during the start is honoured.

    python3 bench/many_pipelines.py BINARY N [--state-dir]

Writes N pipelines `dummy {count: 1}` -> `file` into a temporary directory, starts BINARY on a
free loopback port, polls /health every 20 ms (at most 300 s), then either sends SIGTERM (with
--state-dir) and times the exit, or times five overviews while probing /health 40 times.
Run it for two binaries in the same session to compare (docs/benchmarks.md).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    binary, n = os.path.abspath(sys.argv[1]), int(sys.argv[2])
    state = "--state-dir" in sys.argv[3:]
    work = tempfile.mkdtemp(prefix="kayak-many-")
    port = free_port()
    with open(os.path.join(work, "p.yaml"), "w") as f:
        f.write("pipelines:\n")
        for i in range(n):
            f.write(f"  p{i}:\n    input: {{dummy: {{count: 1}}}}\n"
                    f"    outputs: [{{file: {{path: out/p{i}}}}}]\n")
    with open(os.path.join(work, "s.yaml"), "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\n")
    args = [binary, "--config", "p.yaml", "--server-config", "s.yaml"]
    if state:
        args += ["--state-dir", "st"]
    log = open(os.path.join(work, "log"), "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=work, stderr=log)

    def get(path, timeout=30):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return None, b""

    try:
        first = ok = None
        while time.monotonic() - t0 < 300 and proc.poll() is None:
            status, _ = get("/health", 1)
            now = time.monotonic() - t0
            if status is not None and first is None:
                first = (now, status)
            if status == 200:
                ok = now
                break
            time.sleep(0.02)
        print(f"{n} pipelines: first /health answer {first[0]:.2f} s ({first[1]}), "
              f"first 200 at {ok:.2f} s")
        if state:
            t1 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
            with open(os.path.join(work, "log")) as f:
                started = f.read().count("engine started")
            print(f"SIGTERM once built: exit {proc.returncode} after "
                  f"{time.monotonic() - t1:.2f} s, {started} regions started")
            return
        latencies = []

        def probe():
            for _ in range(40):
                a = time.monotonic()
                get("/health")
                latencies.append(time.monotonic() - a)
                time.sleep(0.01)

        prober = threading.Thread(target=probe)
        prober.start()
        overviews, size = [], 0
        for _ in range(5):
            a = time.monotonic()
            _, body = get("/api/v1/overview", 60)
            overviews.append(time.monotonic() - a)
            size = len(body)
        prober.join()
        latencies.sort()
        overviews.sort()
        print(f"overview {size} bytes: median {overviews[2]:.3f} s; /health meanwhile median "
              f"{latencies[len(latencies) // 2] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
