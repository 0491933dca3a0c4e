"""The connector conformance kit (docs/connectors.md): the same cases against
every connector, each described by a Connector below. Prints one line per
connector and case:

    kit: <connector> <case>: ok (<what was checked>)

Cases, by what the connector declares:
  delivery     N messages in, N out, in order per key
  kill9        (inputs) kill -9 while data flows, three times, then to the end:
               rewindable or replayable: every bucket count exact, every message in
               the output; neither (tcp): the bucket agrees with the output, and only
               what was in flight at a kill is missing
  down_and_up  (connectors with a server) the server goes away: the card shows it,
               the server comes back, nothing acknowledged is lost
  bad_options  a wrong option value: `kayak check` names file:line:column
  bad_data     a record that is not JSON: counted on the card, the rest delivered
  rotate_credentials
               (connectors with secret options) kill -9, every secret changed to a second
               valid credential, restart: state and outputs as without the change
  secrets_never_leak
               (connectors with secret options) canary secrets, a run with errors: the
               canary is nowhere in the state directory, the log, /ready, the API
The faults (test_kit_faults.py, a CTest of its own):
  cut_mid_batch
               (connectors behind the fault proxy) three times, the server's answers
               are lost while a batch is in flight and then the connection is cut:
               an output has every message at least once; a rewindable or replayable
               input's bucket is exact and its output complete; any other input's
               bucket agrees with its output and what is written after the cuts arrives
  transient_refusal
               (connectors with a refusal switch) the server refuses for a while (its
               rights taken from the connector's user and given back): `retrying` on
               the card, nothing dropped, every message delivered after, the bucket exact
  no_orphans   (connectors with sessions on the server) nothing a killed run opened is
               left open
The config case (test_kit_config.py, a CTest of its own):
  config_change_after_crash
               kill -9, every tuning option and address changed at once: state exact,
               outputs complete, nothing started empty; then an identity option
               changed: the input starts empty
"""
import gzip
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))  # the harness, and the kafka broker
from harness import (KAYAK, KayakTest, committed, http, post_until_taken,  # noqa: E402
                     wait_for)
import servers  # noqa: E402 (tests/e2e: the real servers the fixtures started)

SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"
# A secret no server knows: after a run with it, it must be found nowhere.
CANARY = f"kitcanary{os.getpid()}z{random.randrange(1 << 30):x}"
KEYS = 4


def message(i):
    return {"k": f"k{i % KEYS}", "seq": i}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(connector, case, what):
    print(f"kit: {connector} {case}: ok ({what})", flush=True)


def elsewhere(connector, case, why):
    """A case the kit does not run for this connector, and where it is tested instead."""
    print(f"kit: {connector} {case}: not here ({why})", flush=True)


# ---- the connectors: how to write into a source and read back a sink ----

class Connector:
    name = ""
    delivery = "rewindable"  # rewindable | replayable | none
    has_input = True
    has_output = False
    has_server = False
    proxied = False  # its connections go through a servers.Proxy, `self.proxy`

    def __init__(self, t):
        self.t = t

    def input_yaml(self):  # the `input:` value
        raise NotImplementedError

    def write(self, s, msgs):  # into the running source; s: the kayak Server
        raise NotImplementedError

    def write_bad(self, s):  # a record that is not JSON
        raise NotImplementedError

    def bad_input_option(self):  # (input yaml with one wrong value, the wrong value)
        raise NotImplementedError

    def transforms(self):  # transforms that make the input's messages the kit's {k, seq}
        return []

    def expected(self, n):  # the n messages the kit writes, as they come out
        return [message(i) for i in range(n)]

    # bad_data: `bad_data_elsewhere` says why the kit writes no bad record into
    # this source (and where one is tested); `bad_data_refused`, that a bad
    # record is refused to its sender (and not counted on the card).
    bad_data_elsewhere = ""
    bad_data_refused = False

    # Connectors with secret options set `credentials` and implement
    # use_credential: 0 and 1 are two valid credentials the test server knows
    # (rotate_credentials), CANARY a secret in every secret option
    # (secrets_never_leak); input_yaml and output_yaml use the one set last.
    credentials = False

    def use_credential(self, which):
        raise NotImplementedError

    # Connectors whose test server can refuse for a passing reason set
    # `refusals` and implement refuse(on): the server refuses the user of
    # credential 0 while on, and serves it again when off.
    refusals = False

    def refuse(self, on):
        raise NotImplementedError

    # How fast the `dummy` feeding an output writes in the cases that change
    # something while it runs (a server slow to apply a switch wants longer).
    feed_rate = 100

    # down_and_up: a connector whose server the case can take away says which
    # side meets the outage, `outage` "input", "output" or "both" (by
    # default, one behind the fault proxy: its input, and its output when it
    # has one), and gives down() and up() (the proxy cut and restored).
    # `for_outage(t)` makes the
    # connector the case uses (kafka: on a broker of its own). With
    # `writable_while_down`, the kit writes the second half into the source
    # while kayak cannot reach it (a proxy between them); otherwise after it
    # is back. after_outage(s) checks what else the card should say.
    outage = None  # None: by the proxy (outage_side)

    @classmethod
    def outage_side(cls):
        if cls.outage is not None:
            return cls.outage
        if not cls.proxied:
            return ""
        return "both" if cls.has_input and cls.has_output else "input" if cls.has_input \
            else "output"

    writable_while_down = True

    @classmethod
    def for_outage(cls, t):
        return cls(t)

    def down(self):
        self.proxy.cut()

    def up(self):
        self.proxy.restore()

    def after_outage(self, s):
        pass

    # Connectors that open sessions on the server (uploads, transactions,
    # consumers) set `sessions` to "input" or "output" and implement
    # open_sessions(): what of them is left open on the server (no_orphans),
    # after kills and a final stop. session_output_yaml() is the output that
    # opens them.
    sessions = ""

    def open_sessions(self):
        raise NotImplementedError

    def session_output_yaml(self):
        return self.output_yaml()

    # config_change_after_crash (test_kit_config.py): tuning(side) gives a new
    # value for every tuning option and address ("input" or "output" side,
    # docs/components.md names them) that use_credential(1) does not change
    # already and the kit does not know (`retry`); tuning_exempt[side] names
    # those it cannot change, with the reason. identity_change() is one
    # identity option of the input with a new value (None: it has none).
    # tuning() may move what write() and read_sink() use along with it.
    tuning_exempt = {}

    def tuning(self, side):
        return {}

    def identity_change(self):
        return None

    # schema_change (test_kit_config.py): database connectors set `schema` and
    # implement alter(table, step) on their source ("src") or sink ("dst")
    # table: "prepare" adds a column `extra` before the run, "add" adds a
    # column `added` with a default, "drop" drops `extra`; the input of
    # schema_input_yaml() reads every column (SELECT *).
    schema = False

    def alter(self, table, step):
        raise NotImplementedError

    def schema_input_yaml(self):
        raise NotImplementedError

    def close(self):
        pass


class Endpoint:
    """A local HTTP server a connector talks to, which a case can stop and
    start again on the same port."""
    srv = None

    def serve(self, handler, port=0):
        self.srv = ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return self.srv.server_address[1]

    def stop_endpoint(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.srv = None

    def close(self):
        if self.srv:
            self.stop_endpoint()


class FileConnector(Connector):
    name = "file"
    has_output = True

    def __init__(self, t):
        super().__init__(t)
        self.src = t.path("src.ndjson")
        open(self.src, "w").close()

    def input_yaml(self):
        return f"{{file: {{path: {self.src}, follow: true, poll_ms: 20, batch_size: 7}}}}"

    def write(self, s, msgs):
        with open(self.src, "a") as f:
            for m in msgs:
                f.write(json.dumps(m) + "\n")

    def write_bad(self, s):
        with open(self.src, "a") as f:
            f.write("not json\n")

    def bad_input_option(self):
        return f"{{file: {{path: {self.src}, batch_size: 0}}}}", "0"

    def output_yaml(self):
        return f"{{file: {{path: {self.t.path('sink')}}}}}"

    def tuning(self, side):
        if side == "input":
            return {"batch_size": 5, "poll_ms": 30}
        return {"max_part_bytes": 1 << 20, "max_part_secs": 600}

    def identity_change(self):
        other = self.src + ".2"
        open(other, "a").close()
        return {"path": other}

    def read_sink(self):
        return [json.loads(l) for l in self.t.read_output("sink")]

    def bad_output_option(self):
        return f"{{file: {{path: {self.t.path('sink')}, max_part_bytes: -1}}}}", "-1"


class DummyConnector(Connector):
    name = "dummy"
    # the generator is the source: it writes its own messages
    TEMPLATE = '{"k":"k0","seq":{{seq}}}'

    def __init__(self, t, count=200):
        super().__init__(t)
        self.count = count

    def input_yaml(self):
        return (f"{{dummy: {{count: {self.count}, rate_per_sec: 400, batch_size: 10, "
                f"template: '{self.TEMPLATE}'}}}}")

    def write(self, s, msgs):
        pass  # it generates seq 1..count itself

    def expected(self, n):
        return [{"k": "k0", "seq": i} for i in range(1, self.count + 1)]

    bad_data_elsewhere = "the generator cannot make bad data"

    def tuning(self, side):
        return {"rate_per_sec": 300, "batch_size": 7}

    def identity_change(self):
        return {"template": '{"k":"k1","seq":{{seq}}}'}

    def bad_input_option(self):
        return "{dummy: {rate_per_sec: -1}}", "-1"


class HttpConnector(Endpoint, Connector):
    name = "http"
    delivery = "replayable"
    has_output = True
    has_server = True  # the output's endpoint

    credentials = True
    token = ""
    ingest = "/ingest/kit"
    bad_data_refused = True  # a bad post is answered 400

    def use_credential(self, which):
        self.token = CANARY if which == CANARY else f"kit-token-{which}"

    def input_yaml(self):
        token = f", token: {self.token}" if self.token else ""
        return f"{{http: {{path: {self.ingest}{token}}}}}"

    def tuning(self, side):
        if side == "input":
            self.ingest = "/ingest/kit2"  # its path is tuning: the log belongs to the pipeline
            return {"path": self.ingest, "batch_size": 500, "max_backlog_bytes": 32 << 20,
                    "segment_bytes": 1 << 20}
        return {"url": f"http://localhost:{self.port}/in",
                "headers": {"Authorization": f"Bearer {self.token}", "X-Kit": "2"},
                "timeout_ms": 700}

    def write(self, s, msgs):
        body = "\n".join(json.dumps(m) for m in msgs).encode()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        post_until_taken(s, self.ingest, body, headers)

    def write_bad(self, s):
        status, _, _ = http("POST", s.url + "/ingest/kit", b"not json")
        assert status == 400, status

    def bad_input_option(self):
        return "{http: {path: ingest}}", "ingest"

    # the output side: a local endpoint that can go away and come back
    def start_endpoint(self, port=0):
        got, lock = self.got, self.lock

        class Sink(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    got.extend(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass
        return self.serve(Sink, port)

    def output_yaml(self):
        if not hasattr(self, "got"):
            self.got, self.lock = [], threading.Lock()
            self.port = self.start_endpoint()
        headers = f", headers: {{Authorization: 'Bearer {self.token}'}}" if self.token else ""
        return f"{{http: {{url: 'http://127.0.0.1:{self.port}/in', timeout_ms: 500{headers}}}}}"

    def read_sink(self):
        with self.lock:
            return list(self.got)

    def bad_output_option(self):
        return "{http: {url: 'http://127.0.0.1:1/x', format: xml}}", "xml"

    outage = "output"  # its endpoint (the input is kayak's own listener)

    def down(self):
        self.stop_endpoint()

    def up(self):
        self.start_endpoint(self.port)


class TcpConnector(Connector):
    name = "tcp"
    delivery = "none"

    def __init__(self, t):
        super().__init__(t)
        self.port = free_port()

    def input_yaml(self):
        return f"{{tcp: {{listen: '127.0.0.1:{self.port}', batch_size: 16}}}}"

    def send(self, data):
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as c:
                    c.sendall(data)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # the server is starting or restarting

    def write(self, s, msgs):
        self.send("".join(json.dumps(m) + "\n" for m in msgs).encode())

    def tuning(self, side):
        return {"batch_size": 12, "max_line_bytes": 65536, "max_connections": 64,
                "buffer_bytes": 4 << 20}

    def write_bad(self, s):
        self.send(b"not json\n")

    def bad_input_option(self):
        return f"{{tcp: {{listen: '127.0.0.1:{self.port}', max_connections: 0}}}}", "0"


class HttpPollConnector(Endpoint, Connector):
    name = "http_poll"
    delivery = "none"  # it polls what an endpoint shows now
    has_server = True
    bad_data_elsewhere = "the kit's endpoint serves only JSON (tests/e2e/test_http.py)"

    def __init__(self, t):
        super().__init__(t)
        self.pending, self.lock = [], threading.Lock()
        self.port = self.start_endpoint()

    def start_endpoint(self, port=0):
        pending, lock = self.pending, self.lock

        class Source(BaseHTTPRequestHandler):
            def do_GET(self):
                with lock:
                    items, pending[:] = list(pending), []
                body = json.dumps({"items": items}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass
        return self.serve(Source, port)

    def input_yaml(self):
        return (f"{{http_poll: {{url: 'http://127.0.0.1:{self.port}/items', split: items, "
                f"interval_ms: 20, timeout_ms: 500}}}}")

    def write(self, s, msgs):
        with self.lock:
            self.pending.extend(msgs)

    outage = "input"  # its endpoint

    def down(self):
        self.stop_endpoint()

    def up(self):
        self.start_endpoint(self.port)

    def tuning(self, side):
        return {"url": f"http://localhost:{self.port}/items", "interval_ms": 25,
                "timeout_ms": 600, "headers": {"X-Kit": "2"}}

    def bad_input_option(self):
        return "{http_poll: {url: 'http://127.0.0.1:1/x', method: DELETE}}", "DELETE"


class KafkaConnector(Connector):
    """Against the suite's real Kafka broker, on topics of its own
    (tests/e2e/kafka_broker.py); with `private`, on a broker of its own that
    the case can kill and start again. Its producer writes {"seq", "k":
    "k<seq % 7>", "v"} keyed by k, so a key stays on one partition and its
    order is the order to check."""
    name = "kafka"
    has_server = True

    def __init__(self, t, private=False):
        super().__init__(t)
        from kafka_broker import Broker, own_cluster  # noqa: E402 (tests/e2e)
        self.cluster = own_cluster(t.path(), 1) if private else None
        self.broker = Broker(("in:4", "out:2", "txn.markers:1"), cluster=self.cluster)
        self.group = f"kit-{self.broker.prefix}"

    def expected(self, n):
        self.n = n  # what write() produces
        return [{"seq": i, "k": f"k{i % 7}", "v": (i * 31) % 97} for i in range(n)]

    bad_data_elsewhere = "the kit's producer writes only JSON (tests/e2e/test_kafka.py)"

    def input_yaml(self, extra=""):
        return (f'{{kafka: {{brokers: "{self.broker.bootstrap}", topics: ["{self.broker.t("in")}"], '
                f'group: {self.group}, batch_size: 20{extra}, properties: '
                # a killed member holds its partitions until its session times out
                f'{{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}')

    def write(self, s, msgs):
        if msgs:  # the kit writes slices of expected(): seq from msgs[0]
            self.broker.produce("in", len(msgs), msgs[0]["seq"])

    outage = "both"
    writable_while_down = False  # the broker is the source

    @classmethod
    def for_outage(cls, t):
        return cls(t, private=True)

    def down(self):
        self.broker.down()

    def up(self):
        self.broker.up()

    def bad_input_option(self):
        return self.input_yaml(", start: middle"), "middle"

    def tuning(self, side):
        # the same broker as a list; librdkafka properties of a client's own
        brokers = self.broker.bootstrap.split(",")
        if side == "input":
            return {"brokers": brokers, "batch_size": 15, "batch_wait_ms": 60,
                    "properties": {"session.timeout.ms": "6000",
                                   "heartbeat.interval.ms": "500", "client.id": "kit2"}}
        return {"brokers": brokers, "compression": "gzip", "properties": {"linger.ms": "10"}}

    def identity_change(self):
        return {"group": self.group + "-2"}

    # the output side: produce into topic `out`, read back with the broker's consumer
    def output_yaml(self):
        return (f'{{kafka: {{brokers: "{self.broker.bootstrap}", topic: "{self.broker.t("out")}", '
                f'key: k}}}}')

    def read_sink(self, n=-1):  # n = -1: to the end of every partition
        r = subprocess.run([os.environ["KAYAK_KAFKATOOL"], "consume", self.broker.bootstrap,
                            self.broker.t("out"), str(n), "10"], capture_output=True, text=True,
                           timeout=60)
        return [json.loads(l) for l in r.stdout.splitlines() if l]

    def bad_output_option(self):
        return (f'{{kafka: {{brokers: "{self.broker.bootstrap}", topic: out, '
                f'compression: brotli}}}}', "brotli")

    sessions = "output"  # the exactly-once output's transactions

    def session_output_yaml(self):
        return (f'{{kafka: {{brokers: "{self.broker.bootstrap}", topic: "{self.broker.t("out")}", '
                f'key: k, exactly_once: true, transactional_id: {self.broker.t("txn")}}}}}')

    def open_sessions(self):
        return [f"a transaction open on {self.broker.t(t)}/{p}" for t in ("out", "txn.markers")
                for p in self.broker.open_transactions(t)]

    def close(self):
        if self.cluster is not None:
            self.cluster.close()


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
                          "tests/e2e/test_postgres.py)")

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

    def tuning(self, side):
        if side == "input":
            return {"url": self.direct(), "statement_timeout_secs": 50, "start_from": "0",
                    "poll_secs": 0.03, "batch_size": 7}
        return {"url": self.direct()}

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
                          "tests/e2e/test_clickhouse.py)")

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

    def tuning(self, side):
        direct = servers.ch_url()
        if side == "input":
            return {"url": direct, "timeout_ms": 2500, "start_from": "0", "poll_secs": 0.03,
                    "batch_size": 7}
        return {"url": direct, "timeout_ms": 2500, "batch_rows": 50, "batch_bytes": 1 << 20,
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


class Subscribed:
    """For inputs that keep nothing for an absent subscriber (delivery none):
    write() waits until the running server `s` has subscribed."""
    _ready_for = None

    def ensure_subscribed(self, s):
        if self._ready_for is not s:
            wait_for(lambda: self.subscribed(s), timeout=30, interval=0.05,
                     what=f"{self.name}: subscribed")
            self._ready_for = s


class NatsConnector(Subscribed, Connector):
    """Core NATS against the nats-server the fixture started: nothing is kept
    for an absent subscriber. The output side is JetStream (acks), read back
    through a durable of the kit's own from a stream of its own, so that what
    a JetStream input was sent is never counted as output."""
    name = "nats"
    delivery = "none"
    has_output = True
    has_server = True
    proxied = True
    made = 0

    def __init__(self, t):
        super().__init__(t)
        NatsConnector.made += 1
        self.tag = f"kit{os.getpid()}n{NatsConnector.made}"
        self.proxy = servers.Proxy("127.0.0.1", servers.port_of(servers.nats_url()))
        self.url = f"nats://127.0.0.1:{self.proxy.port}"
        self.stream, self.out_stream = self.tag.upper(), f"{self.tag}OUT".upper()
        servers.brokertool("nats-stream", servers.nats_url(), self.stream, f"{self.tag}.js.>")
        servers.brokertool("nats-stream", servers.nats_url(), self.out_stream,
                           f"{self.tag}.out.>")

    credentials = True

    def use_credential(self, which):
        # The test server has no accounts: it takes any user and password, and
        # kayak must neither log them nor start empty when they change.
        password = CANARY if which == CANARY else f"pw{which}"
        self.url = f"nats://kit{which if which != CANARY else 'c'}:{password}@127.0.0.1:{self.proxy.port}"

    def input_yaml(self):
        return (f"{{nats: {{url: '{self.url}', subject: '{self.tag}.in', batch_size: 16, "
                f"non_json: error}}}}")

    def subscribed(self, s):
        return servers.nats_subscribed(f"{self.tag}.in")

    def write(self, s, msgs):
        self.ensure_subscribed(s)
        if msgs:
            servers.brokertool("nats-send", servers.nats_url(), f"{self.tag}.in",
                               *[json.dumps(m) for m in msgs])

    def write_bad(self, s):
        self.ensure_subscribed(s)
        servers.brokertool("nats-send", servers.nats_url(), f"{self.tag}.in", "not json")

    def bad_input_option(self):
        return (f"{{nats: {{url: '{self.url}', subject: x, stream: S, deliver: sideways}}}}",
                "sideways")

    def direct(self):
        return self.url.replace(f":{self.proxy.port}", f":{servers.port_of(servers.nats_url())}")

    # the output's stream full for a while: JetStream refuses every publish
    # ("maximum messages exceeded"); the core input sends no command to refuse
    refusals = True
    refused = False

    def refuse(self, on):
        servers.brokertool("nats-stream-full", servers.nats_url(), self.out_stream,
                           "on" if on else "off")
        self.refused = on

    NO_ACKS = "only with `stream`: a core subscription has no acknowledgements"
    tuning_exempt = {"input": {"ack_wait_secs": NO_ACKS, "max_ack_pending": NO_ACKS}}

    def tuning(self, side):
        if side == "input":
            return {"url": self.direct(), "batch_size": 12, "pending_limit": 10000}
        return {"url": self.direct(), "max_pending": 2000}

    def output_yaml(self):
        return (f"{{nats: {{url: '{self.url}', subject: '{self.tag}.out.{{{{k}}}}', "
                f"jetstream: true}}}}")

    def read_sink(self):
        n = servers.nats_stream_msgs(self.out_stream) or 0
        if n == 0:
            return []
        self.reads = getattr(self, "reads", 0) + 1
        path = os.path.join(self.t.dir, f"nats-sink-{self.reads}")
        servers.brokertool("nats-sub", servers.nats_url(), f"{self.tag}.out.>", n, path,
                           self.out_stream, f"kit{self.reads}")
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]

    def bad_output_option(self):
        return f"{{nats: {{url: '{self.url}', subject: 'a.{{{{b'}}}}", "{{b"

    def close(self):
        self.proxy.close()
        if self.refused:
            self.refuse(False)


class NatsJetStreamConnector(NatsConnector):
    """A JetStream durable: acknowledged after the checkpoint, so rewindable."""
    name = "nats_jetstream"
    delivery = "rewindable"

    def input_yaml(self):
        return (f"{{nats: {{url: '{self.url}', subject: '{self.tag}.js.in', stream: "
                f"{self.stream}, batch_size: 16, non_json: error}}}}")

    def write(self, s, msgs):
        if msgs:
            servers.brokertool("nats-send", servers.nats_url(), f"{self.tag}.js.in",
                               *[json.dumps(m) for m in msgs])

    def write_bad(self, s):
        servers.brokertool("nats-send", servers.nats_url(), f"{self.tag}.js.in", "not json")

    def bad_input_option(self):
        return (f"{{nats: {{url: '{self.url}', subject: x, stream: S, max_ack_pending: 0}}}}",
                "max_ack_pending")

    sessions = "input"  # its durable on the stream: one, however often it restarts
    tuning_exempt = {}
    refusals = False  # the refusal is of the output's stream (NatsConnector)

    def tuning(self, side):
        return {"url": self.direct(), "batch_size": 12, "pending_limit": 10000,
                "ack_wait_secs": 200, "max_ack_pending": 100000}

    def identity_change(self):
        return {"durable": f"{self.tag}d2"}

    def open_sessions(self):
        consumers = servers.nats_consumers(self.stream)
        return [f"consumers {consumers} on {self.stream}"] if len(consumers) > 1 else []


class RedisConnector(Connector):
    """A redis stream read by a consumer group, acknowledged after the
    checkpoint (rewindable); the output XADDs into another stream."""
    name = "redis"
    has_output = True
    has_server = True
    proxied = True
    made = 0

    def __init__(self, t):
        super().__init__(t)
        RedisConnector.made += 1
        self.key = f"kit{os.getpid()}r{RedisConnector.made}"
        self.proxy = servers.Proxy("127.0.0.1", servers.port_of(servers.redis_url()))
        self.url = f"redis://127.0.0.1:{self.proxy.port}"
        self.users = []

    credentials = True

    def use_credential(self, which):
        # Two ACL users with every right; the canary is a password the server
        # refuses (WRONGPASS: a run with errors).
        user = f"{self.key}u{'c' if which == CANARY else which}"
        if user not in self.users:
            servers.redis_commands([["ACL", "SETUSER", user, "on", f">pw{which}", "~*", "&*",
                                     "+@all"]])
            self.users.append(user)
        password = CANARY if which == CANARY else f"pw{which}"
        self.url = f"redis://{user}:{password}@127.0.0.1:{self.proxy.port}"

    refusals = True

    def refuse(self, on):
        # every command refused to the user (NOPERM) while on
        servers.redis_commands([["ACL", "SETUSER", self.users[0], "-@all" if on else "+@all"]])

    def input_yaml(self):
        return (f"{{redis: {{url: '{self.url}', stream: {self.key}.in, batch_size: 16, "
                f"non_json: error}}}}")

    def write(self, s, msgs):
        if msgs:
            servers.redis_commands([["XADD", f"{self.key}.in", "*", "payload", json.dumps(m)]
                                    for m in msgs])

    def write_bad(self, s):
        servers.redis_commands([["XADD", f"{self.key}.in", "*", "payload", "not json"]])

    def bad_input_option(self):
        return f"{{redis: {{url: '{self.url}', stream: s, batch_size: 0}}}}", "0"

    def direct(self):
        return self.url.replace(f":{self.proxy.port}",
                                f":{servers.port_of(servers.redis_url())}")

    def tuning(self, side):
        if side == "input":  # a new consumer name claims the old one's pending entries
            return {"url": self.direct(), "consumer": f"{self.key}c2", "batch_size": 12}
        return {"url": self.direct()}

    def identity_change(self):
        return {"group": f"{self.key}g2"}

    def output_yaml(self):
        return f"{{redis: {{url: '{self.url}', stream: {self.key}.out}}}}"

    def read_sink(self):
        return [json.loads(p) for p in servers.redis_stream_payloads(f"{self.key}.out")]

    def bad_output_option(self):
        return f"{{redis: {{url: '{self.url}', stream: s, maxlen: -1}}}}", "-1"

    def close(self):
        self.proxy.close()
        servers.redis_commands([["DEL", f"{self.key}.in", f"{self.key}.out"]] +
                               [["ACL", "DELUSER", u] for u in self.users])


class RedisPubSubConnector(Subscribed, RedisConnector):
    """A redis pub/sub channel: nothing is kept for an absent subscriber."""
    name = "redis_pubsub"
    delivery = "none"
    has_output = False
    refusals = False  # a subscribed connection sends no command to refuse

    def input_yaml(self):
        return (f"{{redis: {{url: '{self.url}', channel: {self.key}.ch, batch_size: 16, "
                f"non_json: error}}}}")

    def subscribed(self, s):
        return servers.redis_commands([["PUBSUB", "NUMSUB", f"{self.key}.ch"]])[0][1] >= 1

    def write(self, s, msgs):
        self.ensure_subscribed(s)
        if msgs:
            servers.redis_commands([["PUBLISH", f"{self.key}.ch", json.dumps(m)] for m in msgs])

    def write_bad(self, s):
        self.ensure_subscribed(s)
        servers.redis_commands([["PUBLISH", f"{self.key}.ch", "not json"]])

    def bad_input_option(self):
        return f"{{redis: {{url: '{self.url}', channel: c, stream: s}}}}", "stream: s"

    tuning_exempt = {"input": {"consumer": "only with `stream`: a channel has no consumer "
                                           "group"}}

    def tuning(self, side):
        return {"url": self.direct(), "batch_size": 12}

    def identity_change(self):
        return None


class MqttConnector(Subscribed, Connector):
    """MQTT QoS 1 with a clean session against the mosquitto the fixture
    started: nothing is kept for an absent subscriber. The output publishes
    QoS 1, read back by a brokertool subscriber started before kayak."""
    name = "mqtt"
    delivery = "none"
    has_output = True
    has_server = True
    proxied = True
    made = 0

    def __init__(self, t):
        super().__init__(t)
        MqttConnector.made += 1
        self.tag = f"kit{os.getpid()}m{MqttConnector.made}"
        self.proxy = servers.Proxy("127.0.0.1", servers.port_of(servers.mqtt_url()))
        self.url = f"mqtt://127.0.0.1:{self.proxy.port}"
        self.reader = None
        self.auth = ""

    credentials = True

    def use_credential(self, which):
        # The test broker lets any client in (allow_anonymous), named or not.
        password = CANARY if which == CANARY else f"pw{which}"
        self.auth = f", username: kit{which if which != CANARY else 'c'}, password: {password}"

    def input_yaml(self):
        return (f"{{mqtt: {{url: '{self.url}', topics: ['{self.tag}/in'], client_id: "
                f"{self.tag}-in, batch_size: 16, non_json: error{self.auth}}}}}")

    def subscribed(self, s):
        return s.card("p", "input")["position"].startswith("subscribed")

    def publish(self, lines):
        port = servers.port_of(servers.mqtt_url())
        subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t",
                        f"{self.tag}/in", "-l"], input="".join(l + "\n" for l in lines),
                       text=True, check=True, timeout=60)

    def write(self, s, msgs):
        self.ensure_subscribed(s)
        if msgs:
            self.publish([json.dumps(m) for m in msgs])

    def write_bad(self, s):
        self.ensure_subscribed(s)
        self.publish(["not json"])

    def bad_input_option(self):
        return f"{{mqtt: {{url: '{self.url}', topics: [a], qos: 5}}}}", "qos: 5"

    def tuning(self, side):
        direct = self.url.replace(f":{self.proxy.port}",
                                  f":{servers.port_of(servers.mqtt_url())}")
        if side == "input":
            return {"url": direct, "keepalive_secs": 30, "batch_size": 12, "buffer": 40000,
                    "batch_wait_ms": 15}
        return {"url": direct, "keepalive_secs": 30, "max_inflight": 500}

    def output_yaml(self):
        if self.reader is not None:  # one reader, however often the yaml is asked for
            return (f"{{mqtt: {{url: '{self.url}', topic: '{self.tag}/out/{{{{k}}}}', qos: 1"
                    f"{self.auth}}}}}")
        self.sink = os.path.join(self.t.dir, "mqtt-sink")
        self.reader = servers.brokertool_reader("mqtt-sub", servers.mqtt_url(),
                                                f"{self.tag}/out/#", 1_000_000, 1, self.sink,
                                                600, "flush")
        return (f"{{mqtt: {{url: '{self.url}', topic: '{self.tag}/out/{{{{k}}}}', qos: 1"
                f"{self.auth}}}}}")

    def read_sink(self):
        with open(self.sink) as f:
            return [json.loads(l) for l in f.read().split("\n")[:-1] if l]

    def bad_output_option(self):
        return f"{{mqtt: {{url: '{self.url}', topic: 'a/+'}}}}", "a/+"

    def close(self):
        self.proxy.close()
        if self.reader:
            self.reader.kill()
            self.reader.wait()


class OpcuaConnector(Subscribed, Connector):
    """OPC UA data changes from the node-opcua server the fixture started: the
    kit's messages are written by a node-opcua client into Kit.k0 .. Kit.k3
    (seq + 1 into the variable of key k), each write answered before the
    next and a variable's writes paced past the server's sampling interval
    (tests/servers/opcua-write.js), and every variable set back to 0 after a
    write (so the value a new
    subscription first receives is 0, which the shaping drops). Nothing is
    kept for an absent subscriber. A lua step makes each change the kit's
    {k, seq} again."""
    name = "opcua"
    delivery = "none"
    bad_data_elsewhere = ("an OPC UA value is typed (a structure the input does not decode: "
                          "tests/e2e/test_opcua.py)")
    has_server = True
    proxied = True
    SHAPE = ("{lua: {script: 'function process(m) if m.value == 0 then return nil end "
             "return {k = string.sub(m.node, 12), seq = m.value - 1} end'}}")

    def __init__(self, t):
        super().__init__(t)
        self.real = servers.env("opcua")["OPCUA_URL"]
        port = int(self.real.split("://")[1].split("/")[0].rsplit(":", 1)[1])
        self.proxy = servers.Proxy("127.0.0.1", port)
        self.url = f"opc.tcp://127.0.0.1:{self.proxy.port}/UA/kayak"
        here = os.path.join(HERE, "..", "servers")
        self.writer = subprocess.Popen(
            ["node", os.path.join(here, "opcua-write.js"), self.real], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=dict(os.environ, NODE_PATH=os.path.join(here, "npm", "node_modules")))
        assert self.answer() == "ready", "opcua-write.js did not connect"
        self.send([[f"ns=1;s=Kit.k{i}", 0] for i in range(KEYS)])

    def answer(self):
        # node-opcua prints its own warnings on stdout too: skip them
        while True:
            line = self.writer.stdout.readline()
            if not line or line.split(" ", 1)[0].strip() in ("ready", "ok", "error"):
                return line.strip()

    def send(self, pairs):
        self.writer.stdin.write(json.dumps(pairs) + "\n")
        self.writer.stdin.flush()
        answer = self.answer()
        assert answer == "ok", answer

    def input_yaml(self):
        nodes = ", ".join(f"'ns=1;s=Kit.k{i}'" for i in range(KEYS))
        return (f"{{opcua: {{endpoint: '{self.url}', nodes: [{nodes}], sampling_ms: 0, "
                f"publishing_ms: 50, queue_size: 1000, timeout_ms: 2000}}}}")

    def transforms(self):
        return [self.SHAPE]

    def subscribed(self, s):
        return s.card("p", "input")["position"].startswith("subscribed")

    def write(self, s, msgs):
        self.ensure_subscribed(s)
        if msgs:
            touched = sorted({m["k"] for m in msgs})
            self.send([[f"ns=1;s=Kit.{m['k']}", m["seq"] + 1] for m in msgs] +
                      [[f"ns=1;s=Kit.{k}", 0] for k in touched])

    def bad_input_option(self):
        return (f"{{opcua: {{endpoint: '{self.url}', nodes: ['ns=1;q=7']}}}}", "q=7")

    def after_outage(self, s):
        assert "outage" in s.card("p", "input")["position"], s.card("p", "input")["position"]

    ANONYMOUS = "the test server is run for anonymous sessions: no credential to change"
    tuning_exempt = {"input": {"username": ANONYMOUS, "password": ANONYMOUS}}

    def tuning(self, side):
        direct = self.url.replace(f":{self.proxy.port}/", f":{self.proxy.target[1]}/")
        return {"endpoint": direct,
                "sampling_ms": 5, "publishing_ms": 60, "queue_size": 900, "timeout_ms": 2500,
                "batch_size": 800}

    def close(self):
        self.proxy.close()
        self.writer.stdin.close()
        self.writer.wait(timeout=30)


class S3Connector(Connector):
    """The s3 output against moto's S3 server: small parts and objects, closed
    after a second, read back through its list and GET."""
    name = "s3"
    has_input = False
    has_output = True
    has_server = True
    made = 0

    def __init__(self, t):
        super().__init__(t)
        S3Connector.made += 1
        self.prefix = f"kit{os.getpid()}s{S3Connector.made}"

    credentials = True
    secret = None  # the server's own secret key
    token = ""

    def use_credential(self, which):
        # moto takes any key pair: the rotation is of the secret key and the
        # session token (an STS token expires), as after an outage.
        if which == CANARY:
            self.secret, self.token = CANARY, CANARY
        else:
            self.secret, self.token = f"kit-secret-{which}", f"kit-session-{which}"

    outage = "output"
    proxy = None  # for_outage: the store behind a proxy the case cuts

    @classmethod
    def for_outage(cls, t):
        c = cls(t)
        c.proxy = servers.Proxy("127.0.0.1", servers.port_of(servers.s3_env()["S3_ENDPOINT"]))
        return c

    def close(self):
        if self.proxy is not None:
            self.proxy.close()

    def yaml(self, part_bytes=500):
        e = servers.s3_env()
        endpoint = (f"http://127.0.0.1:{self.proxy.port}" if self.proxy is not None
                    else e["S3_ENDPOINT"])
        token = f", session_token: {self.token}" if self.token else ""
        return (f"{{s3: {{endpoint: '{endpoint}', bucket: {e['S3_BUCKET']}, "
                f"path_style: true, access_key_id: {e['S3_ACCESS_KEY_ID']}, secret_access_key: "
                f"{self.secret or e['S3_SECRET_ACCESS_KEY']}{token}, key: '{self.prefix}/{{{{seq}}}}', "
                f"part_bytes: {part_bytes}, max_object_bytes: 2000, max_object_secs: 1, "
                f"compression: {self.compression}}}}}")

    compression = "none"

    def output_yaml(self):
        return self.yaml()

    def body(self, raw):
        return raw

    def read_sink(self):
        objs = servers.s3_objects(self.prefix + "/")
        return [json.loads(l) for k in sorted(objs)
                for l in self.body(objs[k]).decode().splitlines() if l]

    def bad_output_option(self):
        return self.yaml(part_bytes=0), "part_bytes: 0"

    tuning_exempt = {"output": {
        "region": "moto keeps the bucket in us-east-1: another region is another store",
        "path_style": "the test store answers path-style requests only"}}

    def tuning(self, side):
        e = servers.s3_env()
        # moto takes any key pair, in one account
        return {"endpoint": e["S3_ENDPOINT"].replace("127.0.0.1", "localhost"),
                "access_key_id": "kitkey2", "max_object_secs": 2}

    sessions = "output"  # multipart uploads

    def open_sessions(self):
        return [f"upload of {k} open" for k in servers.s3_uploads(self.prefix + "/")]


class S3GzipConnector(S3Connector):
    """The s3 output with `compression: gzip`: every part one gzip member."""
    name = "s3_gzip"
    compression = "gzip"

    def body(self, raw):
        return gzip.decompress(raw)


INPUTS = [FileConnector, DummyConnector, HttpConnector, TcpConnector, HttpPollConnector,
          KafkaConnector, PostgresConnector, ClickhouseConnector, NatsConnector,
          NatsJetStreamConnector, RedisConnector, RedisPubSubConnector, MqttConnector,
          OpcuaConnector]
OUTPUTS = [FileConnector, HttpConnector, KafkaConnector, PostgresConnector, ClickhouseConnector,
           NatsConnector, RedisConnector, MqttConnector, S3Connector, S3GzipConnector]


def _connectors_in_their_folders():
    """The connectors whose kit adapter lives in their own folder,
    src/connectors/<name>/kit.py (its INPUTS and OUTPUTS lists)."""
    import glob
    import importlib.util
    found_in, found_out = [], []
    for path in sorted(glob.glob(os.path.join(HERE, "..", "..", "src", "connectors", "*",
                                              "kit.py"))):
        name = "kit_" + os.path.basename(os.path.dirname(path))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        found_in += getattr(module, "INPUTS", [])
        found_out += getattr(module, "OUTPUTS", [])
    return found_in, found_out


_in, _out = _connectors_in_their_folders()
INPUTS += _in
OUTPUTS += _out
# KAYAK_KIT_ONLY=<name>[,<name>...]: those connectors only (mutation_check.py).
if os.environ.get("KAYAK_KIT_ONLY"):
    _only = set(os.environ["KAYAK_KIT_ONLY"].split(","))
    INPUTS = [c for c in INPUTS if c.name in _only]
    OUTPUTS = [c for c in OUTPUTS if c.name in _only]


class KitCase(KayakTest):
    """What every kit case needs: a connector made and closed, its graph, the
    messages it should carry, a directory per connector."""
    N = 200

    def connector(self, cls):
        c = cls(self)
        self.addCleanup(c.close)
        return c

    def sink_yaml(self):
        return f"{{file: {{path: {self.path('out')}}}}}"

    def graph(self, input_yaml, output_yaml=None, with_bucket=False, shape=()):
        bucket = "buckets: {n: {}}\n" if with_bucket else ""
        steps = list(shape) + (["{bucket: {name: n, key: k, op: count}}"] if with_bucket else [])
        transforms = f"    transforms: [{', '.join(steps)}]\n" if steps else ""
        return (f"{bucket}pipelines:\n  p:\n    input: {input_yaml}\n{transforms}"
                f"    outputs: [{output_yaml or self.sink_yaml()}]\n")

    def expected(self, c):
        return c.expected(self.N)

    def check_order(self, got, want):
        by_key = {}
        for m in got:
            by_key.setdefault(m["k"], []).append(m["seq"])
        for k, seqs in by_key.items():
            self.assertEqual(seqs, sorted(seqs), f"key {k} out of order")
        self.assertEqual(sorted(m["seq"] for m in got), sorted(m["seq"] for m in want))

    def start_fed_output(self, c):
        """The output `c` fed by a slow `dummy` of N messages, under checkpoints."""
        d = DummyConnector(self, count=self.N)
        slow = d.input_yaml().replace("rate_per_sec: 400", f"rate_per_sec: {c.feed_rate}")
        return self.start(self.graph(slow, c.output_yaml()), server_config=SERVER,
                          state_dir=self.path("state")), d

    def finish_fed_output(self, s, c, d, what):
        """The dummy's end, a graceful stop, and every message in the sink."""
        wait_for(lambda: s.card("p", "input")["state"] == "finished", timeout=60,
                 what=f"{c.name}: the input to end")
        self.assertEqual(s.stop(), 0)
        want = {m["seq"] for m in self.expected(d)}
        wait_for(lambda: want <= {m["seq"] for m in c.read_sink()}, timeout=30,
                 what=f"{c.name} output: every message {what}")

    def write_with_kills(self, c, cfg, state, want, jitter=0.0):
        """Writes `want` into `c`'s source 25 at a time, kill -9 and a restart
        before three of the chunks (up to `jitter` s after each chunk, so a
        kill lands anywhere in the flow); returns the running server."""
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        chunks = [want[i:i + 25] for i in range(0, len(want), 25)]
        kills = set(random.sample(range(1, len(chunks)), 3))
        for i, chunk in enumerate(chunks):
            if i in kills:
                s.kill()
                s = self.start(cfg, server_config=SERVER, state_dir=state)
            c.write(s, chunk)
            if jitter:
                time.sleep(random.uniform(0, jitter))
        return s

    def assert_bucket_exact(self, s, want, name):
        """Bucket `n` counts every key of `want` once per message."""
        keys = sorted({m["k"] for m in want})
        want_counts = {}
        for m in want:
            want_counts[m["k"]] = want_counts.get(m["k"], 0) + 1
        wait_for(lambda: sum(self.bucket_counts(s, keys).values()) >= len(want), timeout=30,
                 what=f"{name}: the bucket to hold every message")
        self.assertEqual(self.bucket_counts(s, keys), want_counts)

    def bucket_counts(self, s, keys):
        def value(k):
            status, body = s.get(f"/api/v1/buckets/n?key={k}")
            return json.loads(body)["value"] if status == 200 else 0
        return {k: value(k) for k in keys}

    def dir_for(self, name):
        """A fresh directory for one connector's run inside this test."""
        self.dir = os.path.join(self.root, name)
        os.makedirs(self.dir, exist_ok=True)

    def setUp(self):
        super().setUp()
        self.root = self.dir

    def tearDown(self):
        self.dir = self.root  # removed whole, with every connector's directory
        super().tearDown()


class ConformanceTest(KitCase):
    # ---- delivery ----
    def test_delivery_inputs(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name)
                c = self.connector(cls)
                s = self.start(self.graph(c.input_yaml(), shape=c.transforms()), server_config=SERVER)
                want = self.expected(c)
                for i in range(0, len(want), 50):
                    c.write(s, want[i:i + 50])
                wait_for(lambda: len(self.read_output("out")) >= len(want), timeout=30,
                         what=f"{cls.name}: {len(want)} messages")
                got = [json.loads(l) for l in self.read_output("out")]
                self.check_order(got, want)
                s.stop()
                report(cls.name, "delivery", f"{len(want)} messages in order per key")

    def test_delivery_outputs(self):
        for cls in OUTPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-out")
                c = self.connector(cls)
                d = DummyConnector(self, count=self.N)
                s = self.start(self.graph(d.input_yaml(), c.output_yaml()), server_config=SERVER)
                want = self.expected(d)
                wait_for(lambda: len(c.read_sink()) >= len(want), timeout=30,
                         what=f"{cls.name} output: {len(want)} messages")
                got = c.read_sink()
                self.check_order(got, want)
                s.stop()
                report(cls.name, "delivery (output)", f"{len(want)} messages in order per key")

    # ---- kill -9 ----
    def test_kill9(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-kill9")
                c = self.connector(cls)
                state = self.path("state")
                cfg = self.graph(c.input_yaml(), with_bucket=True, shape=c.transforms())
                want = self.expected(c)
                s = self.write_with_kills(c, cfg, state, want, jitter=0.05)
                out = lambda: [json.loads(l) for l in self.read_output("out")]  # noqa: E731
                keys = sorted({m["k"] for m in want})
                counts = lambda: {  # noqa: E731
                    k: (s.get_json(f"/api/v1/buckets/n?key={k}")["value"]
                        if s.get(f"/api/v1/buckets/n?key={k}")[0] == 200 else 0)
                    for k in keys}
                if c.delivery != "none":
                    wait_for(lambda: len({m["seq"] for m in out()}) >= len(want), timeout=60,
                             what=f"{cls.name}: every message after the kills")
                    # state exactly once: each key counted once per message
                    self.assert_bucket_exact(s, want, cls.name)
                    report(cls.name, "kill9", f"3 kills, {len(want)} messages, bucket exact, "
                                              "output complete")
                else:
                    # not replayable: what was in flight at a kill may be gone, the rest is
                    # there once in the bucket, and the bucket agrees with the output
                    # two checkpoints after the last write: what the source took is in
                    # the pipeline by then (the stop keeps what passed its barrier)
                    c0 = committed(s)
                    wait_for(lambda: committed(s) >= c0 + 2, timeout=30,
                             what=f"{cls.name}: checkpoints after the last write")
                    s.stop()
                    s = self.start(cfg, server_config=SERVER, state_dir=state)
                    seen = {m["seq"] for m in out()}
                    total = sum(counts().values())
                    self.assertLessEqual(total, len(want))
                    self.assertEqual(total, len(seen), "the bucket and the output disagree")
                    report(cls.name, "kill9", f"3 kills, {len(want) - len(seen)} of "
                                              f"{len(want)} in flight lost, bucket = output")
                s.stop()

    # ---- a server that goes away ----
    def test_down_and_up(self):
        for cls in [c for c in dict.fromkeys(INPUTS + OUTPUTS) if c.outage_side()]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-down")
                c = cls.for_outage(self)
                self.addCleanup(c.close)
                if c.outage_side() == "output":
                    self.output_down_and_up(c)
                else:
                    self.input_down_and_up(c)

    def input_down_and_up(self, c):
        """Half the messages through, the server away (the card says retrying),
        the rest written while it is away (or once it is back, for a source
        that keeps nothing or is the server itself), the server back: every
        message through the input (and the connector's own output, "both")."""
        both = c.outage_side() == "both"
        cfg = self.graph(c.input_yaml(), c.output_yaml() if both else None, shape=c.transforms())
        s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
        want = self.expected(c)
        half = len(want) // 2
        sink = c.read_sink if both else \
            (lambda: [json.loads(l) for l in self.read_output("out")])  # noqa: E731
        distinct = lambda: sorted({m["seq"] for m in sink()})  # noqa: E731
        c.write(s, want[:half])
        wait_for(lambda: len(distinct()) >= half, timeout=30, what=f"{c.name}: before")
        c.down()
        later = c.delivery == "none" or not c.writable_while_down
        if not later:
            c.write(s, want[half:])  # written while kayak cannot see the server
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=60,
                 what=f"{c.name}: the input retrying")
        c.up()
        if later:
            wait_for(lambda: s.card("p", "input")["state"] == "running", timeout=60,
                     what=f"{c.name}: running again")
            if hasattr(c, "_ready_for"):
                c._ready_for = None  # subscribed again before the kit writes
            c.write(s, want[half:])
        wait_for(lambda: len(distinct()) >= len(want), timeout=60, what=f"{c.name}: after")
        self.assertEqual(distinct(), sorted(m["seq"] for m in want))
        c.after_outage(s)
        s.stop()
        report(c.name, "down_and_up", f"retrying shown, {len(want)} of {len(want)} through "
                                      f"the input{' and the output' if both else ''}")

    def output_down_and_up(self, c):
        """The server away before kayak starts: the output's card says
        retrying; it comes back: every message in the sink."""
        d = DummyConnector(self, count=self.N)
        yaml = c.output_yaml()
        c.down()
        s = self.start(self.graph(d.input_yaml(), yaml), server_config=SERVER,
                       state_dir=self.path("state"))
        wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", timeout=30,
                 what=f"{c.name}: the output retrying")
        c.up()
        want = sorted(m["seq"] for m in self.expected(d))
        wait_for(lambda: sorted({m["seq"] for m in c.read_sink()}) == want, timeout=60,
                 what=f"{c.name} output: every message after the server came back")
        s.stop()
        report(c.name, "down_and_up (output)", f"retrying shown, {self.N} of {self.N} in the "
                                               "sink")

    # ---- bad options, bad data ----
    def check_config(self, text, bad_value):
        path = self.path("bad.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([KAYAK, "check", "--config", path], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        line_no = next(i for i, l in enumerate(text.splitlines(), 1) if bad_value in l)
        self.assertRegex(r.stdout + r.stderr, rf"bad\.yaml:{line_no}:\d+: ")
        return (r.stdout + r.stderr).strip().splitlines()[0]

    def test_bad_options(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-opts")
                c = self.connector(cls)
                yaml, bad = c.bad_input_option()
                first = self.check_config(self.graph(yaml), bad)
                report(cls.name, "bad_options", first.split(": ", 1)[1])
        for cls in OUTPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-outopts")
                c = self.connector(cls)
                yaml, bad = c.bad_output_option()
                first = self.check_config(self.graph("{dummy: {}}", yaml), bad)
                report(cls.name, "bad_options (output)", first.split(": ", 1)[1])

    def test_bad_data(self):
        for cls in INPUTS:
            if cls.bad_data_elsewhere:
                elsewhere(cls.name, "bad_data", cls.bad_data_elsewhere)
                continue
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-bad")
                c = self.connector(cls)
                s = self.start(self.graph(c.input_yaml()), server_config=SERVER)
                c.write(s, [message(0)])
                c.write_bad(s)
                c.write(s, [message(1)])
                wait_for(lambda: len(self.read_output("out")) >= 2, what="the good messages")
                if not c.bad_data_refused:
                    wait_for(lambda: s.card("p", "input")["errors"] >= 1, what="the bad one")
                self.assertIsNone(s.proc.poll(), "the server stopped")
                s.stop()
                report(cls.name, "bad_data", "counted or refused, the rest delivered")

    def test_rotate_credentials(self):
        for cls in [c for c in INPUTS if c.credentials]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-rotate")
                c = self.connector(cls)
                c.use_credential(0)
                state = self.path("state")
                cfg = lambda: self.graph(c.input_yaml(), with_bucket=True,  # noqa: E731
                                         shape=c.transforms())
                s = self.start(cfg(), server_config=SERVER, state_dir=state)
                want = self.expected(c)
                half = len(want) // 2
                out = lambda: {m["seq"] for m in map(json.loads, self.read_output("out"))}  # noqa: E731
                for i in range(0, half, 25):
                    c.write(s, want[i:min(i + 25, half)])
                wait_for(lambda: len(out()) >= half, timeout=60, what=f"{cls.name}: the first half")
                c0 = committed(s)
                wait_for(lambda: committed(s) >= c0 + 2, timeout=30,
                         what=f"{cls.name}: a checkpoint holding the first half")
                s.kill()
                c.use_credential(1)  # every secret option now the second credential
                s = self.start(cfg(), server_config=SERVER, state_dir=state)
                for i in range(half, len(want), 25):
                    c.write(s, want[i:i + 25])
                keys = sorted({m["k"] for m in want})
                if c.delivery != "none":
                    wait_for(lambda: len(out()) >= len(want), timeout=60,
                             what=f"{cls.name}: every message after the rotation")
                    want_counts = {}
                    for m in want:
                        want_counts[m["k"]] = want_counts.get(m["k"], 0) + 1
                    wait_for(lambda: sum(self.bucket_counts(s, keys).values()) >= len(want),
                             timeout=30, what=f"{cls.name}: the bucket to hold every message")
                    self.assertEqual(self.bucket_counts(s, keys), want_counts)
                else:
                    c0 = committed(s)
                    wait_for(lambda: committed(s) >= c0 + 2, timeout=30,
                             what=f"{cls.name}: checkpoints after the last write")
                    total = sum(self.bucket_counts(s, keys).values())
                    self.assertGreaterEqual(total, half, "the state before the rotation is gone")
                    self.assertEqual(total, len(out()), "the bucket and the output disagree")
                self.assertNotIn("starts empty", s.stderr())
                s.stop()
                report(cls.name, "rotate_credentials", f"kill -9, credentials rotated: "
                                                       f"{len(want)} messages, state kept")
        for cls in [c for c in OUTPUTS if c.credentials]:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-rotate-out")
                c = self.connector(cls)
                c.use_credential(0)
                d = DummyConnector(self, count=self.N)
                state = self.path("state")
                slow = d.input_yaml().replace("rate_per_sec: 400", "rate_per_sec: 100")
                s = self.start(self.graph(slow, c.output_yaml()), server_config=SERVER,
                               state_dir=state)
                wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= self.N // 4,
                         timeout=60, what=f"{cls.name}: a quarter out")
                c0 = committed(s)
                wait_for(lambda: committed(s) >= c0 + 1, timeout=30, what="a checkpoint")
                s.kill()
                c.use_credential(1)
                s = self.start(self.graph(slow, c.output_yaml()), server_config=SERVER,
                               state_dir=state)
                wait_for(lambda: s.card("p", "input")["state"] == "finished", timeout=60,
                         what=f"{cls.name}: the input to end")
                self.assertEqual(s.stop(), 0)
                want = {m["seq"] for m in self.expected(d)}
                wait_for(lambda: want <= {m["seq"] for m in c.read_sink()}, timeout=30,
                         what=f"{cls.name} output: every message at least once")
                self.assertNotIn("starts empty", s.stderr())
                report(cls.name, "rotate_credentials (output)",
                       f"kill -9, credentials rotated: all {self.N} messages in the sink")

    def test_secrets_never_leak(self):
        for cls in [c for c in dict.fromkeys(INPUTS + OUTPUTS) if c.credentials]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-leak")
                c = self.connector(cls)
                c.use_credential(CANARY)
                d = DummyConnector(self, count=self.N)
                cfg = self.graph(c.input_yaml() if c.has_input else d.input_yaml(),
                                 c.output_yaml() if c.has_output else None)
                state = self.path("state")
                s = self.start(cfg, server_config=SERVER, state_dir=state)
                proxy = getattr(c, "proxy", None)
                if proxy is not None:  # errors: the connection cut
                    time.sleep(0.3)
                    proxy.cut()
                deadline = time.monotonic() + 8
                while time.monotonic() < deadline and committed(s) < 3:
                    time.sleep(0.1)
                seen = {"log": ""}
                for path in ["/ready", "/health", "/api/v1/overview", "/api/v1/pipelines",
                             "/api/v1/pipelines/p", "/api/v1/checkpoints", "/metrics"]:
                    seen[path] = s.get(path)[1]
                s.kill()
                seen["log"] = s.stderr()
                for root, _, files in os.walk(state):
                    for f in files:
                        with open(os.path.join(root, f), "rb") as fh:
                            seen[os.path.join(root, f)] = fh.read().decode("latin-1")
                for where, text in seen.items():
                    self.assertNotIn(CANARY, text, f"{cls.name}: the canary secret in {where}")
                report(cls.name, "secrets_never_leak",
                       f"canary in every secret option: not in {len(seen) - 8} state files, "
                       "the log, /ready, the API or /metrics")


if __name__ == "__main__":
    unittest.main()
