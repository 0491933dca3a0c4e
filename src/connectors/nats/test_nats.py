"""The nats input and output against a real nats-server 2.14 with JetStream
(started once per run by the CTest fixture): core subjects, a JetStream
durable acknowledged only after the checkpoint, kill -9 and restart, the
server going away, subjects made from fields, and options that do not fit."""
import json
import os
import unittest

from brokers import SERVER, BrokerTest, sums
from harness import committed, tls_block, wait_for
from servers import (Proxy, brokertool, brokertool_reader, env, nats_consumer,
                     nats_subscribed, nats_url, port_of)


class NatsTest(BrokerTest):
    def stream(self, max_msgs=0):
        """A JetStream stream of this test's own, on subjects <tag>.> (keeping
        the newest `max_msgs` only, when given)"""
        name = f"S{self.tag}".replace("_", "").upper()
        brokertool("nats-stream", nats_url(), name, f"{self.tag}.>",
                   *([max_msgs] if max_msgs else []))
        return name

    def test_core_subject_to_file_with_metadata_and_wrapped_text(self):
        s = self.start(self.graph(
            f"{{nats: {{url: '{nats_url()}', subject: '{self.tag}.>', meta_field: meta}}}}"))
        wait_for(lambda: nats_subscribed(f"{self.tag}.>"), what="subscribed")
        brokertool("nats-pub", nats_url(), f"{self.tag}.a", 500)
        wait_for(lambda: len(self.out()) == 500, what="500 messages")
        first = self.out()[0]
        self.assertEqual(first["meta"]["subject"], f"{self.tag}.a")
        self.assertEqual(first["seq"], 0)
        self.assertEqual(sorted(self.seqs()), list(range(500)))

    def test_non_json_is_wrapped_or_counted(self):
        cfg = lambda subject, extra, out: self.graph(  # noqa: E731
            f"{{nats: {{url: '{nats_url()}', subject: '{subject}'{extra}}}}}",
            f"[{{file: {{path: {self.path(out)}}}}}]")
        s = self.start(cfg(f"{self.tag}.t", "", "wrap"))
        wait_for(lambda: nats_subscribed(f"{self.tag}.t"), what="subscribed")
        brokertool("nats-send", nats_url(), f"{self.tag}.t", "hello", "\\xff\\x00", '{"a":1}')
        wait_for(lambda: len(self.out("wrap")) == 3, what="three messages")
        self.assertEqual(self.out("wrap"), [{"payload": "hello"}, {"payload_base64": "/wA="},
                                            {"a": 1}])
        s.stop()
        s = self.start(cfg(f"{self.tag}.u", ", non_json: error", "strict"))
        wait_for(lambda: nats_subscribed(f"{self.tag}.u"), what="subscribed")
        brokertool("nats-send", nats_url(), f"{self.tag}.u", "hello", '{"a":2}')
        wait_for(lambda: len(self.out("strict")) == 1, what="one message")
        self.assertEqual(self.out("strict"), [{"a": 2}])
        wait_for(lambda: s.card("p", "input")["errors"] == 1, what="one error")
        self.assertIn("not JSON", s.card("p", "input")["last_error"])
        s.stop()
        # With dead letters, the payload lands there, with why.
        s = self.start(cfg(f"{self.tag}.v", ", non_json: error", "strict2")
                       + f"    dead_letter: {{file: {{path: {self.path('dead')}}}}}\n")
        wait_for(lambda: nats_subscribed(f"{self.tag}.v"), what="subscribed")
        brokertool("nats-send", nats_url(), f"{self.tag}.v", "hello again")
        wait_for(lambda: self.read_output("dead"), what="a dead letter")
        dead = json.loads(self.read_output("dead")[0])
        self.assertEqual((dead["component"], dead["type"], dead["message_text"]),
                         ("input", "nats", "hello again"))
        self.assertEqual(s.card("p", "input")["dead_letters"], 1)

    def test_jetstream_acks_only_after_the_checkpoint_and_restart_replays_the_rest(self):
        stream = self.stream()
        state = self.path("state")
        cfg = self.graph(
            f"{{nats: {{url: '{nats_url()}', subject: '{self.tag}.>', stream: {stream}, "
            f"durable: d1}}}}",
            transforms="    transforms:\n      - bucket: {name: sums, key: device, op: add, "
                       "field: value}\n",
            buckets="buckets:\n  sums: {}\n")
        brokertool("nats-pub", nats_url(), f"{self.tag}.x", 3000, 0, "js")
        # a long interval: read, not yet checkpointed, so not acknowledged
        slow = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600, timeout_secs: 20}\n"
        s = self.start(cfg, server_config=slow, state_dir=state)
        wait_for(lambda: len(self.out()) == 3000, what="3000 messages")
        info = nats_consumer(stream, "d1")
        self.assertEqual(info["ack_floor"]["stream_seq"], 0, "acknowledged before a checkpoint")
        self.assertEqual(info["num_ack_pending"], 3000)
        s.kill()
        # restarted: the checkpoint at start covered nothing, so all 3000 come
        # again (at once: the durable is made afresh), counted once
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: committed(s) >= 2, what="checkpoints")
        wait_for(lambda: (nats_consumer(stream, "d1") or {}).get("ack_floor", {})
                 .get("stream_seq") == 3000, timeout=30, what="everything acknowledged")
        self.assertEqual({k: self.bucket(s, "sums", k) for k in sums(3000)}, sums(3000))
        # more while it runs, a kill -9 in the middle of them
        brokertool("nats-pub", nats_url(), f"{self.tag}.x", 3000, 3000, "js")
        s.kill()
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: set(range(6000)) <= set(self.seqs()), timeout=60, what="all 6000")
        wait_for(lambda: {k: self.bucket(s, "sums", k) for k in sums(6000)} == sums(6000),
                 timeout=30, what="every message counted once")
        wait_for(lambda: nats_consumer(stream, "d1")["ack_floor"]["stream_seq"] == 6000,
                 timeout=30, what="everything acknowledged")
        self.assertIn(f"stream {stream} sequence 6000", s.card("p", "input")["position"])

    def test_a_restart_after_kill_9_keeps_the_durable_and_moves_it(self):
        # the durable is reset to the checkpointed position, not deleted and
        # made again: the same consumer (its creation time), its ack floor where
        # the checkpoint left it, what the dead process held comes again at once
        stream = self.stream()
        state = self.path("state")
        cfg = self.graph(
            f"{{nats: {{url: '{nats_url()}', subject: '{self.tag}.>', stream: {stream}, "
            f"durable: d4, ack_wait_secs: 3600}}}}",
            transforms="    transforms:\n      - bucket: {name: sums, key: device, op: add, "
                       "field: value}\n",
            buckets="buckets:\n  sums: {}\n")
        brokertool("nats-pub", nats_url(), f"{self.tag}.x", 1000, 0, "js")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: (nats_consumer(stream, "d4") or {}).get("ack_floor", {})
                 .get("stream_seq") == 1000, timeout=30, what="the first 1000 acknowledged")
        created = nats_consumer(stream, "d4")["created"]
        s.kill()
        brokertool("nats-pub", nats_url(), f"{self.tag}.x", 1000, 1000, "js")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        # an ack_wait of an hour: what comes again comes because the durable moved
        wait_for(lambda: set(range(2000)) <= set(self.seqs()), timeout=60, what="all 2000")
        wait_for(lambda: {k: self.bucket(s, "sums", k) for k in sums(2000)} == sums(2000),
                 timeout=30, what="every message counted once")
        info = nats_consumer(stream, "d4")
        self.assertEqual(info["created"], created, "the durable was deleted and made again")
        self.assertGreaterEqual(info["ack_floor"]["stream_seq"], 1000)
        self.assertIn("reset to sequence", s.stderr())

    def test_messages_the_stream_dropped_before_they_were_read_are_counted(self):
        stream = self.stream(max_msgs=100)
        state = self.path("state")
        cfg = self.graph(f"{{nats: {{url: '{nats_url()}', subject: '{self.tag}.>', "
                         f"stream: {stream}, durable: d5}}}}")
        brokertool("nats-pub", nats_url(), f"{self.tag}.x", 50, 0, "js")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.out()) == 50, what="the first 50")
        self.assertEqual(s.stop(), 0)
        # while kayak is stopped, 250 more: the stream keeps its newest 100
        brokertool("nats-pub", nats_url(), f"{self.tag}.x", 250, 50, "js")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.out()) == 150, what="the 100 the stream kept")
        self.assertEqual(sorted(self.seqs()), list(range(50)) + list(range(200, 300)))
        card = s.card("p", "input")
        self.assertEqual(card["errors"], 150)
        self.assertIn("dropped sequences 51 to 200", card["last_error"])

    def test_jetstream_without_state_dir_acks_once_the_outputs_took_a_batch(self):
        stream = self.stream()
        s = self.start(self.graph(
            f"{{nats: {{url: '{nats_url()}', subject: '{self.tag}.>', stream: {stream}, "
            f"durable: d2, batch_size: 100}}}}"))
        brokertool("nats-pub", nats_url(), f"{self.tag}.y", 1000, 0, "js")
        wait_for(lambda: len(self.out()) == 1000, what="1000 messages")
        # the last batch is acknowledged at the next read
        wait_for(lambda: nats_consumer(stream, "d2")["ack_floor"]["stream_seq"] == 1000,
                 timeout=10, what="everything acknowledged")
        s.stop()

    def test_missing_stream_is_retried_and_named(self):
        s = self.start(self.graph(
            f"{{nats: {{url: '{nats_url()}', subject: 'nothing.>', stream: NOSUCH{self.tag}}}}}"))
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", what="retrying")
        self.assertIn(f"NOSUCH{self.tag} does not exist", s.card("p", "input")["last_error"])

    def test_output_subject_from_a_field_and_jetstream_acks(self):
        stream = self.stream()
        reader = brokertool_reader("nats-sub", nats_url(), f"core{self.tag}.>", 3,
                                   self.path("got"))
        s = self.start(
            "pipelines:\n  p:\n    input: {dummy: {count: 4, template: "
            "'{\"seq\":{{seq}},\"device\":\"d{{seq}}\"}'}}\n"
            "    transforms: [{filter: 'seq != 2'}]\n"
            f"    outputs:\n      - nats: {{url: '{nats_url()}', subject: 'core{self.tag}.{{{{device}}}}'}}\n"
            f"      - nats: {{url: '{nats_url()}', subject: '{self.tag}.js', jetstream: true}}\n"
            f"      - nats: {{url: '{nats_url()}', subject: '{self.tag}.{{{{missing}}}}'}}\n")
        reader.wait(timeout=30)
        with open(self.path("got")) as f:
            got = sorted(l for l in f.read().splitlines() if l)
        self.assertEqual(len(got), 3)
        wait_for(lambda: s.card("p", "outputs[2]")["errors"] == 3, what="three dropped")
        self.assertIn("no field `missing`", s.card("p", "outputs[2]")["last_error"])
        from servers import nats_stream_msgs
        wait_for(lambda: nats_stream_msgs(stream) == 3, what="3 messages in the stream")

    def test_jetstream_output_without_a_stream_fails_the_batch(self):
        s = self.start(self.graph(
            "{dummy: {count: 3}}",
            f"[{{nats: {{url: '{nats_url()}', subject: 'nostream.{self.tag}', jetstream: true}}}}]"))
        wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", timeout=30,
                 what="the output retrying")
        self.assertIn("nats output", s.card("p", "outputs[0]")["last_error"])

    def test_a_failed_flush_fails_the_checkpoint(self):
        proxy = Proxy("127.0.0.1", port_of(nats_url()))
        self.addCleanup(proxy.close)
        url = f"nats://127.0.0.1:{proxy.port}"
        reader = brokertool_reader("nats-sub", nats_url(), f"{self.tag}.f", 20, self.path("got"))
        s = self.start(self.graph(
            "{dummy: {count: 20}}", f"[{{nats: {{url: '{url}', subject: '{self.tag}.f'}}}}]"),
            server_config=SERVER, state_dir=self.path("state"))
        self.assertEqual(reader.wait(timeout=30), 0)
        c0 = committed(s)
        wait_for(lambda: committed(s) > c0, what="a checkpoint after the messages")
        proxy.cut()  # nothing left to write: the barrier's flush is what finds it gone
        abandoned = lambda: sum(r["abandoned"] for r in s.get_json("/api/v1/checkpoints")["regions"])  # noqa: E731
        a0 = abandoned()
        wait_for(lambda: abandoned() > a0, timeout=60, what="a checkpoint abandoned")
        proxy.restore()
        c1 = committed(s)
        wait_for(lambda: committed(s) > c1, timeout=60, what="checkpoints again once it is back")

    def test_core_publishes_a_broken_connection_lost_are_published_again(self):
        # The connection is cut while publishes are in its socket: the next
        # checkpoint's flush, on the reconnected one, must not pass over them.
        proxy = Proxy("127.0.0.1", port_of(nats_url()))
        self.addCleanup(proxy.close)
        url = f"nats://127.0.0.1:{proxy.port}"
        n = 60000
        reader = brokertool_reader("nats-sub", nats_url(), f"{self.tag}.r", 10 * n,
                                   self.path("got"))
        self.addCleanup(reader.kill)
        s = self.start(self.graph(f"{{dummy: {{count: {n}, rate_per_sec: 15000}}}}",
                                  f"[{{nats: {{url: '{url}', subject: '{self.tag}.r'}}}}]"),
                       server_config=SERVER, state_dir=self.path("state"))
        for i in range(1, 6):
            wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= i * n // 7,
                     timeout=30, what=f"publishes before cut {i}")
            proxy.cut()
            proxy.restore()
        wait_for(lambda: s.card("p", "input")["state"] == "finished", timeout=60,
                 what="every message generated")
        c = committed(s)
        wait_for(lambda: committed(s) >= c + 2, timeout=60, what="checkpoints after the end")
        # It ends 10 s after the last message (short of its count: 2); 3: it
        # may have missed some itself (the server dropped it as slow).
        rc = reader.wait(timeout=60)
        self.assertNotEqual(rc, 3, f"the reader missed messages: {reader.stderr.read()}")
        with open(self.path("got")) as f:
            seqs = {json.loads(l)["seq"] for l in f.read().splitlines() if l}
        missing = sorted(set(range(1, n + 1)) - seqs)
        self.assertEqual(len(missing), 0, f"{len(missing)} of {n} never reached the server, "
                         f"from {missing[:1]} to {missing[-1:]}; kayak said:\n{s.stderr()[-3000:]}")

    def test_server_down_and_back(self):
        proxy = Proxy("127.0.0.1", port_of(nats_url()))
        self.addCleanup(proxy.close)
        url = f"nats://127.0.0.1:{proxy.port}"
        proxy.cut()  # down at start
        s = self.start(self.graph(f"{{nats: {{url: '{url}', subject: '{self.tag}.>'}}}}"))
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", what="retrying at start")
        self.assertIn("cannot connect", s.card("p", "input")["last_error"])
        proxy.restore()
        wait_for(lambda: s.card("p", "input")["state"] == "running" and
                 nats_subscribed(f"{self.tag}.>"), timeout=30, what="running")
        brokertool("nats-pub", nats_url(), f"{self.tag}.a", 100)
        wait_for(lambda: len(self.out()) == 100, what="100 messages")
        proxy.cut()  # down mid-run: the card says so, the library reconnects
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                 what="retrying mid-run")
        self.assertIn("reconnecting", s.card("p", "input")["last_error"])
        proxy.restore()
        wait_for(lambda: s.card("p", "input")["state"] == "running", timeout=30,
                 what="running again")
        # the subscription came back with the connection
        wait_for(lambda: (brokertool("nats-pub", nats_url(), f"{self.tag}.b", 10, 100) and
                          len(self.out()) >= 110), timeout=30, what="messages after the restore")

    def test_jetstream_acks_lost_with_the_connection_fail_the_batch_at_once(self):
        # the output's publishes reach the stream but their acks are lost with
        # the link: the batch is written again once the connection is back,
        # not after the whole 30 s wait for acks, and a stop is not held by it
        from harness import post_until_taken
        from servers import nats_stream_msgs
        stream = self.stream()
        proxy = Proxy("127.0.0.1", port_of(nats_url()))
        self.addCleanup(proxy.close)
        url = f"nats://127.0.0.1:{proxy.port}"
        s = self.start(self.graph(
            "{http: {path: /in}}",
            f"[{{nats: {{url: '{url}', subject: '{self.tag}.o', jetstream: true}}}}]"))
        post_until_taken(s, "/in", b'{"seq":0}')
        wait_for(lambda: nats_stream_msgs(stream) == 1, what="the first message acknowledged")
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == 1, what="the first batch written")
        proxy.hold_replies()
        post_until_taken(s, "/in", "\n".join(f'{{"seq":{i}}}' for i in range(1, 11)).encode())
        wait_for(lambda: nats_stream_msgs(stream) == 11, what="ten more in the stream")
        self.assertEqual(s.card("p", "outputs[0]")["messages_out"], 1, "written without its acks")
        proxy.cut()
        proxy.restore()
        # written again (at least once): the ten come a second time
        wait_for(lambda: nats_stream_msgs(stream) == 21, timeout=15, what="the batch again")
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == 11, what="the batch written")
        self.assertIn("connection was lost while the batch awaited", s.stderr())
        self.assertEqual(s.stop(timeout=10), 0)

    def test_options_that_do_not_fit(self):
        for extra, want in [("queue: q, stream: S", "queue group is for core"),
                            ("durable: d", "only with `stream`"),
                            ("ack_wait_secs: 0, stream: S", "ack_wait_secs")]:
            with self.subTest(extra=extra):
                code, text = self.check_config(self.graph(
                    f"{{nats: {{url: '{nats_url()}', subject: x, {extra}}}}}"))
                self.assertNotEqual(code, 0)
                self.assertIn(want, text)
        code, text = self.check_config(self.graph(
            "{dummy: {count: 1}}", f"[{{nats: {{url: '{nats_url()}', subject: 'a.{{{{b'}}}}]"))
        self.assertNotEqual(code, 0)
        self.assertIn("not closed", text)


class NatsTlsTest(BrokerTest):
    """tls:// and the tls block against nats-servers that require TLS (a
    throwaway CA, servers.sh): publish and subscribe over TLS and over mutual
    TLS; a wrong CA, a wrong name, an expired certificate and a missing client
    certificate refused with the reason on the card."""

    def tls(self, *names, **kw):
        return tls_block(env("nats")["NATS_TLS_DIR"], *names, **kw)

    def test_publish_and_subscribe_over_tls_and_mutual_tls(self):
        e = env("nats")
        subject = f"{self.tag}.tls"
        pipes = ""
        for name, url, tls in [("plain", e["NATS_TLS_URL"], self.tls("ca", server_name="localhost")),
                               ("mutual", e["NATS_MTLS_URL"], self.tls("ca", "cert"))]:
            pipes += f"""  sub_{name}:
    input: {{nats: {{url: '{url}', subject: '{subject}', {tls}}}}}
    outputs: [{{file: {{path: {self.path(name)}}}}}]
  pub_{name}:
    input: {{dummy: {{rate_per_sec: 50}}}}
    outputs: [{{nats: {{url: '{url}', subject: '{subject}', {tls}}}}}]
"""
        s = self.start("pipelines:\n" + pipes)
        for name in ("plain", "mutual"):
            wait_for(lambda: len(self.seqs(name)) >= 5, timeout=30,
                     what=f"messages over {name} TLS")
        s.stop()

    def refused(self, url, tls, wants):
        self.assert_refused(
            self.graph(f"{{nats: {{url: '{url}', subject: '{self.tag}.x', {tls}}}}}"), wants)

    def test_a_wrong_ca_a_wrong_name_an_expired_certificate_and_no_client_certificate(self):
        e = env("nats")
        self.refused(e["NATS_TLS_URL"], self.tls("other_ca"),
                     ("unable to get local issuer certificate",))
        self.refused(e["NATS_TLS_URL"], self.tls("ca", server_name="wrong.example"),
                     ("hostname mismatch", "Hostname mismatch"))
        self.refused(e["NATS_EXPIRED_URL"], self.tls("ca"), ("certificate has expired",))
        self.refused(e["NATS_MTLS_URL"], self.tls("ca"),
                     ("certificate required", "requires a client certificate"))


class NatsLoginTest(BrokerTest):
    """user and password, and token, against nats-servers that require them
    (servers.sh): publish and subscribe logged in; a wrong password and a
    missing token refused with the server's reason on the card, and the
    password never in the API or the log."""

    def test_a_user_and_a_token_log_in_and_wrong_ones_are_refused(self):
        e = env("nats")
        subject = f"{self.tag}.login"
        login = f"user: kayak, password: '{e['NATS_LOGIN_PASSWORD']}'"
        token = f"token: '{e['NATS_TOKEN']}'"
        pipes = ""
        for name, url, auth in [("login", e["NATS_LOGIN_URL"], login),
                                ("token", e["NATS_TOKEN_URL"], token)]:
            pipes += f"""  sub_{name}:
    input: {{nats: {{url: '{url}', subject: '{subject}', {auth}}}}}
    outputs: [{{file: {{path: {self.path(name)}}}}}]
  pub_{name}:
    input: {{dummy: {{rate_per_sec: 50}}}}
    outputs: [{{nats: {{url: '{url}', subject: '{subject}', {auth}}}}}]
"""
        s = self.start("pipelines:\n" + pipes)
        for name in ("login", "token"):
            wait_for(lambda: len(self.seqs(name)) >= 5, timeout=30,
                     what=f"messages with a {name}")
        shown = json.dumps(s.get_json("/api/v1/pipelines/sub_login"))
        self.assertNotIn(e["NATS_LOGIN_PASSWORD"], shown)
        self.assertEqual(s.stop(), 0)
        self.assertNotIn(e["NATS_LOGIN_PASSWORD"], s.stderr())
        for url, auth in [(e["NATS_LOGIN_URL"], "user: kayak, password: wrong"),
                          (e["NATS_TOKEN_URL"], "")]:
            extra = f", {auth}" if auth else ""
            s = self.start(self.graph(f"{{nats: {{url: '{url}', subject: '{subject}'{extra}}}}}"))
            wait_for(lambda: "Authorization" in s.card("p", "input")["last_error"], timeout=30,
                     what="the refused login on the card")
            self.assertEqual(s.stop(), 0)
        code, text = self.check_config(self.graph(
            f"{{nats: {{url: '{e['NATS_LOGIN_URL']}', subject: x, password: p}}}}"))
        self.assertEqual(code, 2, text)
        self.assertIn("give `user` too", text)

    def test_an_nkey_and_a_creds_file_log_in_and_strangers_are_refused(self):
        # natsauth (servers.sh) made an nkey user that one server knows, and
        # operator mode on another whose account's user has a .creds file.
        e = env("nats")
        auth = e["NATS_AUTH_DIR"]
        with open(os.path.join(auth, "user.pub")) as f:
            pub = f.read().strip()
        subject = f"{self.tag}.keys"
        nkey = f"nkey: {pub}, nkey_seed_file: {auth}/user.nk"
        creds = f"credentials_file: {auth}/user.creds"
        pipes = ""
        for name, url, login in [("nkey", e["NATS_NKEY_URL"], nkey),
                                 ("creds", e["NATS_JWT_URL"], creds)]:
            pipes += f"""  sub_{name}:
    input: {{nats: {{url: '{url}', subject: '{subject}', {login}}}}}
    outputs: [{{file: {{path: {self.path(name)}}}}}]
  pub_{name}:
    input: {{dummy: {{rate_per_sec: 50}}}}
    outputs: [{{nats: {{url: '{url}', subject: '{subject}', {login}}}}}]
"""
        s = self.start("pipelines:\n" + pipes)
        for name in ("nkey", "creds"):
            wait_for(lambda: len(self.seqs(name)) >= 5, timeout=30,
                     what=f"messages logged in with the {name}")
        self.assertEqual(s.stop(), 0)
        with open(os.path.join(auth, "user.nk")) as f:
            seed = f.read().strip()
        self.assertNotIn(seed, s.stderr())
        # Another user's seed, a user of an account the server does not
        # know, and no login at all: refused with the server's reason.
        for url, login in [(e["NATS_NKEY_URL"], f"nkey: {pub}, nkey_seed_file: {auth}/other.nk"),
                           (e["NATS_JWT_URL"], f"credentials_file: {auth}/stranger.creds"),
                           (e["NATS_JWT_URL"], "")]:
            with self.subTest(login=login):
                extra = f", {login}" if login else ""
                s = self.start(self.graph(
                    f"{{nats: {{url: '{url}', subject: '{subject}'{extra}}}}}"))
                wait_for(lambda: "Authorization" in (s.card("p", "input")["last_error"] or ""),
                         timeout=30, what="the refused login on the card")
                self.assertEqual(s.card("p", "input")["state"], "retrying")
                self.assertEqual(s.stop(), 0)
        for login, want in [
            (f"nkey: {pub}", "nkey and nkey_seed_file go together"),
            (f"nkey: {seed}, nkey_seed_file: {auth}/user.nk", "starts with U"),
            (f"{creds}, user: kayak", "one way to log in"),
            (f"credentials_file: {auth}/missing.creds", "missing.creds cannot be read"),
        ]:
            with self.subTest(want=want):
                code, text = self.check_config(self.graph(
                    f"{{nats: {{url: '{e['NATS_JWT_URL']}', subject: x, {login}}}}}"))
                self.assertEqual(code, 2, text)
                self.assertIn(want, text)
                self.assertNotIn(seed, text)


if __name__ == "__main__":
    unittest.main()
