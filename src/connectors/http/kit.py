"""The http connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import os
import threading
from http.server import BaseHTTPRequestHandler

from harness import http, post_until_taken
from test_conformance import CANARY, Connector, Endpoint


class HttpConnector(Endpoint, Connector):
    name = "http"
    delivery = "replayable"
    has_output = True
    has_server = True  # the output's endpoint

    credentials = True
    token = ""
    ingest = "/ingest/kit"
    bad_data_refused = True  # a bad post is answered 400
    tuning_exempt = {
        "output": {"tls": "the kit's endpoint speaks plain http (test_http.py, HttpTlsTest, "
                          "sends over https)"},
        "input": {name: "only with `topic`: the kit's http_ahead changes it"
                  for name in ("brokers", "delivery_timeout_ms", "kafka_properties")}}
    no_tls = ("the input is served by the listener, whose TLS is the server config's "
              "(test_server.py, ListenerTlsTest); the output's endpoint speaks plain http "
              "(test_http.py, HttpTlsTest)")

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

    tuning_exempt = {"input": {"tls": "the kit's endpoint speaks plain http (test_http.py, "
                                      "HttpTlsTest, polls over https)"}}
    no_tls = "the kit's endpoint speaks plain http (test_http.py, HttpTlsTest, polls over https)"

    def tuning(self, side):
        return {"url": f"http://localhost:{self.port}/items", "interval_ms": 25,
                "timeout_ms": 600, "headers": {"X-Kit": "2"}}

    def bad_input_option(self):
        return "{http_poll: {url: 'http://127.0.0.1:1/x', method: DELETE}}", "DELETE"


class HttpAheadConnector(HttpConnector):
    """The http input given `topic`: each post is written to a topic of the
    suite's Kafka broker before its 202, keyed by `k`, and the pipeline's
    steps (`p-part2`) read it back. Its outage is the broker's, met by the
    part reading the topic: the kafka connector's down_and_up."""
    name = "http_ahead"
    has_output = False
    has_server = True  # the broker
    outage = ""  # the kafka connector's down_and_up covers the part reading the topic
    tuning_exempt = {}  # it changes every tuning option of the input

    def __init__(self, t):
        super().__init__(t)
        from kafka_broker import Broker  # noqa: E402 (tests/e2e)
        self.broker = Broker(("posts:2",))

    def ahead(self):
        return (f'topic: "{self.broker.t("posts")}", brokers: ["{self.broker.bootstrap}"], '
                f'key: k, delivery_timeout_ms: 5000')

    def input_yaml(self):
        token = f", token: {self.token}" if self.token else ""
        return f"{{http: {{path: {self.ingest}{token}, {self.ahead()}}}}}"

    def tuning(self, side):
        # The same broker through its SASL_SSL listener, for the producer and
        # for the part reading the topic (kafka_cluster.py --tls).
        import servers  # noqa: E402 (tests/e2e)
        e = servers.env("kafka")
        self.ingest = "/ingest/kit2"
        return {"path": self.ingest, "brokers": [e["KAFKA_SASL_BROKERS"]], "batch_size": 500,
                "max_backlog_bytes": 32 << 20, "segment_bytes": 1 << 20,
                "delivery_timeout_ms": 6000,
                "kafka_properties": {
                    "security.protocol": "SASL_SSL",
                    "ssl.ca.location": os.path.join(e["KAFKA_TLS_DIR"], "ca.crt"),
                    "sasl.mechanisms": "PLAIN", "sasl.username": "kayak",
                    "sasl.password": e["KAFKA_SASL_PASSWORD"]}}


INPUTS = [HttpConnector, HttpPollConnector, HttpAheadConnector]
OUTPUTS = [HttpConnector]
