"""The clickhouse input and output against a real ClickHouse 18.16 (started once
per run by the CTest fixture): types, the cursor over bursts of equal
timestamps, restarts, lag_secs, snapshots, refused rows, the server going away,
and options that do not fit."""
import json
import os
import subprocess
import unittest
import urllib.parse

from harness import KAYAK, KayakTest, committed, wait_for
from servers import Proxy, ch, ch_rows, ch_url

SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"


def via(proxy):
    return f"http://127.0.0.1:{proxy.port}"


def ch_port():
    return urllib.parse.urlsplit(ch_url()).port


class ClickhouseTest(KayakTest):
    def setUp(self):
        super().setUp()
        # one database per test: tests run in parallel against one server
        self.db = f"t_{self.id().split('.')[-1].lower()}_{os.getpid()}"
        ch(f"DROP DATABASE IF EXISTS {self.db}")
        ch(f"CREATE DATABASE {self.db}")
        self.addCleanup(ch, f"DROP DATABASE IF EXISTS {self.db}")

    def t(self, name):
        return f"{self.db}.{name}"

    def ch_input(self, query, extra="", url=None):
        return (f"{{clickhouse: {{url: '{url or ch_url()}', query: '{query}'"
                f"{', ' + extra if extra else ''}}}}}")

    def graph(self, input_yaml, outputs=None):
        outs = outputs or f"[{{file: {{path: {self.path('out')}}}}}]"
        return f"pipelines:\n  p:\n    input: {input_yaml}\n    outputs: {outs}\n"

    def out(self):
        return [json.loads(l) for l in self.read_output("out")]

    def test_types_become_json(self):
        ch(f"""CREATE TABLE {self.t('r')} (id UInt64, ts DateTime, d Date, f Float64, i Int64,
               s String, n Nullable(Int32), nts Nullable(DateTime), a Array(String),
               dec Decimal(10, 2)) ENGINE = MergeTree() ORDER BY id""")
        ch(f"INSERT INTO {self.t('r')} FORMAT JSONEachRow",
           '{"id":18446744073709551615,"ts":"2026-01-02 03:04:05","d":"2026-01-02","f":1.5,'
           '"i":-9007199254740993,"s":"h\\u00e9 \\"q\\"","n":null,"nts":"2026-01-02 03:04:05",'
           '"a":["x","y"],"dec":12.5}\n'
           '{"id":1,"ts":"2026-01-01 00:00:00","d":"2026-01-01","f":"nan","i":0,"s":"",'
           '"n":7,"nts":null,"a":[],"dec":0}\n')
        s = self.start(self.graph(self.ch_input(f"SELECT * FROM {self.t('r')}",
                                                "watermark: id")))
        wait_for(lambda: len(self.out()) == 2, what="two rows")
        b, a = self.out()  # in watermark order: id 1 first
        self.assertEqual(a, {"id": 18446744073709551615, "ts": "2026-01-02T03:04:05Z",
                             "d": "2026-01-02", "f": 1.5, "i": -9007199254740993,
                             "s": 'hé "q"', "n": None, "nts": "2026-01-02T03:04:05Z",
                             "a": ["x", "y"], "dec": 12.5})
        self.assertIn('"id":18446744073709551615', self.read_output("out")[1])
        self.assertEqual((b["f"], b["n"], b["nts"]), ("nan", 7, None))
        s.stop()

    def test_cursor_reads_bursts_of_equal_timestamps_once(self):
        src = self.t("src")
        ch(f"CREATE TABLE {src} (id UInt64, ts DateTime, k UInt32) ENGINE = MergeTree() "
           f"ORDER BY (ts, id)")
        s = self.start(self.graph(self.ch_input(
            f"SELECT id, ts, k FROM {src}",
            "watermark: ts, tiebreak: id, batch_size: 7, poll_secs: 0.05")))
        for burst in range(10):
            ch(f"INSERT INTO {src} SELECT {burst * 100} + number + 1, "
               f"toDateTime('2026-01-01 00:00:00') + {burst}, number FROM system.numbers "
               f"LIMIT 100")
        wait_for(lambda: len(self.out()) >= 1000, timeout=60, what="1000 rows")
        ids = [m["id"] for m in self.out()]
        self.assertEqual(sorted(ids), list(range(1, 1001)))
        self.assertEqual(ids, sorted(ids), "read out of (ts, id) order")
        s.stop()

    def test_without_tiebreak_a_burst_is_read_whole(self):
        src = self.t("src")
        ch(f"CREATE TABLE {src} (id UInt64, ts UInt64) ENGINE = MergeTree() ORDER BY id")
        ch(f"INSERT INTO {src} SELECT number + 1, intDiv(number, 25) FROM system.numbers "
           f"LIMIT 200")
        s = self.start(self.graph(self.ch_input(
            f"SELECT id, ts FROM {src}", "watermark: ts, batch_size: 10, poll_secs: 0.05")))
        wait_for(lambda: len(self.out()) >= 200, timeout=30, what="200 rows")
        # a row after them: once it is out, any repeat of the 200 would be too
        ch(f"INSERT INTO {src} VALUES (201, 100)")
        wait_for(lambda: 201 in [m["id"] for m in self.out()], what="the row after them")
        self.assertEqual(sorted(m["id"] for m in self.out()), list(range(1, 202)))
        self.assertIn("without `tiebreak`", s.stderr())
        s.stop()

    def test_start_from_and_restart_resumes_after_the_cursor(self):
        src = self.t("src")
        ch(f"CREATE TABLE {src} (id UInt32, ts DateTime) ENGINE = MergeTree() ORDER BY id")
        ch(f"INSERT INTO {src} SELECT number, toDateTime('2025-12-31 23:59:58') + number "
           f"FROM system.numbers LIMIT 10")
        cfg = self.graph(self.ch_input(f"SELECT * FROM {src}",
                                       "watermark: ts, tiebreak: id, "
                                       "start_from: '2026-01-01 00:00:00', poll_secs: 0.05"))
        state = self.path("state")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.out()) == 8, what="the 8 rows from 2026-01-01")
        self.assertEqual([m["id"] for m in self.out()], list(range(2, 10)))
        c0 = committed(s)
        wait_for(lambda: committed(s) > c0, what="a checkpoint after the rows")
        s.stop()
        ch(f"INSERT INTO {src} VALUES (10, '2026-02-01 00:00:00')")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.out()) >= 9, what="the new row")
        self.assertEqual([m["id"] for m in self.out()], list(range(2, 11)))
        wait_for(lambda: "2026-02-01" in s.card("p", "input")["position"], what="the position")
        s.stop()

    def test_lag_secs_reads_rows_inserted_late(self):
        for lag, name in ((0, "nolag"), (3, "lag")):
            src = self.t(name)
            ch(f"CREATE TABLE {src} (id UInt32, ts DateTime) ENGINE = MergeTree() ORDER BY id")
            s = self.start(self.graph(
                self.ch_input(f"SELECT * FROM {src}",
                              f"watermark: ts, tiebreak: id, poll_secs: 0.05, lag_secs: {lag}"),
                f"[{{file: {{path: {self.path(name)}}}}}]"))
            got = lambda: [json.loads(l)["id"] for l in self.read_output(name)]  # noqa: E731
            ch(f"INSERT INTO {src} SELECT 1, now() - 1")
            if lag == 0:
                wait_for(lambda: got() == [1], what="the first row")
            # late: older than the one read (by more than DateTime's one-second grain)
            ch(f"INSERT INTO {src} SELECT 2, now() - 10")
            ch(f"INSERT INTO {src} SELECT 3, now() + 1")
            wait_for(lambda: 3 in got(), timeout=20, what="the newest row")
            if lag == 0:
                self.assertEqual(got(), [1, 3], "without lag the late row is passed over")
            else:
                self.assertEqual(got(), [2, 1, 3], "with lag the late row is read, in order")
            s.stop()

    def test_snapshot_reads_everything_every_poll(self):
        src = self.t("src")
        ch(f"CREATE TABLE {src} (id UInt32) ENGINE = MergeTree() ORDER BY id")
        ch(f"INSERT INTO {src} VALUES (1), (2), (3)")
        s = self.start(self.graph(self.ch_input(
            f"SELECT * FROM {src} ORDER BY id", "mode: snapshot, poll_secs: 0.1, batch_size: 2")))
        wait_for(lambda: len(self.out()) >= 9, what="three passes")
        self.assertEqual([m["id"] for m in self.out()][:9], [1, 2, 3] * 3)
        s.stop()

    def test_options_that_do_not_fit_the_query(self):
        src = self.t("src")
        ch(f"CREATE TABLE {src} (id UInt32, ts DateTime, n Int32) ENGINE = MergeTree() "
           f"ORDER BY id")
        cases = [
            (f"SELECT id FROM {src}", "watermark: ts", "watermark: 'ts' is not a column"),
            (f"SELECT * FROM {src}", "watermark: ts, tiebreak: nope", "tiebreak: 'nope'"),
            (f"SELEKT * FROM {src}", "watermark: ts", "query: clickhouse: Syntax error"),
            (f"SELECT * FROM {src}", "watermark: n, lag_secs: 5", "lag_secs: the watermark"),
            (f"SELECT * FROM {src}", "watermark: n, start_from: abc", "start_from: 'abc'"),
        ]
        for query, extra, want in cases:
            with self.subTest(want=want):
                s = self.start(self.graph(self.ch_input(query, extra)))
                wait_for(lambda: s.card("p", "input")["state"] == "failed", what="failed")
                self.assertIn(want, s.card("p", "input")["last_error"])
                s.stop()
        path = self.path("bad.yaml")
        with open(path, "w") as f:
            f.write(self.graph("{clickhouse: {url: 'ftp://127.0.0.1:1', query: 'SELECT 1', "
                               "watermark: x}}"))
        r = subprocess.run([KAYAK, "check", "--config", path], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stdout + r.stderr,
                         r"bad\.yaml:3:\d+: clickhouse input: .*must start with http:// or https://")

    def test_input_server_down_and_back(self):
        src = self.t("src")
        ch(f"CREATE TABLE {src} (id UInt32) ENGINE = MergeTree() ORDER BY id")
        proxy = Proxy("127.0.0.1", ch_port())
        self.addCleanup(proxy.close)
        proxy.cut()
        s = self.start(self.graph(self.ch_input(
            f"SELECT * FROM {src}", "watermark: id, poll_secs: 0.05", url=via(proxy))))
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", what="retrying at start")
        ch(f"INSERT INTO {src} SELECT number + 1 FROM system.numbers LIMIT 50")
        proxy.restore()
        wait_for(lambda: len(self.out()) == 50, timeout=30, what="50 rows once up")
        proxy.cut()
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                 what="retrying mid-run")
        ch(f"INSERT INTO {src} SELECT number + 51 FROM system.numbers LIMIT 50")
        proxy.restore()
        wait_for(lambda: len(self.out()) >= 100, timeout=30, what="100 rows after")
        self.assertEqual(sorted(m["id"] for m in self.out()), list(range(1, 101)))
        s.stop()

    # ---- the output ----
    def test_output_counts_refused_rows_and_skips_unknown_fields(self):
        dst = self.t("dst")
        ch(f"CREATE TABLE {dst} (device String, total Float64, at DateTime, n UInt8 DEFAULT 7) "
           f"ENGINE = MergeTree() ORDER BY device")
        rows = [{"device": "a", "total": 1, "extra": True, "at": "2026-01-01T00:00:00Z"},
                {"device": "b", "total": "not a number"},
                {"device": "c", "total": 3},
                [1, 2]]
        with open(self.path("in.ndjson"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        out = (f"[{{clickhouse: {{url: '{ch_url()}', table: {dst}}}}}]\n"
               f"    dead_letter: {{file: {{path: {self.path('dead')}}}}}")
        s = self.start(self.graph(f"{{file: {{path: {self.path('in.ndjson')}}}}}", out))
        wait_for(lambda: s.card("p", "outputs[0]")["errors"] >= 2, what="two refused")
        wait_for(lambda: len(ch_rows(f"SELECT * FROM {dst}")) == 2, what="two rows")
        got = {r["device"]: r for r in ch_rows(f"SELECT * FROM {dst}")}
        # a column the message lacks: its type's zero (18.16 does not apply a DEFAULT
        # expression to JSONEachRow input)
        self.assertEqual(got["a"], {"device": "a", "total": 1, "at": "2026-01-01 00:00:00",
                                    "n": 0})
        self.assertEqual(got["c"]["total"], 3)
        self.assertIn('a row refused', s.card("p", "outputs[0]")["last_error"])
        self.assertIn('"device": "b"', s.card("p", "outputs[0]")["last_error"])
        self.assertIn("field 'extra' is not a column", s.stderr())
        # Both refused ones are in the dead letters, with why.
        wait_for(lambda: len(self.read_output("dead")) == 2, what="two dead letters")
        dead = {json.dumps(d.get("message")): d for d in map(json.loads, self.read_output("dead"))}
        self.assertTrue(dead['[1, 2]']["reason"].endswith("is not a JSON object"), dead)
        self.assertEqual(dead['{"device": "b", "total": "not a number"}']["component"], "outputs[0]")
        self.assertIn("clickhouse: a row refused",
                      dead['{"device": "b", "total": "not a number"}']["reason"])
        self.assertEqual(s.card("p", "outputs[0]")["dead_letters"], 2)
        s.stop()

    def test_output_missing_table_names_the_option(self):
        out = f"[{{clickhouse: {{url: '{ch_url()}', table: {self.t('nope')}}}}}]"
        s = self.start(self.graph("{dummy: {count: 1}}", out))
        wait_for(lambda: "table: clickhouse:" in s.card("p", "outputs[0]")["last_error"],
                 what="the error naming table")
        s.stop()

    def test_output_server_down_holds_and_loses_nothing(self):
        dst = self.t("dst")
        ch(f"CREATE TABLE {dst} (k String, seq UInt32) ENGINE = MergeTree() ORDER BY seq")
        proxy = Proxy("127.0.0.1", ch_port())
        self.addCleanup(proxy.close)
        out = (f"[{{clickhouse: {{url: '{via(proxy)}', table: {dst}, timeout_ms: 2000, "
               f"batch_ms: 200}}}}]")
        s = self.start(self.graph(
            "{dummy: {count: 400, rate_per_sec: 100, batch_size: 10, "
            "template: '{\"k\":\"k0\",\"seq\":{{seq}}}'}}", out),
            server_config=SERVER, state_dir=self.path("state"))
        count = lambda: ch_rows(f"SELECT uniqExact(seq) AS n FROM {dst}")[0]["n"]  # noqa: E731
        wait_for(lambda: count() >= 50, what="some rows")
        proxy.cut()
        wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", timeout=30,
                 what="retrying")
        proxy.restore()
        wait_for(lambda: count() == 400, timeout=60, what="every seq, at least once")
        s.stop()


if __name__ == "__main__":
    unittest.main()
