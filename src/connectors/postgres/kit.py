"""The postgres connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import os

from test_conformance import CANARY, Connector, servers


class PostgresConnector(Connector):
    """Against the PostgreSQL the fixture started: the source is a table read
    incrementally by seq, the sink a table upserted by seq; a proxy in front of
    the server can cut it off."""
    name = "postgres"
    has_output = True
    has_server = True
    proxied = True
    made = 0
    bad_data_elsewhere = ("a row is always an object (refused rows: the database outputs, "
                          "src/connectors/postgres/test_postgres.py)")

    def __init__(self, t):
        super().__init__(t)
        PostgresConnector.made += 1
        self.schema = f"kit_{os.getpid()}_{PostgresConnector.made}"
        servers.psql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE; CREATE SCHEMA {self.schema};"
                     f"CREATE TABLE {self.schema}.src (seq bigint PRIMARY KEY, k text);"
                     f"CREATE TABLE {self.schema}.dst (seq bigint PRIMARY KEY, k text);")
        port = int(servers.pg_url().rsplit(":", 1)[1].split("/")[0])
        self.proxy = servers.Proxy("127.0.0.1", port)
        self.url = servers.pg_url().replace(f":{port}/", f":{self.proxy.port}/")
        self.roles = []

    credentials = True

    def use_credential(self, which):
        # Two roles with the same rights (the server trusts loopback, so the
        # password is not checked; the role is).
        role = f"{self.schema}_{'c' if which == CANARY else which}"
        if role not in self.roles:
            servers.psql(f"CREATE ROLE {role} LOGIN PASSWORD 'x';"
                         f"GRANT ALL ON SCHEMA {self.schema} TO {role};"
                         f"GRANT ALL ON ALL TABLES IN SCHEMA {self.schema} TO {role}")
            self.roles.append(role)
        password = CANARY if which == CANARY else f"pw{which}"
        db = servers.pg_url().rsplit("/", 1)[1]
        self.url = f"postgresql://{role}:{password}@127.0.0.1:{self.proxy.port}/{db}"

    refusals = True

    def refuse(self, on):
        # the role's rights on the tables taken away (permission denied, 42501)
        rights = (f"REVOKE ALL ON ALL TABLES IN SCHEMA {self.schema} FROM" if on else
                  f"GRANT ALL ON ALL TABLES IN SCHEMA {self.schema} TO")
        servers.psql(f"{rights} {self.roles[0]}")

    def input_yaml(self):
        return (f"{{postgres: {{url: '{self.url}', query: 'SELECT seq, k FROM {self.schema}.src',"
                f" watermark: seq, poll_secs: 0.02, batch_size: 9}}}}")

    def write(self, s, msgs):
        if msgs:
            values = ", ".join(f"({m['seq']}, '{m['k']}')" for m in msgs)
            servers.psql(f"INSERT INTO {self.schema}.src VALUES {values}")

    def bad_input_option(self):
        return (f"{{postgres: {{url: '{self.url}', query: 'SELECT 1', watermark: seq, "
                f"mode: sideways}}}}", "sideways")

    def direct(self):
        """The url to the server itself, not its proxy: another port, the same system."""
        real = int(servers.pg_url().rsplit(":", 1)[1].split("/")[0])
        return self.url.replace(f":{self.proxy.port}/", f":{real}/")

    tuning_exempt = {"input": {"lag_secs": "the kit's watermark is a bigint: lag_secs needs a "
                                           "timestamp"}}

    def tls(self, side):
        # The same server over TLS (servers.sh gives it a throwaway CA).
        return {"url": self.direct(),
                "tls": {"ca_file": os.path.join(servers.env("postgres")["PG_TLS_DIR"], "ca.crt")}}

    def tuning(self, side):
        if side == "input":
            return {**self.tls(side), "statement_timeout_secs": 50, "start_from": "0",
                    "poll_secs": 0.03, "batch_size": 7}
        return self.tls(side)

    def identity_change(self):
        return {"query": f"SELECT seq, k FROM {self.schema}.src WHERE seq >= 0"}

    schema = True

    def alter(self, table, step):
        t = f"{self.schema}.{table}"
        servers.psql({"prepare": f"ALTER TABLE {t} ADD COLUMN extra text DEFAULT 'e'",
                      "add": f"ALTER TABLE {t} ADD COLUMN added int DEFAULT 7",
                      "drop": f"ALTER TABLE {t} DROP COLUMN extra"}[step])

    def schema_input_yaml(self):
        return self.input_yaml().replace("SELECT seq, k FROM", "SELECT * FROM")

    def output_yaml(self):
        return f"{{postgres: {{url: '{self.url}', table: {self.schema}.dst, key: [seq]}}}}"

    def read_sink(self):
        return servers.pg_json_rows(f"{self.schema}.dst", "seq")

    def bad_output_option(self):
        return f"{{postgres: {{url: '{self.url}', table: ''}}}}", "''"

    def close(self):
        self.proxy.close()
        servers.psql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE;" +
                     "".join(f"DROP ROLE IF EXISTS {r};" for r in self.roles))


INPUTS = [PostgresConnector]
OUTPUTS = [PostgresConnector]
