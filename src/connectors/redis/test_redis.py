"""The redis input and output against a real redis-server 7 (started once per
run by the CTest fixture): streams read through a consumer group and
acknowledged only after the checkpoint, pending entries read first after a
kill -9, pub/sub channels and patterns, XADD and PUBLISH with keys made from
fields, the server going away, and options that do not fit."""
import json
import os
import socket
import subprocess
import time
import unittest

from brokers import SERVER, BrokerTest, sums
from harness import committed, http, tls_block, wait_for
from servers import Proxy, brokertool, env, port_of, redis_cli, redis_url


def pending(stream, group, url=None):
    """How many entries of the group are delivered and not acknowledged."""
    return int(redis_cli("XPENDING", stream, group, url=url).splitlines()[0])


class RedisTest(BrokerTest):
    def setUp(self):
        super().setUp()
        self.key = f"k{self.tag}"
        self.addCleanup(lambda: redis_cli("DEL", self.key, f"{self.key}.out",
                                          *(f"{self.key}.out.d{i}" for i in range(7))))

    def test_stream_entries_become_messages(self):
        redis_cli("XADD", self.key, "*", "payload", '{"a":1}')
        redis_cli("XADD", self.key, "*", "n", "12", "s", "hello", "j", '{"x":[1]}', "t", "true")
        redis_cli("XADD", self.key, "*", "payload", "plain text")
        s = self.start(self.graph(
            f"{{redis: {{url: '{redis_url()}', stream: {self.key}, meta_field: m}}}}"))
        wait_for(lambda: len(self.out()) == 3, what="three messages")
        out = self.out()
        for m in out:
            self.assertEqual(m.pop("m")["stream"], self.key)
        self.assertEqual(out, [{"a": 1}, {"n": 12, "s": "hello", "j": {"x": [1]}, "t": True},
                               {"payload": "plain text"}])
        s.stop()

    def test_acks_after_the_checkpoint_and_pending_entries_come_first_after_a_kill(self):
        state = self.path("state")
        cfg = self.graph(
            f"{{redis: {{url: '{redis_url()}', stream: {self.key}, group: g, consumer: c1, "
            f"batch_size: 100}}}}",
            transforms="    transforms:\n      - bucket: {name: sums, key: device, op: add, "
                       "field: value}\n",
            buckets="buckets:\n  sums: {}\n")
        brokertool("redis-pub", redis_url(), self.key, 2000)
        slow = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600, timeout_secs: 20}\n"
        s = self.start(cfg, server_config=slow, state_dir=state)
        wait_for(lambda: len(self.out()) == 2000, what="2000 messages")
        self.assertEqual(pending(self.key, "g"), 2000, "acknowledged before a checkpoint")
        s.kill()
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: committed(s) >= 2, what="checkpoints")
        wait_for(lambda: pending(self.key, "g") == 0, what="every entry acknowledged")
        self.assertEqual({k: self.bucket(s, "sums", k) for k in sums(2000)}, sums(2000))
        # while reading more: kill -9, restart; every entry counted once
        brokertool("redis-pub", redis_url(), self.key, 4000, 2000)
        s.kill()
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: set(range(6000)) <= set(self.seqs()), timeout=60, what="all 6000")
        wait_for(lambda: {k: self.bucket(s, "sums", k) for k in sums(6000)} == sums(6000),
                 timeout=30, what="every entry counted once")
        wait_for(lambda: pending(self.key, "g") == 0, timeout=30, what="every entry acknowledged")

    def test_a_renamed_consumer_takes_over_the_pending_entries_of_its_old_name(self):
        state = self.path("state")
        transforms = ("    transforms:\n      - bucket: {name: sums, key: device, op: add, "
                      "field: value}\n")

        def cfg(consumer):
            return self.graph(
                f"{{redis: {{url: '{redis_url()}', stream: {self.key}, group: g, "
                f"consumer: {consumer}, batch_size: 50}}}}",
                transforms=transforms, buckets="buckets:\n  sums: {}\n")
        slow = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600, timeout_secs: 20}\n"
        brokertool("redis-pub", redis_url(), self.key, 100)
        s = self.start(cfg("c1"), server_config=slow, state_dir=state)
        wait_for(lambda: len(self.out()) == 100, what="100 messages")
        http("POST", s.url + "/api/v1/checkpoints")
        wait_for(lambda: pending(self.key, "g") == 0, what="the checkpoint acknowledged")
        brokertool("redis-pub", redis_url(), self.key, 50, 100)
        wait_for(lambda: len(self.out()) == 150, what="150 messages")
        self.assertEqual(pending(self.key, "g"), 50)
        s.kill()
        s = self.start(cfg("c2"), server_config=SERVER, state_dir=state)
        wait_for(lambda: {k: self.bucket(s, "sums", k) for k in sums(150)} == sums(150),
                 timeout=30, what="every entry counted once under the new name")
        wait_for(lambda: pending(self.key, "g") == 0, timeout=30, what="every entry acknowledged")
        consumers = redis_cli("XINFO", "CONSUMERS", self.key, "g")
        self.assertNotIn("c1", consumers.split())

    def test_pending_entries_trimmed_while_down_are_counted_not_skipped_silently(self):
        state = self.path("state")
        cfg = self.graph(f"{{redis: {{url: '{redis_url()}', stream: {self.key}, group: g, "
                         f"consumer: c, batch_size: 50}}}}")
        slow = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600, timeout_secs: 20}\n"
        brokertool("redis-pub", redis_url(), self.key, 100)
        s = self.start(cfg, server_config=slow, state_dir=state)
        wait_for(lambda: len(self.out()) == 100, what="100 messages")
        http("POST", s.url + "/api/v1/checkpoints")
        wait_for(lambda: pending(self.key, "g") == 0, what="the checkpoint acknowledged")
        brokertool("redis-pub", redis_url(), self.key, 50, 100)
        wait_for(lambda: len(self.out()) == 150, what="150 messages")
        s.kill()  # 50 pending, past the checkpoint
        redis_cli("XTRIM", self.key, "MAXLEN", "20")  # 30 of them gone
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: pending(self.key, "g") == 0, timeout=30, what="every entry acknowledged")
        card = s.card("p", "input")
        self.assertEqual(card["errors"], 30)
        self.assertIn("30 pending entries of consumer c", card["last_error"])
        self.assertIn("deleted from stream", s.stderr())

    def test_graceful_stop_acknowledges_what_its_savepoint_covers(self):
        slow = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600, timeout_secs: 20}\n"
        s = self.start(self.graph(f"{{redis: {{url: '{redis_url()}', stream: {self.key}}}}}"),
                       server_config=slow, state_dir=self.path("state"))
        brokertool("redis-pub", redis_url(), self.key, 500)
        wait_for(lambda: len(self.out()) == 500, what="500 messages")
        self.assertEqual(pending(self.key, "kayak"), 500)
        self.assertEqual(s.stop(), 0)
        self.assertEqual(pending(self.key, "kayak"), 0)

    def test_pubsub_channel_and_pattern(self):
        s = self.start(
            "pipelines:\n"
            f"  a:\n    input: {{redis: {{url: '{redis_url()}', channel: {self.key}}}}}\n"
            f"    outputs: [{{file: {{path: {self.path('a')}}}}}]\n"
            f"  b:\n    input: {{redis: {{url: '{redis_url()}', channel: '{self.key}*', "
            f"meta_field: m}}}}\n"
            f"    outputs: [{{file: {{path: {self.path('b')}}}}}]\n")
        wait_for(lambda: s.card("a", "input")["state"] == "running" and
                 s.card("b", "input")["state"] == "running", what="running")
        # subscribed once the server counts the subscribers
        wait_for(lambda: redis_cli("PUBSUB", "NUMSUB", self.key).splitlines()[-1] == "1",
                 what="subscribed")
        wait_for(lambda: redis_cli("PUBSUB", "NUMPAT") >= "1", what="pattern subscribed")
        brokertool("redis-pub", redis_url(), self.key, 300, 0, "channel")
        brokertool("redis-pub", redis_url(), f"{self.key}.x", 20, 0, "channel")
        wait_for(lambda: len(self.out("a")) == 300 and len(self.out("b")) == 320,
                 what="300 and 320 messages")
        self.assertEqual({m["m"]["channel"] for m in self.out("b")}, {self.key, f"{self.key}.x"})

    def test_outputs_xadd_with_keys_from_fields_and_publish(self):
        s = self.start(self.graph(
            "{dummy: {count: 6, template: '{\"seq\":{{seq}},\"d\":\"d{{seq}}\"}'}}",
            f"[{{redis: {{url: '{redis_url()}', stream: '{self.key}.out', maxlen: 1000}}}},"
            f" {{redis: {{url: '{redis_url()}', stream: '{self.key}.out.{{{{d}}}}'}}}},"
            f" {{redis: {{url: '{redis_url()}', stream: '{self.key}.{{{{nope}}}}'}}}},"
            f" {{redis: {{url: '{redis_url()}', channel: '{self.key}.ch'}}}}]"))
        wait_for(lambda: redis_cli("XLEN", f"{self.key}.out") == "6", what="6 entries")
        # Each output writes on its own thread: the second may come later.
        wait_for(lambda: redis_cli("XLEN", f"{self.key}.out.d1") == "1", what="1 entry in d1")
        wait_for(lambda: redis_cli("XLEN", f"{self.key}.out.d6") == "1", what="1 entry in d6")
        first = redis_cli("XRANGE", f"{self.key}.out", "-", "+", "COUNT", "1").splitlines()
        self.assertEqual(first[1:], ["payload", '{"seq":1,"d":"d1"}'])
        wait_for(lambda: s.card("p", "outputs[2]")["errors"] == 6, what="six dropped")
        self.assertIn("no field `nope`", s.card("p", "outputs[2]")["last_error"])
        wait_for(lambda: s.card("p", "outputs[3]")["messages_out"] == 6, what="published")

    def test_a_key_of_another_type_is_counted_not_retried(self):
        redis_cli("SET", self.key, "a string")
        s = self.start(self.graph(
            "{dummy: {count: 5}}", f"[{{redis: {{url: '{redis_url()}', stream: {self.key}}}}}]"))
        wait_for(lambda: s.card("p", "outputs[0]")["errors"] == 5, what="five refused")
        self.assertIn("WRONGTYPE", s.card("p", "outputs[0]")["last_error"])
        self.assertEqual(s.card("p", "outputs[0]")["state"], "running")

    def test_refused_messages_go_to_the_dead_letters_once_across_a_kill(self):
        # Messages whose seq ends in 3 go to a key that holds a string: redis
        # refuses each for itself (WRONGTYPE), and with `dead_letter` each
        # lands there, exactly once though the server is killed mid-stream.
        streams = [f"{self.key}.s{d}" for d in range(10)]
        self.addCleanup(lambda: redis_cli("DEL", *streams))
        redis_cli("SET", streams[3], "a string")
        config = self.graph(
            "{dummy: {rate_per_sec: 1500, count: 3000, batch_size: 50, "
            "template: '{\"seq\":{{seq}}}'}}",
            f"[{{redis: {{url: '{redis_url()}', stream: '{self.key}.s{{{{d}}}}'}}}}]\n"
            f"    dead_letter: {{file: {{path: {self.path('dead')}}}}}",
            transforms="    transforms: [{map: {d: 'seq % 10'}}]\n")
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"
        state = self.path("state")
        s = self.start(config, state_dir=state, server_config=server)
        wait_for(lambda: len(self.out("dead")) >= 50, timeout=30, what="dead letters")
        s.kill()
        s = self.start(config, state_dir=state, server_config=server)

        def stored():
            seqs = []
            for key in streams[:3] + streams[4:]:
                for line in redis_cli("XRANGE", key, "-", "+").splitlines():
                    if line.startswith("{"):
                        seqs.append(json.loads(line)["seq"])
            return seqs
        wait_for(lambda: len(self.out("dead")) >= 300 and len(set(stored())) >= 2700, timeout=60,
                 what="every message in redis or the dead letters")
        dead = self.out("dead")
        self.assertEqual(sorted(r["message"]["seq"] for r in dead),
                         [i for i in range(1, 3001) if i % 10 == 3], "each refused one once")
        self.assertEqual(set(stored()), {i for i in range(1, 3001) if i % 10 != 3})
        r = dead[0]
        self.assertEqual((r["pipeline"], r["component"], r["type"]), ("p", "outputs[0]", "redis"))
        self.assertIn("WRONGTYPE", r["reason"])
        card = s.card("p", "outputs[0]")
        self.assertGreater(card["dead_letters"], 0, card)
        self.assertIn("sent", card["last_error"])
        self.assertEqual(s.stop(), 0)

    def private_redis(self):
        """A redis-server of this test's own (its settings are changed), on a free port."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        d = self.path("redis")
        os.makedirs(d)
        proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                                 "--save", "", "--appendonly", "no", "--dir", d],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (proc.kill(), proc.wait()))
        url = f"redis://127.0.0.1:{port}"

        def up():
            try:
                return redis_cli("PING", url=url) == "PONG"
            except RuntimeError:
                return False
        wait_for(up, what="the private redis-server")
        return url

    def test_a_server_hung_for_acknowledgements_does_not_hold_a_checkpoint_request(self):
        # Acknowledgements go out off the coordinator's lock, on their own
        # connection: one the server does not answer holds back its XACKs,
        # not the API; they go with a later checkpoint's once it answers.
        proxy = Proxy("127.0.0.1", port_of(redis_url()))
        self.addCleanup(proxy.close)
        url = f"redis://127.0.0.1:{proxy.port}"
        slow = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600, timeout_secs: 20}\n"
        s = self.start(self.graph(f"{{redis: {{url: '{url}', stream: {self.key}, group: g}}}}"),
                       server_config=slow, state_dir=self.path("state"))
        brokertool("redis-pub", redis_url(), self.key, 300)
        wait_for(lambda: len(self.out()) == 300, what="300 messages")
        proxy.hold_new = True  # the acknowledgements' connection, made at the first commit
        for _ in range(3):
            started = time.monotonic()
            status, _, body = http("POST", s.url + "/api/v1/checkpoints")
            took = time.monotonic() - started
            self.assertEqual(status, 200, body)
            # An acknowledgement waits up to 5 s for an answer; the request
            # did not wait for one.
            self.assertLess(took, 2.5, "the checkpoint request waited on the hung connection")
        self.assertEqual(pending(self.key, "g"), 300)
        proxy.hold_new = False
        wait_for(lambda: http("POST", s.url + "/api/v1/checkpoints")[0] == 200 and
                 pending(self.key, "g") == 0, timeout=30,
                 what="the entries acknowledged once the server answers")

    def test_a_refusal_for_the_servers_state_is_retried_not_dropped(self):
        url = self.private_redis()
        redis_cli("CONFIG", "SET", "maxmemory", "1", url=url)  # every write: OOM
        s = self.start(self.graph("{dummy: {count: 200}}",
                                  f"[{{redis: {{url: '{url}', stream: out}}}}]"),
                       server_config=SERVER, state_dir=self.path("state"))
        wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", what="retrying on OOM")
        card = s.card("p", "outputs[0]")
        self.assertIn("OOM", card["last_error"])
        self.assertNotIn("dropped", card["last_error"])
        self.assertEqual(redis_cli("XLEN", "out", url=url), "0")
        redis_cli("CONFIG", "SET", "maxmemory", "0", url=url)
        wait_for(lambda: int(redis_cli("XLEN", "out", url=url)) >= 200, timeout=30,
                 what="every message once the server takes writes")
        seqs = set()
        for line in redis_cli("XRANGE", "out", "-", "+", url=url).splitlines():
            if line.startswith("{"):
                seqs.add(json.loads(line)["seq"])
        self.assertEqual(seqs, set(range(1, 201)))
        self.assertEqual(s.card("p", "outputs[0]")["state"], "running")

    def test_server_down_and_back(self):
        proxy = Proxy("127.0.0.1", port_of(redis_url()))
        self.addCleanup(proxy.close)
        url = f"redis://127.0.0.1:{proxy.port}"
        proxy.cut()
        s = self.start(self.graph(f"{{redis: {{url: '{url}', stream: {self.key}}}}}"),
                       server_config=SERVER, state_dir=self.path("state"))
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", what="retrying at start")
        self.assertIn("cannot connect", s.card("p", "input")["last_error"])
        brokertool("redis-pub", redis_url(), self.key, 100)
        proxy.restore()
        wait_for(lambda: len(self.out()) == 100, timeout=30, what="100 messages once up")
        proxy.cut()
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                 what="retrying mid-run")
        brokertool("redis-pub", redis_url(), self.key, 100, 100)
        proxy.restore()
        wait_for(lambda: len(self.out()) == 200, timeout=30, what="200 messages once back")
        self.assertEqual(sorted(self.seqs()), list(range(200)))

    def test_options_that_do_not_fit(self):
        for extra, want in [("", "either `channel`"),
                            ("channel: a, stream: b", "either `channel`"),
                            ("channel: a, group: g", "only with `stream`")]:
            with self.subTest(extra=extra):
                code, text = self.check_config(self.graph(
                    f"{{redis: {{url: '{redis_url()}'{', ' + extra if extra else ''}}}}}"))
                self.assertNotEqual(code, 0)
                self.assertIn(want, text)
        code, text = self.check_config(self.graph("{redis: {url: 'http://x', channel: a}}"))
        self.assertNotEqual(code, 0)
        self.assertIn("redis://", text)


class RedisTlsTest(BrokerTest):
    """rediss:// and the tls block against redis-servers that speak TLS only
    (a throwaway CA, server.sh): streams written and read over TLS and over
    mutual TLS; a wrong CA, a wrong name, an expired certificate and a missing
    client certificate refused with the reason on the card."""

    def tls(self, *names, **kw):
        return tls_block(env("redis")["REDIS_TLS_DIR"], *names, **kw)

    def test_streams_over_tls_and_mutual_tls(self):
        e = env("redis")
        mutual_url = e["REDIS_MTLS_URL"].replace("rediss://", "redis://")  # TLS by the block
        pipes = ""
        for name, url, tls in [("tls", e["REDIS_TLS_URL"], self.tls("ca")),
                               ("mutual", mutual_url, self.tls("ca", "cert"))]:
            key = f"{self.tag}.{name}"
            pipes += f"""  w_{name}:
    input: {{dummy: {{rate_per_sec: 50}}}}
    outputs: [{{redis: {{url: '{url}', stream: '{key}', {tls}}}}}]
  r_{name}:
    input: {{redis: {{url: '{url}', stream: '{key}', {tls}}}}}
    outputs: [{{file: {{path: {self.path(name)}}}}}]
"""
        s = self.start("pipelines:\n" + pipes, server_config=SERVER,
                       state_dir=self.path("state"))
        for name in ("tls", "mutual"):
            wait_for(lambda: len(self.seqs(name)) >= 20, timeout=30,
                     what=f"entries over {name} TLS")
            self.assertEqual(s.card(f"r_{name}", "input")["last_error"], "")
        self.assertEqual(s.stop(), 0)
        seqs = self.seqs("tls")
        self.assertEqual(sorted(seqs), list(range(1, len(seqs) + 1)))  # dummy counts from 1

    def test_a_wrong_ca_a_wrong_name_an_expired_certificate_and_no_client_certificate(self):
        e = env("redis")
        for url, tls, card, wants in [
                (e["REDIS_TLS_URL"], self.tls("other_ca"), "input",
                 ("unable to get local issuer certificate", "self-signed certificate in")),
                (e["REDIS_TLS_URL"], self.tls("ca", server_name="wrong.example"), "outputs[0]",
                 ("hostname mismatch",)),
                (e["REDIS_EXPIRED_URL"], self.tls("ca"), "input", ("certificate has expired",)),
                (e["REDIS_MTLS_URL"], self.tls("ca"), "input",
                 ("certificate required", "requires a client certificate"))]:
            with self.subTest(tls=tls, url=url):
                redis = f"{{redis: {{url: '{url}', stream: '{self.tag}.x', {tls}}}}}"
                if card == "input":
                    config = self.graph(redis)
                else:
                    config = self.graph("{dummy: {rate_per_sec: 10}}", outputs=f"[{redis}]")
                self.assert_refused(config, wants, card=card)

    def test_tls_options_that_do_not_load(self):
        url = env("redis")["REDIS_TLS_URL"]
        d = env("redis")["REDIS_TLS_DIR"]
        for tls, want in [(f"tls: {{cert_file: {d}/client.crt}}", "key_file"),
                          (f"tls: {{ca_file: {self.path('absent.pem')}}}", "absent.pem"),
                          ("tls: {verify: true}", "unknown key")]:
            with self.subTest(tls=tls):
                code, text = self.check_config(self.graph(
                    f"{{redis: {{url: '{url}', stream: s, {tls}}}}}"))
                self.assertNotEqual(code, 0)
                self.assertIn(want, text)


if __name__ == "__main__":
    unittest.main()
