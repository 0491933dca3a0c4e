"""The nats connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import os

from test_conformance import CANARY, Connector, Subscribed, servers


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
    # The suite's nats-servers that require TLS are servers of their own: the
    # kit's subjects and streams are not on them (test_nats.py tests TLS).
    NO_TLS = "the suite's TLS nats-servers are other servers, without the kit's streams"
    NO_LOGIN = ("the suite's nats-servers that require a login are other servers, without the "
                "kit's streams (test_nats.py, NatsLoginTest)")
    no_tls = NO_TLS
    OWN_SERVERS = {"tls": NO_TLS, "user": NO_LOGIN, "password": NO_LOGIN, "token": NO_LOGIN,
                   "nkey": NO_LOGIN, "nkey_seed_file": NO_LOGIN, "credentials_file": NO_LOGIN}
    tuning_exempt = {"input": {"ack_wait_secs": NO_ACKS, "max_ack_pending": NO_ACKS,
                               **OWN_SERVERS},
                     "output": OWN_SERVERS}

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
    tuning_exempt = {"input": NatsConnector.OWN_SERVERS, "output": NatsConnector.OWN_SERVERS}
    refusals = False  # the refusal is of the output's stream (NatsConnector)

    def tuning(self, side):
        return {"url": self.direct(), "batch_size": 12, "pending_limit": 10000,
                "ack_wait_secs": 200, "max_ack_pending": 100000}

    def identity_change(self):
        return {"durable": f"{self.tag}d2"}

    def open_sessions(self):
        consumers = servers.nats_consumers(self.stream)
        return [f"consumers {consumers} on {self.stream}"] if len(consumers) > 1 else []


INPUTS = [NatsConnector, NatsJetStreamConnector]
OUTPUTS = [NatsConnector]
