"""The clickhouse connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import os

from test_conformance import CANARY, Connector, servers


class ClickhouseConnector(Connector):
    """Against the ClickHouse the fixture started: the source is a table read
    incrementally by seq, the sink a MergeTree table (at least once); a proxy in
    front of the server can cut it off."""
    name = "clickhouse"
    has_output = True
    has_server = True
    proxied = True
    made = 0
    bad_data_elsewhere = ("a row is always an object (refused rows: the database outputs, "
                          "src/connectors/clickhouse/test_clickhouse.py)")

    def __init__(self, t):
        super().__init__(t)
        ClickhouseConnector.made += 1
        self.db = f"kit_{os.getpid()}_{ClickhouseConnector.made}"
        servers.ch(f"DROP DATABASE IF EXISTS {self.db}")
        servers.ch(f"CREATE DATABASE {self.db}")
        for table in ("src", "dst"):
            servers.ch(f"CREATE TABLE {self.db}.{table} (seq UInt64, k String) "
                       f"ENGINE = MergeTree() ORDER BY seq")
        port = int(servers.ch_url().rsplit(":", 1)[1])
        self.proxy = servers.Proxy("127.0.0.1", port)
        self.url = f"http://127.0.0.1:{self.proxy.port}"
        self.auth = ""
        self.refused = False

    credentials = True

    def use_credential(self, which):
        # users kit0 and kit1 (tests/servers/servers.sh); the canary a password
        # the server refuses
        user = "kit0" if which == CANARY else f"kit{which}"
        password = CANARY if which == CANARY else f"pw{which}"
        self.auth = f", user: {user}, password: {password}"

    refusals = True
    feed_rate = 20  # users.xml is read again every few seconds

    def refuse(self, on):
        # kit0's access to the kit's database taken away (code 291) and given back
        servers.ch_refuse_kit0(on, self.db)
        self.refused = on

    def input_yaml(self):
        return (f"{{clickhouse: {{url: '{self.url}', query: 'SELECT seq, k FROM {self.db}.src', "
                f"watermark: seq, poll_secs: 0.02, batch_size: 9, timeout_ms: 2000{self.auth}}}}}")

    def write(self, s, msgs):
        if msgs:
            servers.ch(f"INSERT INTO {self.db}.src FORMAT JSONEachRow",
                       "".join(json.dumps(m) + "\n" for m in msgs))

    def bad_input_option(self):
        return (f"{{clickhouse: {{url: '{self.url}', query: 'SELECT 1', watermark: seq, "
                f"batch_size: 0}}}}", "0")

    tuning_exempt = {"input": {"lag_secs": "the kit's watermark is a UInt64: lag_secs needs a "
                                           "DateTime"}}

    def tls(self, side):
        # the same server through its https port (servers.sh: a throwaway CA)
        e = servers.env("clickhouse")
        return {"url": e["CLICKHOUSE_HTTPS_URL"],
                "tls": {"ca_file": os.path.join(e["CLICKHOUSE_TLS_DIR"], "ca.crt")}}

    def tuning(self, side):
        if side == "input":
            return {**self.tls(side), "timeout_ms": 2500, "start_from": "0", "poll_secs": 0.03,
                    "batch_size": 7}
        return {**self.tls(side), "timeout_ms": 2500, "batch_rows": 50, "batch_bytes": 1 << 20,
                "batch_ms": 200}

    def identity_change(self):
        return {"query": f"SELECT seq, k FROM {self.db}.src WHERE seq >= 0"}

    schema = True

    def alter(self, table, step):
        t = f"{self.db}.{table}"
        servers.ch({"prepare": f"ALTER TABLE {t} ADD COLUMN extra String DEFAULT 'e'",
                    "add": f"ALTER TABLE {t} ADD COLUMN added Int32 DEFAULT 7",
                    "drop": f"ALTER TABLE {t} DROP COLUMN extra"}[step])

    def schema_input_yaml(self):
        return self.input_yaml().replace("SELECT seq, k FROM", "SELECT * FROM")

    def output_yaml(self):
        return (f"{{clickhouse: {{url: '{self.url}', table: {self.db}.dst, "
                f"timeout_ms: 2000{self.auth}}}}}")

    def read_sink(self):
        return servers.ch_rows(f"SELECT seq, k FROM {self.db}.dst ORDER BY seq")

    def bad_output_option(self):
        return f"{{clickhouse: {{url: '{self.url}', table: t, timeout_ms: 5}}}}", "5"

    def close(self):
        self.proxy.close()
        if self.refused:
            self.refuse(False)
        servers.ch(f"DROP DATABASE IF EXISTS {self.db}")


INPUTS = [ClickhouseConnector]
OUTPUTS = [ClickhouseConnector]
