"""The mqtt input and output against a real mosquitto 2.0 (started once per
run by the CTest fixture): subscriptions with wildcards, payloads that are
not JSON, topics made from fields, QoS 1 acknowledgements, a blocked output
while the broker keeps publishing, the broker going away, and options that
do not fit."""
import json
import os
import subprocess
import threading
import time
import unittest

from brokers import SERVER, BrokerTest
from harness import wait_for
from servers import Proxy, brokertool, brokertool_reader, env, mqtt_url, port_of
from test_backpressure import rss_kib


def mosquitto_pub(topic, message, qos=1):
    host, port = "127.0.0.1", port_of(mqtt_url())
    subprocess.run(["mosquitto_pub", "-h", host, "-p", str(port), "-q", str(qos), "-t", topic,
                    "-m", message], check=True, timeout=30)


class MqttTest(BrokerTest):
    def mqtt_input(self, topics, extra="", url=None):
        return (f"{{mqtt: {{url: '{url or mqtt_url()}', topics: [{topics}], "
                f"client_id: in-{self.tag}{', ' + extra if extra else ''}}}}}")

    def subscribed(self, s, pipeline="p"):
        wait_for(lambda: s.card(pipeline, "input")["state"] == "running" and
                 "subscribed" in s.card(pipeline, "input")["position"], what="subscribed")
        # the SUBACK: a retained probe would linger; a probe on a topic of our own
        probe = f"{self.tag}/probe"
        s2_seen = lambda: any(m.get("probe") for m in self.out())  # noqa: E731
        wait_for(lambda: (mosquitto_pub(probe, '{"probe":1}', 0) or True) and s2_seen(),
                 timeout=20, interval=0.2, what="the subscription to take effect")

    def test_wildcards_metadata_and_text_payloads(self):
        s = self.start(self.graph(self.mqtt_input(f"'{self.tag}/+/temp', '{self.tag}/probe'",
                                                  "meta_field: m")))
        self.subscribed(s)
        brokertool("mqtt-pub", mqtt_url(), f"{self.tag}/a/temp", 1000, 1)
        mosquitto_pub(f"{self.tag}/b/temp", "21.5 C")
        mosquitto_pub(f"{self.tag}/b/other", '{"ignored":1}')
        wait_for(lambda: len(self.seqs()) == 1000 and
                 any("payload" in m for m in self.out()), what="1000 messages and the text")
        self.assertEqual(sorted(self.seqs()), list(range(1000)))
        text = [m for m in self.out() if "payload" in m][0]
        self.assertEqual(text, {"m": {"topic": f"{self.tag}/b/temp", "qos": 1, "retain": False},
                                "payload": "21.5 C"})
        self.assertFalse(any("ignored" in m for m in self.out()))

    def test_non_json_counted_as_an_error_when_asked(self):
        s = self.start(self.graph(self.mqtt_input(f"'{self.tag}/#'", "non_json: error")))
        self.subscribed(s)
        mosquitto_pub(f"{self.tag}/x", "not json")
        mosquitto_pub(f"{self.tag}/x", '{"after":1}')
        wait_for(lambda: any(m.get("after") for m in self.out()), what="the JSON one")
        wait_for(lambda: s.card("p", "input")["errors"] == 1, what="one error")
        self.assertIn("not JSON", s.card("p", "input")["last_error"])
        s.stop()
        # With dead letters, the payload lands there, with why.
        s = self.start(self.graph(self.mqtt_input(f"'{self.tag}/#'", "non_json: error"),
                                  f"[{{file: {{path: {self.path('out2')}}}}}]\n"
                                  f"    dead_letter: {{file: {{path: {self.path('dead')}}}}}"))
        self.subscribed(s)
        mosquitto_pub(f"{self.tag}/x", "still not json")
        wait_for(lambda: self.read_output("dead"), what="a dead letter")
        dead = json.loads(self.read_output("dead")[0])
        self.assertEqual((dead["component"], dead["type"], dead["message_text"]),
                         ("input", "mqtt", "still not json"))
        self.assertIn("not JSON", dead["reason"])
        self.assertEqual(s.card("p", "input")["dead_letters"], 1)

    def test_output_qos1_topics_from_fields(self):
        reader = brokertool_reader("mqtt-sub", mqtt_url(), f"{self.tag}/out/#", 300, 1,
                                   self.path("got"))
        s = self.start(self.graph(
            "{dummy: {count: 300, template: '{\"seq\":{{seq}},\"d\":\"d{{seq}}\"}'}}",
            f"[{{mqtt: {{url: '{mqtt_url()}', topic: '{self.tag}/out/{{{{d}}}}', qos: 1}}}},"
            f" {{mqtt: {{url: '{mqtt_url()}', topic: '{self.tag}/{{{{nope}}}}'}}}}]"))
        self.assertEqual(reader.wait(timeout=30), 0, reader.stderr.read())
        with open(self.path("got")) as f:
            got = sorted(int(l.split('"seq":')[1].split(",")[0]) for l in f if l.strip())
        self.assertEqual(got, list(range(1, 301)))
        wait_for(lambda: s.card("p", "outputs[1]")["errors"] == 300, what="300 dropped")
        self.assertIn("no field `nope`", s.card("p", "outputs[1]")["last_error"])
        code, text = self.check_config(self.graph(
            "{dummy: {count: 1}}", f"[{{mqtt: {{url: '{mqtt_url()}', topic: 'a/#'}}}}]"))
        self.assertNotEqual(code, 0)
        self.assertIn("no wildcards", text)

    def test_blocked_output_holds_the_input_while_the_broker_publishes(self):
        # stdout into a pipe nobody reads: the output blocks, the pipeline
        # stops taking batches, the input's buffer fills and it stops reading.
        s = self.start(self.graph(self.mqtt_input(f"'{self.tag}/#'", "buffer: 5000"),
                                  "[{stdout: {}}]"), stdout=subprocess.PIPE)
        # (messages before the SUBACK are simply not delivered; the buffer fills anyway)
        wait_for(lambda: "subscribed" in s.card("p", "input")["position"], what="subscribed")
        pub = threading.Thread(target=brokertool, args=("mqtt-pub", mqtt_url(),
                                                        f"{self.tag}/load", 200000, 1),
                               kwargs={"timeout": 180})
        pub.start()

        def stable():
            a = s.card("p", "input")["messages_out"]
            time.sleep(0.5)
            b = s.card("p", "input")["messages_out"]
            return a > 0 and a == b and b
        held = wait_for(stable, timeout=60, what="the input to stop")
        # batches queued in front of stdout + the one being written + the
        # one the pipeline pushes; the input's own buffer is not counted yet
        self.assertLess(held, 30 * 1000)
        rss = []
        for _ in range(6):
            time.sleep(0.5)
            rss.append(rss_kib(s.proc.pid))
        self.assertEqual(s.card("p", "input")["messages_out"], held)
        pub.join(timeout=180)
        print(f"mqtt: input held at {held} messages; RSS {rss} KiB while the broker "
              "published 200000")
        self.assertLess(max(rss) - min(rss), 4 * 1024, f"RSS grew: {rss}")
        # Reading stdout releases it: its buffer, then what the broker kept
        # for the session (it dropped the rest past its own queue limit).
        deadline = time.monotonic() + 30
        while s.card("p", "input")["messages_in"] <= held + 5000 and time.monotonic() < deadline:
            os.read(s.proc.stdout.fileno(), 1 << 20)
        self.assertGreater(s.card("p", "input")["messages_in"], held + 5000)

    def test_broker_down_and_back(self):
        proxy = Proxy("127.0.0.1", port_of(mqtt_url()))
        self.addCleanup(proxy.close)
        url = f"mqtt://127.0.0.1:{proxy.port}"
        proxy.cut()
        s = self.start(self.graph(self.mqtt_input(f"'{self.tag}/#'", url=url)),
                       server_config=SERVER)
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", what="retrying at start")
        proxy.restore()
        self.subscribed(s)
        proxy.cut()
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                 what="retrying mid-run")
        self.assertIn("mqtt input", s.card("p", "input")["last_error"])
        proxy.restore()
        n = len(self.out())
        # reconnected (backoff up to 10 s) and subscribed again
        wait_for(lambda: (mosquitto_pub(f"{self.tag}/again", '{"again":1}', 0) or True) and
                 any(m.get("again") for m in self.out()[n:]), timeout=40, interval=0.5,
                 what="messages after the broker came back")

    def test_options_that_do_not_fit(self):
        for extra, want in [("qos: 3", "qos"), ("password: x", "give `username` too")]:
            with self.subTest(extra=extra):
                code, text = self.check_config(self.graph(self.mqtt_input("a", extra)))
                self.assertNotEqual(code, 0)
                self.assertIn(want, text)
        code, text = self.check_config(self.graph("{mqtt: {url: 'tcp://x:1', topics: [a]}}"))
        self.assertNotEqual(code, 0)
        self.assertIn("mqtt://", text)



class MqttTlsTest(BrokerTest):
    """mqtts:// and the tls block against the broker's TLS listeners (a throwaway
    CA, servers.sh): a subscription and a publish with a client certificate
    over TLS; a wrong CA, an expired certificate and a missing client
    certificate refused with OpenSSL's reason on the card."""

    mqtt_input = MqttTest.mqtt_input

    def tls_file(self, name):
        return os.path.join(env("mosquitto")["MQTT_TLS_DIR"], name)

    def test_subscribe_over_tls_and_publish_with_a_client_certificate(self):
        e = env("mosquitto")
        topic = f"{self.tag}/tls"
        cfg = f"""pipelines:
  sub:
    input: {{mqtt: {{url: '{e["MQTT_TLS_URL"]}', topics: ['{topic}'], client_id: in-{self.tag},
                    tls: {{ca_file: {self.tls_file("ca.crt")}}}}}}}
    outputs: [{{file: {{path: {self.path("out")}}}}}]
  pub:
    input: {{dummy: {{rate_per_sec: 50}}}}
    outputs: [{{mqtt: {{url: '{e["MQTT_MTLS_URL"]}', topic: '{topic}', client_id: out-{self.tag},
                       tls: {{ca_file: {self.tls_file("ca.crt")}, cert_file: {self.tls_file("client.crt")},
                              key_file: {self.tls_file("client.key")}}}}}}}]
"""
        s = self.start(cfg)
        wait_for(lambda: len(self.seqs()) >= 5, timeout=30,
                 what="messages published over mutual TLS and read over TLS")
        self.assertEqual(s.card("sub", "input")["state"], "running")
        s.stop()

    def refused(self, url, tls, want):
        self.assert_refused(
            self.graph(self.mqtt_input(f"'{self.tag}/x'", f"tls: {{{tls}}}", url=url)),
            want if isinstance(want, tuple) else (want,))

    def test_a_wrong_ca_an_expired_certificate_and_no_client_certificate_are_refused(self):
        e = env("mosquitto")
        ca = f"ca_file: {self.tls_file('ca.crt')}"
        self.refused(e["MQTT_TLS_URL"], f"ca_file: {self.tls_file('other-ca.crt')}",
                     "certificate verify failed")
        self.refused(e["MQTT_EXPIRED_URL"], ca, "certificate verify failed")
        self.refused(e["MQTT_MTLS_URL"], ca, ("certificate required", "requires a client certificate"))
        code, text = self.check_config(self.graph(self.mqtt_input(
            "a", f"tls: {{{ca}, server_name: other.example}}", url=e["MQTT_TLS_URL"])))
        self.assertEqual(code, 2, text)
        self.assertIn("server_name", text)


if __name__ == "__main__":
    unittest.main()
