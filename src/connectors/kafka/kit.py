"""The kafka connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import os
import subprocess

from test_conformance import Connector


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

    bad_data_elsewhere = "the kit's producer writes only JSON (src/connectors/kafka/test_kafka.py)"

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

    def tls(self, side):
        # the same broker through its SASL_SSL listener (kafka_cluster.py --tls)
        import servers  # noqa: E402 (tests/e2e)
        e = servers.env("kafka")
        return {"brokers": [e["KAFKA_SASL_BROKERS"]],
                "tls": {"ca_file": os.path.join(e["KAFKA_TLS_DIR"], "ca.crt")},
                "sasl": {"mechanism": "PLAIN", "username": "kayak",
                         "password": e["KAFKA_SASL_PASSWORD"]}}

    def tuning(self, side):
        # the brokers as a list; librdkafka properties of a client's own
        if side == "input":
            return {**self.tls(side), "batch_size": 15, "batch_wait_ms": 60,
                    "properties": {"session.timeout.ms": "6000",
                                   "heartbeat.interval.ms": "500", "client.id": "kit2"}}
        return {**self.tls(side), "compression": "gzip", "properties": {"linger.ms": "10"}}

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


INPUTS = [KafkaConnector]
OUTPUTS = [KafkaConnector]
