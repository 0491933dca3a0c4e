"""The postgres input and output against a real PostgreSQL 15 (started once per
run by the CTest fixture): types, the (watermark, tiebreak) cursor over bursts
of equal timestamps, lag_secs, snapshots, kill -9, upserts, refused rows, the
server going away, and options that do not fit."""
import json
import os
import subprocess
import unittest
import urllib.parse

from harness import KayakTest, committed, wait_for
from servers import Proxy, env, pg_json_rows, pg_url, psql

SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"


def via(proxy):
    """pg_url() through `proxy`."""
    u = urllib.parse.urlsplit(pg_url())
    return u._replace(netloc=f"{u.username}@127.0.0.1:{proxy.port}").geturl()


def pg_port():
    return urllib.parse.urlsplit(pg_url()).port


class PostgresCase(KayakTest):
    """A schema of its own per test, and the helpers that build graphs."""

    def setUp(self):
        super().setUp()
        # one schema per test: tests run in parallel against one server
        self.schema = f"t_{self.id().split('.')[-1].lower()}_{os.getpid()}"
        psql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE; CREATE SCHEMA {self.schema};")
        self.addCleanup(psql, f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    def t(self, name):
        return f"{self.schema}.{name}"

    def pg_input(self, query, extra="", url=None):
        return (f"{{postgres: {{url: '{url or pg_url()}', query: '{query}'"
                f"{', ' + extra if extra else ''}}}}}")

    def graph(self, input_yaml, outputs=None, transforms="", buckets=""):
        outs = outputs or f"[{{file: {{path: {self.path('out')}}}}}]"
        return (f"{buckets}pipelines:\n  p:\n    input: {input_yaml}\n{transforms}"
                f"    outputs: {outs}\n")

    def out(self):
        return [json.loads(l) for l in self.read_output("out")]


class PostgresTest(PostgresCase):
    def test_types_become_json(self):
        psql(f"""CREATE TABLE {self.t('r')} (id bigint PRIMARY KEY, ts timestamptz,
                 local timestamp, d date, ok bool, f float8, n numeric, big int8, j jsonb,
                 js json, b bytea, s text, arr int[], nothing text);
                 INSERT INTO {self.t('r')} VALUES
                 (1, '2026-01-02 03:04:05.123456+02', '2026-01-02 03:04:05', '2026-01-02', true,
                  1.5, 12.50, 9007199254740993, '{{"a": [1, {{"b": null}}]}}', '[1,2]',
                  '\\x00ff10', 'hé "quoted"', '{{1,2}}', NULL),
                 (2, 'infinity', NULL, NULL, false, 'NaN', 'NaN', -1, 'null', '{{}}', '',
                  '', '{{}}', NULL);""")
        s = self.start(self.graph(self.pg_input(f"SELECT * FROM {self.t('r')}",
                                                "watermark: id")))
        wait_for(lambda: len(self.out()) == 2, what="two rows")
        a, b = self.out()
        self.assertEqual(a, {"id": 1, "ts": "2026-01-02T01:04:05.123456Z",
                             "local": "2026-01-02T03:04:05Z", "d": "2026-01-02", "ok": True,
                             "f": 1.5, "n": 12.5, "big": 9007199254740993,
                             "j": {"a": [1, {"b": None}]}, "js": [1, 2], "b": "AP8Q",
                             "s": 'hé "quoted"', "arr": "{1,2}", "nothing": None})
        # big integers stay exact in the bytes, not only in Python's reading
        self.assertIn('"big":9007199254740993', self.read_output("out")[0])
        self.assertEqual(b["ts"], "infinity")
        self.assertEqual((b["f"], b["n"], b["ok"], b["j"], b["b"]), ("NaN", "NaN", False, None, ""))
        s.stop()

    def test_cursor_reads_bursts_of_equal_timestamps_once(self):
        """100 rows share each timestamp and a batch (7 rows) ends inside every
        burst: no row is missed and none is read twice, while rows keep coming."""
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id bigserial PRIMARY KEY, ts timestamptz NOT NULL, k int);"
             f"CREATE INDEX ON {src} (ts, id);")
        s = self.start(self.graph(self.pg_input(
            f"SELECT id, ts, k FROM {src}",
            "watermark: ts, tiebreak: id, batch_size: 7, poll_secs: 0.05")))
        for burst in range(10):
            psql(f"INSERT INTO {src} (ts, k) SELECT '2026-01-01'::timestamptz + "
                 f"interval '{burst} second', g FROM generate_series(1, 100) g")
        wait_for(lambda: len(self.out()) >= 1000, timeout=60, what="1000 rows")
        ids = [m["id"] for m in self.out()]
        self.assertEqual(sorted(ids), list(range(1, 1001)))
        self.assertEqual(ids, sorted(ids), "read out of (ts, id) order")
        s.stop()

    def test_without_tiebreak_a_burst_is_read_whole(self):
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id bigserial, ts bigint NOT NULL);"
             f"INSERT INTO {src} (ts) SELECT g / 25 FROM generate_series(0, 199) g;")
        s = self.start(self.graph(self.pg_input(
            f"SELECT id, ts FROM {src}", "watermark: ts, batch_size: 10, poll_secs: 0.05")))
        wait_for(lambda: len(self.out()) >= 200, timeout=30, what="200 rows")
        # a row after them: once it is out, any repeat of the 200 would be too
        psql(f"INSERT INTO {src} (ts) VALUES (100)")
        wait_for(lambda: 201 in [m["id"] for m in self.out()], what="the row after them")
        self.assertEqual(sorted(m["id"] for m in self.out()), list(range(1, 202)))
        self.assertIn("without `tiebreak`", s.stderr())
        s.stop()

    def test_start_from_and_restart_resumes_after_the_cursor(self):
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id int PRIMARY KEY, ts date);"
             f"INSERT INTO {src} SELECT g, date '2025-12-30' + g FROM generate_series(0, 9) g;")
        cfg = self.graph(self.pg_input(f"SELECT * FROM {src}",
                                       "watermark: ts, tiebreak: id, start_from: '2026-01-01', "
                                       "poll_secs: 0.05"))
        state = self.path("state")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.out()) == 8, what="the 8 rows from 2026-01-01")
        self.assertEqual([m["id"] for m in self.out()], list(range(2, 10)))
        c0 = committed(s)
        wait_for(lambda: committed(s) > c0, what="a checkpoint after the rows")
        s.stop()
        psql(f"INSERT INTO {src} VALUES (10, '2026-02-01')")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.out()) >= 9, what="the new row")
        self.assertEqual([m["id"] for m in self.out()], list(range(2, 11)))
        wait_for(lambda: "2026-02-01" in s.card("p", "input")["position"], what="the position")
        s.stop()

    def test_a_column_added_and_one_dropped_while_reading(self):
        # SELECT * over a table altered under it: each result read by its own
        # columns, the cursor on the watermark wherever it moved, every row
        # valid JSON, none read twice or missed.
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id int PRIMARY KEY, a text, n int);"
             f"INSERT INTO {src} SELECT g, 'x', g FROM generate_series(1, 50) g;")
        s = self.start(self.graph(self.pg_input(f"SELECT * FROM {src}",
                                                "watermark: id, poll_secs: 0.05, batch_size: 20")),
                       server_config=SERVER)
        wait_for(lambda: len(self.out()) >= 50, what="the first rows")
        psql(f"ALTER TABLE {src} ADD COLUMN b jsonb DEFAULT '{{\"k\": 1}}';"
             f"INSERT INTO {src} SELECT g, 'y', g, '[1]' FROM generate_series(51, 100) g;")
        wait_for(lambda: len(self.out()) >= 100, what="the rows with the new column")
        psql(f"ALTER TABLE {src} DROP COLUMN a;"
             f"INSERT INTO {src} SELECT g, g, '2' FROM generate_series(101, 150) g;")
        wait_for(lambda: len(self.out()) >= 150, what="the rows without the dropped one")
        rows = self.out()
        self.assertEqual([r["id"] for r in rows], list(range(1, 151)))
        self.assertEqual(rows[0], {"id": 1, "a": "x", "n": 1})
        self.assertEqual(rows[60], {"id": 61, "a": "y", "n": 61, "b": [1]})
        self.assertEqual(rows[120], {"id": 121, "n": 121, "b": 2})
        self.assertIn("columns changed", s.stderr())
        self.assertEqual(s.card("p", "input")["state"], "running")
        self.assertEqual(s.card("p", "input")["errors"], 0)
        s.stop()

    def test_a_snapshot_reads_each_pass_by_its_own_columns(self):
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id int PRIMARY KEY, a text, n int);"
             f"INSERT INTO {src} SELECT g, 'x', g FROM generate_series(1, 30) g;")
        s = self.start(self.graph(self.pg_input(f"SELECT * FROM {src} ORDER BY id",
                                                "mode: snapshot, poll_secs: 0.2, batch_size: 7")),
                       server_config=SERVER)
        wait_for(lambda: len(self.out()) >= 30, what="a first pass")
        psql(f"ALTER TABLE {src} ADD COLUMN b jsonb DEFAULT '{{\"k\": 1}}';"
             f"ALTER TABLE {src} DROP COLUMN a;")
        wait_for(lambda: any("b" in r for r in self.out()), what="a pass with the new columns")
        n = len(self.out())
        wait_for(lambda: len(self.out()) >= n + 30, what="a whole pass after it")
        rows = self.out()
        first = next(i for i, r in enumerate(rows) if "b" in r)
        self.assertEqual(first % 30, 0, "a pass mixed the old columns with the new")
        self.assertEqual(rows[first:first + 30], [{"id": i, "n": i, "b": {"k": 1}}
                                                  for i in range(1, 31)])
        s.stop()

    def test_lag_secs_reads_rows_that_commit_late(self):
        """A row that commits after a newer one with an older watermark: lost
        without lag_secs (the cursor has passed it), read with it."""
        for lag, name in ((0, "nolag"), (3, "lag")):
            src = self.t(name)
            psql(f"CREATE TABLE {src} (id int PRIMARY KEY, ts timestamptz)")
            extra = "watermark: ts, tiebreak: id, poll_secs: 0.05"
            s = self.start(self.graph(
                self.pg_input(f"SELECT * FROM {src}", extra + f", lag_secs: {lag}"),
                f"[{{file: {{path: {self.path(name)}}}}}]"))
            got = lambda: [json.loads(l)["id"] for l in self.read_output(name)]  # noqa: E731
            psql(f"INSERT INTO {src} VALUES (1, now() - interval '1 second')")
            if lag == 0:
                wait_for(lambda: got() == [1], what="the first row")
            psql(f"INSERT INTO {src} VALUES (2, now() - interval '10 seconds')")  # late
            psql(f"INSERT INTO {src} VALUES (3, now() + interval '0.5 second')")
            wait_for(lambda: 3 in got(), timeout=20, what="the newest row")
            if lag == 0:
                self.assertEqual(got(), [1, 3], "without lag the late row is passed over")
            else:
                self.assertEqual(got(), [2, 1, 3], "with lag the late row is read, in order")
            s.stop()

    def test_snapshot_reads_everything_every_poll(self):
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id int); INSERT INTO {src} VALUES (1), (2), (3);")
        s = self.start(self.graph(self.pg_input(
            f"SELECT * FROM {src}", "mode: snapshot, poll_secs: 0.1, batch_size: 2")))
        wait_for(lambda: len(self.out()) >= 9, what="three passes")
        ids = [m["id"] for m in self.out()][:9]
        self.assertEqual(ids, [1, 2, 3] * 3)
        s.stop()

    def test_a_snapshot_pass_cut_in_the_middle_is_read_again_whole(self):
        # the pass's transaction ends with its connection: the next pass reads
        # the whole result (as every pass does), the log and the card say so
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id int); INSERT INTO {src} SELECT generate_series(1, 2000);")
        proxy = Proxy("127.0.0.1", pg_port())
        self.addCleanup(proxy.close)
        slow = ("    transforms: [{lua: {script: 'function process(m) for i=1,200000 do end "
                "return m end'}}]\n")
        s = self.start(self.graph(self.pg_input(
            f"SELECT * FROM {src}", "mode: snapshot, poll_secs: 3600, batch_size: 10",
            url=via(proxy)), transforms=slow))
        wait_for(lambda: len(self.out()) >= 100, timeout=30, what="the pass under way")
        proxy.cut()
        wait_for(lambda: "cut and read again" in s.card("p", "input")["position"], timeout=30,
                 what="the cut pass on the card")
        proxy.restore()
        wait_for(lambda: s.card("p", "input")["position"].startswith("snapshot pass 1"),
                 timeout=120, what="the pass after the cut to end")
        ids = [m["id"] for m in self.out()]
        cut_at = len(ids) - 2000
        self.assertGreater(cut_at, 0)
        self.assertEqual(ids[cut_at:], list(range(1, 2001)), "the pass after the cut is whole")
        self.assertRegex(s.stderr(), r"snapshot pass 1 cut after \d+ rows; the next pass reads "
                                     r"the whole result again")
        s.stop()

    def test_a_read_past_statement_timeout_is_tried_with_fewer_rows(self):
        # each row costs 2 ms to make (a function of the query): 1000 rows a
        # read run past a 1 s timeout for ever; halved twice, they fit
        psql(f"""CREATE TABLE {self.t('slow')} (id int PRIMARY KEY, v int);
                 INSERT INTO {self.t('slow')} SELECT g, g FROM generate_series(1, 3000) g;
                 CREATE FUNCTION {self.schema}.slow(x int) RETURNS int LANGUAGE plpgsql STABLE
                 AS $$ BEGIN PERFORM pg_sleep(0.002); RETURN x; END $$;""")
        query = f"SELECT id, {self.schema}.slow(v) AS v FROM {self.t('slow')}"
        s = self.start(self.graph(self.pg_input(
            query, "watermark: id, batch_size: 1000, statement_timeout_secs: 1")))
        wait_for(lambda: len(self.out()) >= 3000, timeout=90, what="every row")
        self.assertEqual(sorted(r["id"] for r in self.out()), list(range(1, 3001)))
        self.assertIn("ran past statement_timeout_secs (1 s); reading 500 at a time", s.stderr())

    def test_options_that_do_not_fit_the_query(self):
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id int, ts timestamptz, n int)")
        cases = [
            (f"SELECT id FROM {src}", "watermark: ts", "watermark: 'ts' is not a column"),
            (f"SELECT * FROM {src}", "watermark: ts, tiebreak: nope", "tiebreak: 'nope'"),
            (f"SELEKT * FROM {src}", "watermark: ts", "query: postgres: syntax error"),
            (f"SELECT * FROM {src}", "watermark: n, lag_secs: 5", "lag_secs: the watermark"),
        ]
        for query, extra, want in cases:
            with self.subTest(want=want):
                s = self.start(self.graph(self.pg_input(query, extra)))
                wait_for(lambda: s.card("p", "input")["state"] == "failed", what="failed")
                self.assertIn(want, s.card("p", "input")["last_error"])
                s.stop()
        # what the table can say is a config error with its place
        path = self.path("bad.yaml")
        with open(path, "w") as f:
            f.write(self.graph(self.pg_input("SELECT 1", "mode: snapshot, watermark: x")))
        r = self.run_check(path)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stdout + r.stderr, r"bad\.yaml:3:\d+: .*watermark.*incremental")

    def run_check(self, path):
        import subprocess
        from harness import KAYAK
        return subprocess.run([KAYAK, "check", "--config", path], capture_output=True,
                              text=True, timeout=30)

    def test_input_server_down_and_back(self):
        src = self.t("src")
        psql(f"CREATE TABLE {src} (id int PRIMARY KEY)")
        proxy = Proxy("127.0.0.1", pg_port())
        self.addCleanup(proxy.close)
        proxy.cut()  # down at start
        s = self.start(self.graph(self.pg_input(
            f"SELECT * FROM {src}", "watermark: id, poll_secs: 0.05", url=via(proxy))))
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", what="retrying at start")
        self.assertIn("cannot connect to postgres", s.card("p", "input")["last_error"])
        psql(f"INSERT INTO {src} SELECT generate_series(1, 50)")
        proxy.restore()
        wait_for(lambda: len(self.out()) == 50, timeout=30, what="50 rows once up")
        proxy.cut()  # down mid-run
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                 what="retrying mid-run")
        psql(f"INSERT INTO {src} SELECT generate_series(51, 100)")
        proxy.restore()
        wait_for(lambda: len(self.out()) >= 100, timeout=30, what="100 rows after")
        wait_for(lambda: s.card("p", "input")["state"] == "running", what="running")
        self.assertEqual(sorted(m["id"] for m in self.out()), list(range(1, 101)))
        s.stop()

    # ---- the output ----
    def test_upsert_collapses_by_key_and_counts_refused_rows(self):
        dst = self.t("totals")
        psql(f"CREATE TABLE {dst} (device text PRIMARY KEY, total float8 NOT NULL, "
             f"n int DEFAULT 7, at timestamptz, meta jsonb)")
        rows = [{"device": "a", "total": 1, "extra": True},
                {"device": "b", "total": 2, "at": "2026-01-01T00:00:00Z", "meta": {"x": [1]}},
                {"device": "a", "total": 3},
                {"device": "c", "total": "not a number"},
                {"device": "d"},  # NOT NULL total
                [1, 2]]
        with open(self.path("in.ndjson"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        out = f"[{{postgres: {{url: '{pg_url()}', table: {dst}, key: [device]}}}}]"
        s = self.start(self.graph(f"{{file: {{path: {self.path('in.ndjson')}}}}}", out))
        wait_for(lambda: s.card("p", "outputs[0]")["errors"] >= 3, what="three refused")
        got = {r["device"]: r for r in pg_json_rows(dst)}
        self.assertEqual(set(got), {"a", "b"})
        self.assertEqual(got["a"]["total"], 3)  # the last of the batch won
        self.assertEqual(got["a"]["n"], 7)      # a column no message named keeps its default
        self.assertEqual(got["b"]["meta"], {"x": [1]})
        self.assertEqual(got["b"]["at"], "2026-01-01T00:00:00+00:00")
        self.assertIn("field 'extra' is not a column", s.stderr())
        # the same file again: idempotent; with dead letters, the three
        # refused ones land there, with why
        s.stop()
        out += f"\n    dead_letter: {{file: {{path: {self.path('dead')}}}}}"
        s = self.start(self.graph(f"{{file: {{path: {self.path('in.ndjson')}}}}}", out))
        wait_for(lambda: s.card("p", "outputs[0]")["errors"] >= 3, what="refused again")
        self.assertEqual({r["device"]: r for r in pg_json_rows(dst)}, got)
        wait_for(lambda: len(self.read_output("dead")) == 3, what="three dead letters")
        dead = {json.dumps(d["message"]): d for d in map(json.loads, self.read_output("dead"))}
        self.assertEqual(set(dead), {json.dumps(rows[3]), json.dumps(rows[4]), json.dumps(rows[5])})
        self.assertIn("postgres: a row refused", dead[json.dumps(rows[3])]["reason"])
        self.assertTrue(dead[json.dumps(rows[5])]["reason"].endswith("is not a JSON object"))
        self.assertEqual(s.card("p", "outputs[0]")["dead_letters"], 3)
        s.stop()

    def test_output_options_that_do_not_fit_the_table(self):
        psql(f"CREATE TABLE {self.t('plain')} (device text, total int)")
        cases = [(f"table: {self.t('missing')}", "table: postgres:"),
                 (f"table: {self.t('plain')}, key: [nope]", "key: 'nope' is not a column"),
                 (f"table: {self.t('plain')}, key: [device]", "key: postgres: there is no unique"),
                 (f"table: {self.t('plain')}, columns: [total, x]", "columns: 'x'")]
        for opts, want in cases:
            with self.subTest(want=want):
                out = f"[{{postgres: {{url: '{pg_url()}', {opts}}}}}]"
                s = self.start(self.graph("{dummy: {count: 1}}", out))
                wait_for(lambda: want in s.card("p", "outputs[0]")["last_error"],
                         what=f"the error naming {want.split(':')[0]}")
                s.stop()

    def test_output_server_down_holds_and_loses_nothing(self):
        dst = self.t("dst")
        psql(f"CREATE TABLE {dst} (k text, seq int PRIMARY KEY)")
        proxy = Proxy("127.0.0.1", pg_port())
        self.addCleanup(proxy.close)
        out = f"[{{postgres: {{url: '{via(proxy)}', table: {dst}, key: [seq]}}}}]"
        s = self.start(self.graph(
            "{dummy: {count: 400, rate_per_sec: 400, batch_size: 10, "
            "template: '{\"k\":\"k0\",\"seq\":{{seq}}}'}}", out),
            server_config=SERVER, state_dir=self.path("state"))
        wait_for(lambda: int(psql(f"SELECT count(*) FROM {dst}")[0]) >= 50, what="some rows")
        proxy.cut()
        wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", timeout=30,
                 what="retrying")
        proxy.restore()
        wait_for(lambda: int(psql(f"SELECT count(*) FROM {dst}")[0]) == 400, timeout=60,
                 what="all 400 rows")
        self.assertEqual(psql(f"SELECT min(seq), max(seq) FROM {dst}"), ["1|400"])
        s.stop()


if __name__ == "__main__":
    unittest.main()


DUMMY3 = """{dummy: {count: 3, template: '{"id": {{seq}}, "v": "x"}'}}"""


class PostgresTlsTest(PostgresCase):
    """The tls block against the server's TLS (a throwaway CA, servers.sh): the
    right CA works; a wrong CA, a wrong name and an expired certificate are
    refused with libpq's reason on the card; a database that asks for a client
    certificate gets one."""

    def tls(self, **kw):
        d = env("postgres")["PG_TLS_DIR"]
        files = {"ca_file": "ca.crt", "cert_file": "client.crt", "key_file": "client.key",
                 "other_ca": "other-ca.crt"}
        parts = []
        for k, v in kw.items():
            if k == "other_ca":
                parts.append(f"ca_file: {os.path.join(d, files[k])}")
            elif k in files:
                parts.append(f"{k}: {os.path.join(d, files[k])}")
            else:
                parts.append(f"{k}: {v}")
        return "tls: {" + ", ".join(parts) + "}"

    def cert_url(self):
        d = env("postgres")["PG_TLS_DIR"]
        return (f"host=127.0.0.1 port={pg_port()} user=postgres dbname=kayak_cert "
                f"sslmode=verify-full sslrootcert={d}/ca.crt sslcert={d}/client.crt "
                f"sslkey={d}/client.key")

    def refused(self, tls, want):
        self.assert_refused(self.graph(self.pg_input(f"SELECT * FROM {self.t('r')}",
                                                     f"watermark: id, {tls}")), (want,))

    def test_the_right_ca_reads_over_tls(self):
        psql(f"CREATE TABLE {self.t('r')} (id int PRIMARY KEY, v text);"
             f"INSERT INTO {self.t('r')} VALUES (1, 'a'), (2, 'b');")
        query = (f"SELECT r.id, s.ssl FROM {self.t('r')} r, pg_stat_ssl s "
                 f"WHERE s.pid = pg_backend_pid()")
        s = self.start(self.graph(self.pg_input(query, f"watermark: id, {self.tls(ca_file=1)}")))
        wait_for(lambda: len(self.out()) == 2, what="two rows")
        self.assertEqual(self.out(), [{"id": 1, "ssl": True}, {"id": 2, "ssl": True}])
        s.stop()

    def test_a_wrong_ca_a_wrong_name_and_an_expired_certificate_are_refused(self):
        psql(f"CREATE TABLE {self.t('r')} (id int PRIMARY KEY)")
        self.refused(self.tls(other_ca=1), "certificate verify failed")
        self.refused(self.tls(ca_file=1, server_name="wrong.example"),
                     'does not match host name "wrong.example"')
        psql("ALTER SYSTEM SET ssl_cert_file = 'expired.crt'; "
             "ALTER SYSTEM SET ssl_key_file = 'expired.key'; SELECT pg_reload_conf();")
        try:
            self.refused(self.tls(ca_file=1), "certificate verify failed")
        finally:
            psql("ALTER SYSTEM RESET ssl_cert_file; ALTER SYSTEM RESET ssl_key_file; "
                 "SELECT pg_reload_conf();")
        # The name it was reached by, checked: 127.0.0.1 is in the certificate.
        s = self.start(self.graph(self.pg_input(f"SELECT * FROM {self.t('r')}",
                                                f"watermark: id, {self.tls(ca_file=1)}")))
        wait_for(lambda: s.card("p", "input")["state"] == "running", what="running")
        s.stop()

    def test_a_client_certificate_where_the_server_asks_for_one(self):
        psql("CREATE TABLE IF NOT EXISTS certified (id int PRIMARY KEY, v text)", self.cert_url())
        psql("TRUNCATE certified", self.cert_url())
        url = f"postgresql://postgres@127.0.0.1:{pg_port()}/kayak_cert"
        # Without a certificate the server refuses the login.
        s = self.start(self.graph(DUMMY3,
                                  outputs=f"[{{postgres: {{url: '{url}', table: certified, "
                                          f"{self.tls(ca_file=1)}}}}}]"))
        wait_for(lambda: "requires a valid client certificate" in
                 s.card("p", "outputs[0]")["last_error"], timeout=30, what="the refusal")
        s.kill()
        s = self.start(self.graph(DUMMY3,
                                  outputs=f"[{{postgres: {{url: '{url}', table: certified, "
                                          f"{self.tls(ca_file=1, cert_file=1, key_file=1)}}}}}]"))
        wait_for(lambda: psql("SELECT count(*) FROM certified", self.cert_url()) == ["3"],
                 timeout=30, what="three rows written with the client certificate")
        s.stop()

    def test_a_tls_block_that_cannot_work_is_a_config_error(self):
        d = env("postgres")["PG_TLS_DIR"]
        for tls, want in [(f"tls: {{cert_file: {d}/client.crt}}", "cert_file and key_file go together"),
                          ("tls: {ca_file: /nonexistent/ca.crt}", "ca_file '/nonexistent/ca.crt' cannot be read"),
                          ("tls: {verify: yes}", "unknown key 'verify'"),
                          ("tls: {insecure_skip_verify: maybe}", "true or false")]:
            with open(self.path("bad.yaml"), "w") as f:
                f.write(self.graph(self.pg_input("SELECT 1 AS id", f"watermark: id, {tls}")))
            r = subprocess.run([os.environ.get("KAYAK_BIN", "kayak"), "check", self.path("bad.yaml")],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)
