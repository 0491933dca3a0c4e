#!/usr/bin/env python3
"""The database connectors next to the fastest plain client of the same server,
in the same run (docs/benchmarks.md).

    python3 bench/databases.py [--rows N] [--runs R] [--only postgres|clickhouse] [--smoke]

Starts its own servers on free loopback ports (tests/servers/servers.sh), fills
`readings` (id, ts, device, value) with N rows, then R rounds of, for PostgreSQL 15:

  read    psql's \\copy (SELECT ...) TO a file, next to kayak's postgres input
          (incremental on (ts, id), batches of 1000) into a file output
  upsert  \\copy FROM a CSV file into an empty table with a primary key, next to
          kayak's file input (batches of 1000) into the postgres output with
          key: [id] into an empty table

and for ClickHouse 18.16:

  read    clickhouse-client SELECT ... FORMAT JSONEachRow into a file, next to
          kayak's clickhouse input (incremental on (ts, id), batches of 1000)
  insert  clickhouse-client INSERT ... FORMAT JSONEachRow from the NDJSON file,
          next to kayak's file input (batches of 1000) into the clickhouse output

kayak is timed from its process's start to its output's card counting N (or, for
the clickhouse output, which gathers rows, to the table counting N); the client
from its start to its exit. Prints rows/s per round and the medians and ratios.
"""
import argparse
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
from pipelines import Kayak, card, wait  # noqa: E402

SERVERS = os.path.join(ROOT, "tests", "servers", "servers.sh")


def psql(url, sql):
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"psql: {r.stderr}")
    return r.stdout.strip()


def timed(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
    return time.monotonic() - t0


def kayak_rate(work, pipelines, n, landed=None):
    """Rows/s from the process's start (as the clients are timed from theirs) to
    the output's card counting n, or to landed() when given (an output that
    gathers rows before it sends them)."""
    k = Kayak(work, pipelines)
    try:
        t0 = k.started
        done = landed or (lambda: card(k.url, "p", "outputs[0]")["messages_out"] >= n)
        t1 = wait(lambda: done() and time.monotonic(), 1800, "every row out", interval=0.02)
        return n / (t1 - t0)
    finally:
        k.stop()
        shutil.rmtree(k.dir, ignore_errors=True)


def http_count(url, table):
    """count() of a ClickHouse table over HTTP (cheaper to poll than a client process)."""
    with urllib.request.urlopen(url + "/", data=f"SELECT count() FROM {table}".encode(),
                                timeout=60) as r:
        return int(r.read())


def report(n, runs, rates, pairs):
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n{n:,} rows, {runs} rounds, medians (min-max):")
    print("| what | rows/s | ratio |")
    print("|---|---|---|")
    for k, base in pairs:
        v = rates[k]
        print(f"| {k} | {med[k]:,.0f} ({min(v):,.0f}-{max(v):,.0f}) | {med[k] / med[base]:.2f} |",
              flush=True)


def bench_postgres(a, work, n):
    pgdir = os.path.join(work, "pg")
    subprocess.run([SERVERS, "start", "postgres", pgdir], check=True)
    try:
        env = dict(l.strip().split("=", 1) for l in open(os.path.join(pgdir, "env")) if "=" in l)
        url = env["PG_URL"]
        psql(url, "CREATE TABLE readings (id bigint PRIMARY KEY, ts timestamptz NOT NULL, "
                  "device text, value float8); CREATE INDEX ON readings (ts, id);"
                  f"INSERT INTO readings SELECT g, timestamptz '2026-01-01' + g / 10 * "
                  f"interval '1 second', 'device-' || (g % 1000), (g % 997) / 7.0 "
                  f"FROM generate_series(1, {n}) g;")
        psql(url, "VACUUM ANALYZE readings")
        csv = os.path.join(work, "readings.csv")
        ndjson = os.path.join(work, "readings.ndjson")
        psql(url, f"\\copy readings TO '{csv}' WITH (FORMAT csv)")
        psql(url, f"\\copy (SELECT row_to_json(r) FROM readings r) TO '{ndjson}'")
        rates = {k: [] for k in ("copy_to", "kayak_read", "copy_from", "kayak_upsert")}
        for r in range(a.runs):
            out = os.path.join(work, "copy.out")
            rates["copy_to"].append(n / timed(
                ["psql", "-X", "-q", url, "-c",
                 f"\\copy (SELECT id, ts, device, value FROM readings) TO '{out}'"]))
            os.unlink(out)
            d = tempfile.mkdtemp(dir=work)
            rates["kayak_read"].append(kayak_rate(work, (
                f"pipelines:\n  p:\n    input:\n      postgres: {{url: '{url}', query: "
                f"'SELECT id, ts, device, value FROM readings', watermark: ts, tiebreak: id, "
                f"batch_size: 1000}}\n    outputs: [{{file: {{path: {d}}}}}]\n"), n))
            shutil.rmtree(d, ignore_errors=True)
            psql(url, "DROP TABLE IF EXISTS sink; CREATE TABLE sink (LIKE readings INCLUDING ALL)")
            rates["copy_from"].append(n / timed(
                ["psql", "-X", "-q", url, "-c", f"\\copy sink FROM '{csv}' WITH (FORMAT csv)"]))
            psql(url, "DROP TABLE sink; CREATE TABLE sink (LIKE readings INCLUDING ALL)")
            rates["kayak_upsert"].append(kayak_rate(work, (
                f"pipelines:\n  p:\n    input: {{file: {{path: {ndjson}, batch_size: 1000}}}}\n"
                f"    outputs:\n      - postgres: {{url: '{url}', table: sink, key: [id]}}\n"), n))
            got = psql(url, "SELECT count(*) FROM sink")
            if got != str(n):
                raise SystemExit(f"the upsert wrote {got} rows of {n}")
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} rows/s"
                                                 for k, v in rates.items()), flush=True)
        report(n, a.runs, rates, (("copy_to", "copy_to"), ("kayak_read", "copy_to"),
                                  ("copy_from", "copy_from"), ("kayak_upsert", "copy_from")))
    finally:
        subprocess.run([SERVERS, "stop", "postgres", pgdir])


def bench_clickhouse(a, work, n):
    chdir = os.path.join(work, "ch")
    subprocess.run([SERVERS, "start", "clickhouse", chdir], check=True)
    try:
        env = dict(l.strip().split("=", 1) for l in open(os.path.join(chdir, "env")) if "=" in l)
        url, port = env["CLICKHOUSE_URL"], env["CLICKHOUSE_TCP_PORT"]
        client = ["clickhouse-client", "--host", "127.0.0.1", "--port", port]

        def q(sql, **kw):
            return subprocess.run(client + ["--query", sql], check=True, capture_output=True,
                                  timeout=1800, **kw)
        q("CREATE TABLE readings (id UInt64, ts DateTime, device String, value Float64) "
          "ENGINE = MergeTree() ORDER BY (ts, id)")
        q(f"INSERT INTO readings SELECT number + 1, toDateTime('2026-01-01 00:00:00') + "
          f"intDiv(number + 1, 10), concat('device-', toString((number + 1) % 1000)), "
          f"((number + 1) % 997) / 7 FROM system.numbers LIMIT {n}")
        ndjson = os.path.join(work, "ch.ndjson")
        with open(ndjson, "wb") as f:
            subprocess.run(client + ["--query", "SELECT * FROM readings FORMAT JSONEachRow"],
                           stdout=f, check=True, timeout=1800)
        rates = {k: [] for k in ("client_select", "kayak_read", "client_insert", "kayak_insert")}
        for r in range(a.runs):
            out = os.path.join(work, "client.out")
            with open(out, "wb") as f:
                t0 = time.monotonic()
                subprocess.run(client + ["--query", "SELECT id, ts, device, value FROM readings "
                                                    "ORDER BY ts, id FORMAT JSONEachRow"],
                               stdout=f, check=True, timeout=1800)
                rates["client_select"].append(n / (time.monotonic() - t0))
            os.unlink(out)
            d = tempfile.mkdtemp(dir=work)
            rates["kayak_read"].append(kayak_rate(work, (
                f"pipelines:\n  p:\n    input:\n      clickhouse: {{url: '{url}', query: "
                f"'SELECT id, ts, device, value FROM readings', watermark: ts, tiebreak: id, "
                f"batch_size: 1000}}\n    outputs: [{{file: {{path: {d}}}}}]\n"), n))
            shutil.rmtree(d, ignore_errors=True)
            for t in ("sink",):
                q(f"DROP TABLE IF EXISTS {t}")
                q(f"CREATE TABLE {t} AS readings")
            with open(ndjson, "rb") as f:
                t0 = time.monotonic()
                subprocess.run(client + ["--query", "INSERT INTO sink FORMAT JSONEachRow"],
                               stdin=f, check=True, capture_output=True, timeout=1800)
                rates["client_insert"].append(n / (time.monotonic() - t0))
            q("DROP TABLE sink")
            q("CREATE TABLE sink AS readings")
            rates["kayak_insert"].append(kayak_rate(work, (
                f"pipelines:\n  p:\n    input: {{file: {{path: {ndjson}, batch_size: 1000}}}}\n"
                f"    outputs:\n      - clickhouse: {{url: '{url}', table: sink}}\n"), n,
                landed=lambda: http_count(url, "sink") == n))
            got = q("SELECT count() FROM sink").stdout.decode().strip()
            if got != str(n):
                raise SystemExit(f"the clickhouse output wrote {got} rows of {n}")
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} rows/s"
                                                 for k, v in rates.items()), flush=True)
        report(n, a.runs, rates, (("client_select", "client_select"),
                                  ("kayak_read", "client_select"),
                                  ("client_insert", "client_insert"),
                                  ("kayak_insert", "client_insert")))
    finally:
        subprocess.run([SERVERS, "stop", "clickhouse", chdir])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["postgres", "clickhouse"])
    ap.add_argument("--smoke", action="store_true", help="tiny, for the test suite")
    a = ap.parse_args()
    if a.smoke:
        a.rows, a.runs = 2000, 1
    work = tempfile.mkdtemp(prefix="kayak-bench-db-")
    os.chmod(work, 0o755)  # the postgres server runs as the postgres user when we are root
    try:
        if a.only in (None, "postgres"):
            bench_postgres(a, work, a.rows)
        if a.only in (None, "clickhouse"):
            bench_clickhouse(a, work, a.rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
