"""The mqtt connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import os
import subprocess

from test_conformance import CANARY, Connector, Subscribed, servers


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

    def tls(self, side):
        # The same broker through its TLS listener (servers.sh: a throwaway CA).
        e = servers.env("mosquitto")
        return {"url": e["MQTT_TLS_URL"],
                "tls": {"ca_file": os.path.join(e["MQTT_TLS_DIR"], "ca.crt")}}

    def tuning(self, side):
        if side == "input":
            return {**self.tls(side), "keepalive_secs": 30, "batch_size": 12, "buffer": 40000,
                    "batch_wait_ms": 15}
        return {**self.tls(side), "keepalive_secs": 30, "max_inflight": 500}

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


INPUTS = [MqttConnector]
OUTPUTS = [MqttConnector]
