"""The kafka input and output against real Apache Kafka brokers on loopback
(tests/e2e/kafka_broker.py): the suite's shared broker, and private clusters
for the tests that take a broker down."""
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid

from harness import KayakTest, Server, committed, http, wait_for
import servers
from kafka_broker import KEYS, Broker, checkpointed_offsets, oracle, own_cluster, value  # noqa: F401

class KafkaBase(KayakTest):
    server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"

    def broker(self, topics=("in:4",), cluster=None):
        return Broker(topics, cluster=cluster)

    def own_cluster(self, brokers=1):
        c = own_cluster(self.dir, brokers)
        self.addCleanup(c.close)
        return c

    def config(self, b, group, slow=0, extra_out="", props=""):
        lua = (f"      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end',\n"
               f"               max_instructions: {max(10 * slow, 1000000)}}}\n" if slow else "")
        return f"""
buckets:
  sums: {{}}
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group},
                      batch_size: 50,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"{props}}}}}}}
    transforms:
{lua}      - rolling_window: {{key: k, field: v, window_messages: 5, aggregates: [count, sum]}}
      - bucket: {{name: sums, key: k, op: add, field: v, as: total}}
    outputs: [{{file: {{path: {self.path('out')}}}}}{extra_out}]
"""

    def rows(self):
        return [json.loads(l) for l in self.read_output("out")]

    def assert_matches_oracle(self, rows, n, what, exactly_once=False):
        """Every message 0..n-1 in `rows` (each once with `exactly_once`), with
        the window aggregates and running total of the oracle."""
        want, _ = oracle(n)
        seqs = sorted(r["seq"] for r in rows)
        if exactly_once:
            dup = sorted({q for q in seqs if seqs.count(q) > 1}) if len(seqs) != n else []
            self.assertEqual(seqs, list(range(n)),
                             f"{what}: {len(seqs)} messages for {n}; twice: {dup[:10]}")
        else:
            self.assertEqual(sorted(set(seqs)), list(range(n)), what)
        for r in rows:
            self.assertEqual((r["v_count"], r["v_sum"], r["total"]), want[r["seq"]],
                             f"{what}: seq {r['seq']}")

    def assert_sums(self, s, n):
        _, sums = oracle(n)
        for k, v in sums.items():
            self.assertEqual(s.get_json(f"/api/v1/buckets/sums?key={k}")["value"], v, k)

    def kill_while_consuming(self, cfg, b, group, state, n, kills, rng, most_secs, seed):
        """Starts pipeline `k` and kills it with SIGKILL `kills` times at random
        instants while it consumes; after each kill the group's committed offsets
        are never ahead of the last durable checkpoint."""
        for _ in range(kills):
            s = self.start(cfg, server_config=self.server, state_dir=state)
            # A run that got through the whole topic before its kill leaves
            # nothing for the next one to consume.
            done = lambda: sum((checkpointed_offsets(state, "k") or {}).values()) >= n
            wait_for(lambda: s.card("k", "input")["messages_in"] > 0 or done(), timeout=120,
                     what=f"seed {seed}: the input to consume")
            time.sleep(rng.uniform(0.2, most_secs))
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait(timeout=30)
            s.kill()
            ckpt = checkpointed_offsets(state, "k") or {}
            for p, off in b.committed("in", group).items():
                if off >= 0:
                    self.assertLessEqual(off, ckpt.get(p, -1), f"seed {seed}: partition {p}")


def group_name():
    return "g-" + uuid.uuid4().hex[:8]


class KafkaTest(KafkaBase):

    def test_kill_9_while_consuming_matches_the_batch_oracle(self):
        seed = int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        print(f"\nseed {seed} (KAYAK_SEED={seed} replays it)", file=sys.stderr)
        n = 3000
        b = self.broker()
        b.produce("in", n)
        group = group_name()
        state = self.path("state")
        cfg = self.config(b, group, slow=150000)
        self.kill_while_consuming(cfg, b, group, state, n, 3, rng, 2.0, seed)
        s = self.start(cfg, server_config=self.server, state_dir=state)
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what=f"seed {seed}: every message in the output")
        self.assert_matches_oracle(self.rows(), n, f"seed {seed}", exactly_once=True)
        self.assert_sums(s, n)
        wait_for(lambda: sum(b.committed("in", group).values()) == n, timeout=30,
                 what="the group to commit the final offsets")

    def killed_after_a_checkpoint(self, cfg, state, n):
        """Starts `cfg` on `state`, kills it with SIGKILL once a checkpoint
        holds offsets and before all n messages are out; its log."""
        s = self.start(cfg, server_config=self.server, state_dir=state)
        wait_for(lambda: s.card("k", "input")["messages_in"] > 0, timeout=120,
                 what="the input to consume")
        wait_for(lambda: checkpointed_offsets(state, "k"), timeout=60,
                 what="a checkpoint holding offsets")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        s.kill()
        self.assertLess(len(self.read_output("out")), n, "the kill came too late")
        return s.stderr()

    def restarted_to_the_oracle(self, cfg, state, n, what):
        """Starts `cfg` on `state` again; every message out within 120 s,
        each once with the oracle's aggregates. The server."""
        s = self.start(cfg, server_config=self.server, state_dir=state)
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=120,
                 what=f"{what}: every message after the restart")
        self.assert_matches_oracle(self.rows(), n, what, exactly_once=True)
        return s

    def test_a_static_member_killed_takes_its_place_back_and_loses_nothing(self):
        # With group.instance.id the broker keeps a killed member's place (and
        # its member id) until its session ends. The restarted member takes
        # the place at once; a commit of its restored offsets made outside the
        # group in that name would be fenced, fatally for the client.
        n = 20000  # enough that the kill comes while it still reads
        b = self.broker()
        b.produce("in", n)
        group = group_name()
        state = self.path("state")
        cfg = self.config(b, group, slow=150000,
                          props=f', group.instance.id: "{group}-a"')
        self.killed_after_a_checkpoint(cfg, state, n)
        s = self.restarted_to_the_oracle(cfg, state, n, "static member")
        self.assertNotIn("atal", s.card("k", "input").get("last_error") or "")
        self.assert_sums(s, n)

    def test_a_killed_input_takes_its_place_back_without_waiting_for_its_session(self):
        # With a state directory the input is a static member by default, its
        # id from the directory: the restarted server is assigned at once,
        # not after the killed one's session (here 5 minutes) times out.
        n = 20000
        b = self.broker()
        b.produce("in", n)
        group = group_name()
        state = self.path("state")
        cfg = self.config(b, group, slow=150000,
                          props=', session.timeout.ms: "300000", heartbeat.interval.ms: "1000"')
        cfg = cfg.replace('session.timeout.ms: "6000", heartbeat.interval.ms: "500", ', "")
        first = re.findall(r"static member of group \S+ as (\S+)",
                           self.killed_after_a_checkpoint(cfg, state, n))
        self.assertEqual(len(first), 1, "the input names its static member id")
        self.assertRegex(first[0], r"^kayak-[0-9a-f]{16}\.k$")
        # (Well before the killed member's session ends.)
        s = self.restarted_to_the_oracle(cfg, state, n, "default static member")
        self.assertEqual(re.findall(r"static member of group \S+ as (\S+)", s.stderr()), first)
        self.assert_sums(s, n)
        # Another directory is another member.
        s.stop()
        other = self.start(cfg.replace(f"group: {group}", f"group: {group}x"),
                           server_config=self.server, state_dir=self.path("state2"))
        wait_for(lambda: "static member" in other.stderr(), timeout=30, what="the other's id")
        self.assertNotEqual(re.findall(r"static member of group \S+ as (\S+)", other.stderr()),
                            first)
        other.stop()
        # An empty id in the properties: a dynamic member.
        dynamic = self.start(cfg.replace(f"group: {group}", f"group: {group}y").replace(
                                 'heartbeat.interval.ms: "1000"',
                                 'heartbeat.interval.ms: "1000", group.instance.id: ""'),
                             server_config=self.server, state_dir=self.path("state3"))
        wait_for(lambda: dynamic.card("k", "input")["messages_in"] > 0, timeout=120,
                 what="the dynamic member to consume")
        self.assertNotIn("static member", dynamic.stderr())

    def test_a_second_member_joining_and_leaving_the_group_changes_nothing(self):
        # A real coordinator rebalances the group twice while kayak consumes:
        # when another member joins (it takes partitions, reads them and
        # commits nothing) and when it leaves (they come back). kayak's
        # positions and state stay exact: every message once, sums exact.
        n = 3000
        b = self.broker()
        b.produce("in", n)
        group = group_name()
        state = self.path("state")
        s = self.start(self.config(b, group, slow=150000), server_config=self.server,
                       state_dir=state)
        wait_for(lambda: s.card("k", "input")["messages_in"] > 0, timeout=60,
                 what="the input to consume")
        member = b.member("in", group, 6)
        try:
            first = member.stdout.readline()
            while first and first.strip() == "assigned 0":
                first = member.stdout.readline()
            self.assertRegex(first, r"assigned [1-9]", "the second member got partitions")
            while member.stdout.readline():
                pass
        finally:
            member.wait(timeout=60)
            member.stdout.close()
        self.assertLess(len(self.read_output("out")), n, "the rebalance came too late")
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what="every message in the output")
        wait_for(lambda: s.card("k", "input")["state"] == "running", what="running")
        self.assert_matches_oracle(self.rows(), n, "after two rebalances", exactly_once=True)
        self.assert_sums(s, n)
        wait_for(lambda: sum(b.committed("in", group).values()) == n, timeout=30,
                 what="the group to commit the final offsets")

    def test_the_cooperative_assignor_moves_only_what_changes(self):
        # With `cooperative-sticky` the group gives and takes single
        # partitions. A second server joins (it reads what it is given, with
        # no state of kayak's) and leaves: the first lets go of the two it
        # hands over, keeps reading the other two, takes them back and goes
        # on from its own positions. Every message once, sums exact.
        n = 20000
        b = self.broker()
        b.produce("in", n)
        group = group_name()
        coop = ', partition.assignment.strategy: "cooperative-sticky"'
        s = self.start(self.config(b, group, slow=150000, props=coop),
                       server_config=self.server, state_dir=self.path("state"))
        wait_for(lambda: s.card("k", "input")["messages_in"] > 0, timeout=60,
                 what="the input to consume")
        os.makedirs(self.path("second"))
        second = f"""
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group},
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"{coop}}}}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,150000 do end return m end',
               max_instructions: 1500000}}
    outputs: [{{file: {{path: {self.path('second', 'out')}}}}}]
"""
        other = Server(self.path("second"), second)
        self.servers.append(other)
        wait_for(lambda: other.card("k", "input")["messages_in"] > 0, timeout=60,
                 what="the second server to read what it was given")
        self.assertIn("kafka input: 2 partitions revoked", s.stderr())
        self.assertNotIn("4 partitions revoked", s.stderr(), "only what moved was revoked")
        self.assertEqual(other.stop(), 0)
        wait_for(lambda: len(re.findall(r"kafka input: assigned 2 partitions", s.stderr())) >= 1
                 and "assigned 4 partitions" in s.stderr(), timeout=60,
                 what="the two partitions back")
        self.assertLess(len(self.read_output("out")), n, "the rebalances came too late")
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what="every message in the output")
        self.assert_matches_oracle(self.rows(), n, "cooperative", exactly_once=True)
        self.assert_sums(s, n)
        self.assertEqual(s.card("k", "input").get("last_error") or "", "")

    def test_start_latest_loses_nothing_to_a_kill_before_the_first_checkpoint(self):
        # The position where `latest` put each partition is pinned at
        # assignment: a kill -9 before any checkpoint covers the partition
        # restarts there, not at a later end.
        b = self.broker(topics=("in:2",))
        b.produce("in", 100)  # before the start: not read
        group = group_name()
        cfg = f"""
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group},
                      start: latest,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\n"
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        wait_for(lambda: "assigned" in s.stderr(), timeout=60, what="the assignment")
        b.produce("in", 50)  # after the assignment: read from the pinned end
        wait_for(lambda: len(self.read_output("out")) >= 50, timeout=60, what="the 50 new ones")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        # the file output went back to the checkpoint taken at start (empty):
        # the 50 must come again
        wait_for(lambda: len(self.read_output("out")) >= 50, timeout=60,
                 what="the 50 read again after the kill")
        self.assertEqual(sorted(r["seq"] for r in self.rows()), list(range(50)))

    def test_kafka_output_delivers_every_message(self):
        b = self.broker(topics=("in:4", "out:2"))
        b.produce("in", 400)
        group = group_name()
        out = (f', {{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t("out")}", key: k, '
               f'compression: zstd}}}}')
        s = self.start(self.config(b, group, extra_out=out))
        wait_for(lambda: s.card("k", "outputs[1]")["messages_out"] >= 400, timeout=60,
                 what="400 messages produced to `out`")
        # read them back through a second kayak pipeline: a kafka input on `out`
        cfg = f"""
pipelines:
  back:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('out')}"], group: r-{group},
                      meta_field: _kafka}}}}
    outputs: [{{file: {{path: {self.path('back')}}}}}]
"""
        self.start(cfg)
        wait_for(lambda: len(self.read_output("back")) >= 400, timeout=60, what="the read-back")
        rows = [json.loads(l) for l in self.read_output("back")]
        self.assertEqual(sorted(r["seq"] for r in rows), list(range(400)))
        self.assertEqual(rows[0]["_kafka"]["topic"], b.t("out"))
        self.assertEqual(rows[0]["_kafka"]["key"], rows[0]["k"])

    def test_a_message_whose_key_fails_is_dropped_once_and_the_rest_produced_once(self):
        # `key: 'k + 1'` fails on the one message whose k is a string (a
        # type error): it goes to the dead letters (with exactly_once too:
        # a transaction per checkpoint), counted, the other 49 of its batch
        # are produced once, and the output goes on (no retry of the batch).
        b = self.broker(topics=("out:1", "out2:1", "txn.markers:1"))
        group = group_name()
        for exactly_once in (False, True):
            with self.subTest(exactly_once=exactly_once):
                topic = "out" if not exactly_once else "out2"
                txn = f", transactional_id: {b.t('txn')}" if exactly_once else ""
                cfg = f"""
pipelines:
  k:
    input: {{http: {{path: /in}}}}
    outputs: [{{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t(topic)}", key: 'k + 1',
                         exactly_once: {str(exactly_once).lower()}{txn}}}}}]
    dead_letter: {{file: {{path: dead-{str(exactly_once).lower()}}}}}
"""
                state = self.path(f"state-{exactly_once}")
                s = self.start(cfg, server_config=self.server, state_dir=state)
                rows = [{"seq": i, "k": i} for i in range(50)]
                rows[17]["k"] = "bad"
                body = "\n".join(json.dumps(r) for r in rows)
                wait_for(lambda: http("POST", s.url + "/in", body.encode())[0] == 202,
                         what="the post to be taken")
                wait_for(lambda: s.card("k", "outputs[0]")["errors"] >= 1, timeout=60,
                         what="the bad message counted")
                ok = b'{"seq": 50, "k": 50}'
                self.assertEqual(http("POST", s.url + "/in", ok)[0], 202)
                # a checkpoint commits after the drop: the output is not stuck
                c0 = committed(s)
                wait_for(lambda: committed(s) >= c0 + 2, timeout=60,
                         what="checkpoints after the bad message")
                card = s.card("k", "outputs[0]")
                self.assertEqual(card["errors"], 1, card)
                self.assertIn("key", card["last_error"])
                self.assertEqual(s.stop(), 0)
                got = b.read(topic)
                self.assertEqual(sorted(r["seq"] for r in got), [i for i in range(51) if i != 17])
                dead = [json.loads(l) for l in self.read_output(f"dead-{str(exactly_once).lower()}")]
                self.assertEqual([d["message"]["seq"] for d in dead], [17])
                self.assertEqual((dead[0]["component"], dead[0]["type"]), ("outputs[0]", "kafka"))
                self.assertIn("key", dead[0]["reason"])
                self.assertEqual(card["dead_letters"], 1)

    def test_a_bad_property_name_is_a_config_error(self):
        cfg = ("pipelines:\n  k:\n    input: {kafka: {brokers: 127.0.0.1:1, topics: [t], group: g,"
               " properties: {no.such.property: x}}}\n    outputs: [{stdout: {}}]\n")
        with open(self.path("bad.yaml"), "w") as f:
            f.write(cfg)
        r = subprocess.run([os.environ.get("KAYAK_BIN", "kayak"), "check", self.path("bad.yaml")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no.such.property", r.stderr)

    def test_topic_per_message_from_an_expression(self):
        b = self.broker(topics=("in:4",) + tuple(f"k{i}:1" for i in range(KEYS)))
        b.produce("in", 140)
        group = group_name()
        cfg = f"""
pipelines:
  route:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group}}}}}
    outputs: [{{kafka: {{brokers: "{b.bootstrap}", topic_expr: '"{b.prefix}." + k'}}}}]
  back:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('k3')}"], group: r-{group}}}}}
    outputs: [{{file: {{path: {self.path('k3')}}}}}]
"""
        self.start(cfg)
        wait_for(lambda: len(self.read_output("k3")) >= 20, timeout=90, what="topic k3's messages")
        rows = [json.loads(l) for l in self.read_output("k3")]
        self.assertEqual(sorted(r["seq"] for r in rows), [i for i in range(140) if i % 7 == 3])


class BrokerOutageTest(KafkaBase):
    """A private broker of the test's own, killed (SIGKILL) and started again
    on the same port with its data."""

    def test_broker_down_shows_on_the_card_and_nothing_is_lost(self):
        b = self.broker(cluster=self.own_cluster())
        b.produce("in", 500)
        group = group_name()
        s = self.start(self.config(b, group), server_config=self.server,
                       state_dir=self.path("state"))
        wait_for(lambda: len(self.read_output("out")) >= 500, timeout=60, what="the first 500")
        b.down()
        wait_for(lambda: s.card("k", "input")["errors"] > 0, timeout=60,
                 what="the broker outage on the card")
        self.assertIn("kafka", s.card("k", "input")["last_error"])
        # retrying, not running, while no broker answers (and /ready says so)
        wait_for(lambda: s.card("k", "input")["state"] == "retrying", timeout=60,
                 what="the input to show that it retries")
        self.assertEqual(s.get("/ready")[0], 503)
        b.up()
        b.produce("in", 500)
        wait_for(lambda: len(self.read_output("out")) >= 1000, timeout=120,
                 what="the messages produced after the broker came back")
        self.assertEqual(sorted(r["seq"] for r in self.rows()), sorted(list(range(500)) * 2))
        wait_for(lambda: s.card("k", "input")["state"] == "running", what="running again")

    def test_kafka_output_produces_again_what_a_broker_outage_failed(self):
        # The broker is down while the output produces: the messages time
        # out (1.5 s), are kept, produced again, and delivered once the
        # broker is back.
        b = self.broker(topics=("out:2",), cluster=self.own_cluster())
        cfg = f"""
pipelines:
  k:
    input: {{http: {{path: /in}}}}
    outputs: [{{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t('out')}", key: k,
                         properties: {{message.timeout.ms: "1500"}}}}}}]
"""
        s = self.start(cfg, server_config=self.server, state_dir=self.path("state"))
        wait_for(lambda: s.card("k", "input")["state"] == "running", what="the http input")
        b.down()
        body = "\n".join(json.dumps({"seq": i, "k": f"k{i}"}) for i in range(300))
        status, _, _ = http("POST", s.url + "/in", body.encode())
        self.assertEqual(status, 202)
        # Reported on the card when a write or a checkpoint meets them, in the
        # log when the idle output's tick does.
        try:
            wait_for(lambda: "not delivered" in (s.card("k", "outputs[0]").get("last_error") or "")
                     or "not delivered" in s.stderr(),
                     timeout=60, what="undelivered messages reported")
        except AssertionError as e:
            raise AssertionError(f"{e}\ncard: {s.card('k', 'outputs[0]')}\n"
                                 f"log: {s.stderr()[-3000:]}") from None
        b.up()
        wait_for(lambda: s.card("k", "outputs[0]")["messages_out"] >= 300, timeout=120,
                 what="every message delivered after the broker came back")
        self.assertEqual({r["seq"] for r in b.read("out")}, set(range(300)))


class HttpWriteAheadTest(KafkaBase):
    """An http input given `topic` writes each post to it before its 202;
    the pipeline's steps read the topic back as a part of their own."""

    # A post is answered within `timeout_ms`, well inside the client's 10 s.
    def graph(self, b, timeout_ms=5000):
        return f"""
buckets:
  per_dev: {{}}
pipelines:
  h:
    input: {{http: {{path: /ingest, topic: "{b.t('posts')}", brokers: "{b.bootstrap}", key: dev,
                    delivery_timeout_ms: {timeout_ms}}}}}
    transforms:
      - bucket: {{name: per_dev, key: dev, op: add, field: v}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""

    @staticmethod
    def body(first, count, devices=5):
        return "".join(json.dumps({"seq": i, "dev": f"d{i % devices}", "v": value(i)}) + "\n"
                       for i in range(first, first + count)).encode()

    @staticmethod
    def sums(seqs, devices=5):
        out = {}
        for i in seqs:
            out[f"d{i % devices}"] = out.get(f"d{i % devices}", 0) + value(i)
        return out

    def assert_counted(self, s, seqs):
        want = self.sums(seqs)

        def counted():
            for k, v in want.items():
                status, _, text = http("GET", s.url + f"/api/v1/buckets/per_dev?key={k}")
                if status != 200 or json.loads(text)["value"] != v:
                    return False
            return True
        wait_for(counted, timeout=120, what="every accepted post counted")
        for k, v in want.items():
            self.assertEqual(s.get_json(f"/api/v1/buckets/per_dev?key={k}")["value"], v, k)

    def post(self, s, first, count):
        """Posts until 202 (503 while it starts); the 202's body."""
        out = {}

        def once():
            status, _, text = http("POST", s.url + "/ingest", self.body(first, count))
            self.assertIn(status, (202, 503), text)
            out["text"] = text
            return status == 202
        wait_for(once, timeout=60, what="a 202")
        return json.loads(out["text"])

    def test_each_post_is_in_the_topic_before_its_202_and_counted_once_after_a_kill(self):
        b = self.broker(("posts:3",))
        state = self.path("state")
        s = self.start(self.graph(b), server_config=self.server, state_dir=state)
        n = 0
        for _ in range(20):
            self.assertEqual(self.post(s, n, 25), {"accepted": 25})
            n += 25
        # A message whose key cannot be computed: the post gets 400 and none
        # of its messages go to the topic.
        bad = self.body(10000, 3) + b'{"seq": 10003, "v": 1}\n'
        status, _, text = http("POST", s.url + "/ingest", bad)
        self.assertEqual(status, 400, text)
        self.assertIn("key", json.loads(text)["error"])
        # Accepted, then killed before the part reading the topic can have
        # counted them all.
        for _ in range(10):
            self.post(s, n, 25)
            n += 25
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        s.kill()
        s = self.start(self.graph(b), server_config=self.server, state_dir=state)
        for _ in range(4):
            self.post(s, n, 25)
            n += 25
        self.assert_counted(s, range(n))
        got = b.read("posts", isolation="read_uncommitted")
        self.assertEqual(sorted(m["seq"] for m in got), list(range(n)))
        self.assertEqual(s.card("h-part2", "input")["type"], "kafka")

    def test_a_post_the_broker_does_not_take_gets_503_and_a_retry_goes_through(self):
        b = self.broker(("posts:1",), cluster=self.own_cluster())
        s = self.start(self.graph(b, timeout_ms=2000), server_config=self.server,
                       state_dir=self.path("state"))
        self.post(s, 0, 10)
        b.down()
        status, headers, text = http("POST", s.url + "/ingest", self.body(10, 10))
        self.assertEqual(status, 503, text)
        self.assertIn("kafka", json.loads(text)["error"])
        self.assertIn("Retry-After", headers)
        wait_for(lambda: "written ahead" in (s.card("h", "input")["last_error"] or ""),
                 timeout=30, what="the failure on the input's card")
        b.up()
        self.post(s, 10, 10)
        self.assert_counted(s, range(20))


class ReplicatedClusterTest(KafkaBase):
    """Three brokers, topics with three replicas and min.insync.replicas 2."""

    def test_a_broker_killed_under_load_loses_nothing(self):
        b = self.broker(topics=("in:4:3", "out:4:3"), cluster=self.own_cluster(3))
        n = 4000
        b.produce("in", n)
        group = group_name()
        out = (f', {{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t("out")}", key: k, '
               f'properties: {{acks: all}}}}}}')
        s = self.start(self.config(b, group, slow=60000, extra_out=out),
                       server_config=self.server, state_dir=self.path("state"))
        wait_for(lambda: len(self.read_output("out")) >= n // 4, timeout=120,
                 what="a quarter of the messages")
        self.assertLess(len(self.read_output("out")), n, "the kill came too late")
        b.down(1)  # SIGKILL: a leader of some partitions, a replica of the rest
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=240,
                 what="every message in the file output with a broker dead")
        b.up(1)
        self.assert_matches_oracle(self.rows(), n, "file output", exactly_once=True)
        self.assert_sums(s, n)
        wait_for(lambda: s.card("k", "outputs[1]")["messages_out"] >= n, timeout=120,
                 what="every message produced to `out`")
        self.assert_matches_oracle(b.read("out"), n, "topic out")
        wait_for(lambda: sum(b.committed("in", group).values()) == n, timeout=60,
                 what="the group to commit the final offsets")


def manifests(state):
    """The committed manifests in the state dir, oldest first, as (id, JSON)."""
    out = []
    for p in glob.glob(os.path.join(state, "MANIFEST-*.kym")):
        with open(p, "rb") as f:
            m = json.loads(f.read()[32:])
        out.append((m["checkpoint"], m))
    return sorted(out, key=lambda e: e[0])


def unit_data(state, manifest, unit):
    with open(os.path.join(state, manifest["units"][unit]["chunk"]), "rb") as f:
        return json.loads(f.read()[32:])


class ExactlyOnceTest(KafkaBase):
    """`exactly_once: true` on the kafka output: a transaction per checkpoint,
    committed once the checkpoint is durable, with a marker a restart reads.
    Against the real broker, a read_committed consumer of the output topic
    sees every message exactly once across kill -9 at each crash point, and
    the aborted transactions' messages (there for read_uncommitted) stay
    invisible to it."""

    def eos_config(self, b, group, slow=0):
        out = (f', {{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t("out")}", key: k, '
               f'exactly_once: true, transactional_id: {b.t("txn")}}}}}')
        return self.config(b, group, slow=slow, extra_out=out)

    def eos_broker(self):
        b = self.broker(topics=("in:4", "out:2", "txn.markers:1"))
        return b

    def assert_topic_exactly_once(self, b, n, what):
        """A read_committed read of `out` to its end: every message once."""
        self.assert_matches_oracle(b.read("out"), n, f"{what}: topic out (read_committed)",
                                   exactly_once=True)

    def crash_at(self, point, n=1500):
        """Dies at `point` (of the second checkpoint with data), restarts,
        finishes: the file output, the bucket and the topic's committed
        messages match the oracle, each message once."""
        b = self.eos_broker()
        b.produce("in", n)
        group = group_name()
        state = self.path("state")
        cfg = self.eos_config(b, group, slow=1000000)  # about 5 ms a message
        s = self.start(cfg, server_config=self.server, state_dir=state,
                       env={"KAYAK_CRASH_POINT": f"{point}:2"})
        try:
            wait_for(lambda: s.proc.poll() is not None, timeout=120, what="the crash point")
        except AssertionError as e:
            raise AssertionError(f"{e}: {s.stderr()[-3000:]}") from None
        self.assertIn(f"crash point {point} reached", s.stderr())
        kept = manifests(state)
        self.assertEqual(len(kept), 2, [k for k, _ in kept])
        (before_id, before), (newest_id, newest) = kept
        # The inputs heard of checkpoint N-1 only: the group is not past it.
        before_offsets = {p: o for _, p, o in unit_data(state, before, "p.k.input")["offsets"]}
        newest_offsets = {p: o for _, p, o in unit_data(state, newest, "p.k.input")["offsets"]}
        self.assertGreater(sum(newest_offsets.values()), sum(before_offsets.values()))
        for p, off in b.committed("in", group).items():
            if off >= 0:
                self.assertLessEqual(off, before_offsets.get(p, -1), f"partition {p}")

        s = self.start(cfg, server_config=self.server, state_dir=state)
        wait_for(lambda: f"checkpoint {newest_id} was not committed to it" in s.stderr(),
                 what="the fall-back in the log")
        self.assertIn(f"restoring region k from checkpoint {before_id} instead of {newest_id}",
                      s.stderr())
        try:
            wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                     what="every message in the file output")
        except AssertionError as e:
            raise AssertionError(f"{e}: {s.card('k', 'input')}\n{s.stderr()[-3000:]}") from None
        # The file output went back to checkpoint N-1 with the rest of the
        # region: every message in it once, with state matching the oracle.
        self.assert_matches_oracle(self.rows(), n, "file output", exactly_once=True)
        self.assert_sums(s, n)
        # The group's offsets reach the end once the last commit happened.
        wait_for(lambda: sum(b.committed("in", group).values()) == n, timeout=60,
                 what="the group to commit the final offsets")
        s.stop()
        self.assert_topic_exactly_once(b, n, point)
        return b

    def test_a_kill_before_the_marker_is_replayed_and_read_once(self):
        self.crash_at("kafka_before_marker")

    def test_a_kill_before_the_commit_is_aborted_and_read_once(self):
        b = self.crash_at("kafka_before_commit")
        # The killed transaction's messages are in the log, aborted: a
        # read_uncommitted consumer sees them besides the committed ones.
        uncommitted = b.read("out", isolation="read_uncommitted")
        self.assertGreater(len(uncommitted), 1500, "the aborted transaction held messages")

    def restarted_after_its_commit(self, b, n, while_down=lambda: None, on_restart=None):
        """Dies right after the commit of its second checkpoint with data,
        runs `while_down`, restarts and finishes (`on_restart(server)` first,
        before its API listens):
        the restart finds the commit (it does not go back to the checkpoint
        before and replay it), and every message is in the file output and
        the topic once."""
        group = group_name()
        state = self.path("state")
        cfg = self.eos_config(b, group, slow=1000000)
        s = self.start(cfg, server_config=self.server, state_dir=state,
                       env={"KAYAK_CRASH_POINT": "kafka_after_commit:2"})
        wait_for(lambda: s.proc.poll() is not None, timeout=120, what="the crash point")
        self.assertIn("crash point kafka_after_commit reached", s.stderr())
        while_down()
        s = self.start(cfg, server_config=self.server, state_dir=state, wait=on_restart is None)
        if on_restart:
            on_restart(s)
            s.url = wait_for(s._find_url, what="the API address in the log")
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what="every message in the file output")
        self.assertNotIn("was not committed to it", s.stderr())
        self.assert_matches_oracle(self.rows(), n, "file output", exactly_once=True)
        self.assert_sums(s, n)
        s.stop()
        self.assert_topic_exactly_once(b, n, "after the restart")

    def test_a_commit_behind_another_producers_open_transaction_is_found(self):
        """Another producer's transaction open on the marker topic since
        before the commit holds its end back: a read_committed reader does
        not see the marker yet. The restart waits for it to end instead of
        taking the commit as not made and replaying it into the topic."""
        b = self.eos_broker()
        n = 1500
        b.produce("in", n)
        holder = b.hold("txn.markers", b.t("other-txn"))
        self.addCleanup(holder.kill)
        self.addCleanup(holder.stdout.close)

        def held_then_released(s):
            try:
                wait_for(lambda: "where a transaction still open holds its end" in s.stderr(),
                         timeout=60, what="the restart to wait for the open transaction")
            except AssertionError as e:
                raise AssertionError(f"{e}: {s.stderr()[-3000:]}") from None
            self.assertIn(0, b.open_transactions("txn.markers"))
            holder.stdin.close()
            self.assertEqual(holder.wait(timeout=60), 0)
        self.restarted_after_its_commit(b, n, on_restart=held_then_released)

    def test_a_marker_far_behind_the_end_of_its_topic_is_found(self):
        """Another writer of the marker topic put 3,000 records after the
        commit's marker: the restart looks for it from the time it was made."""
        b = self.eos_broker()
        n = 1500
        b.produce("in", n)
        self.restarted_after_its_commit(b, n, while_down=lambda: b.produce("txn.markers", 3000))

    def test_kill_9_repeatedly_with_one_marker_per_committed_checkpoint(self):
        seed = int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        print(f"\nseed {seed} (KAYAK_SEED={seed} replays it)", file=sys.stderr)
        n = 3000
        b = self.eos_broker()
        b.produce("in", n)
        group = group_name()
        state = self.path("state")
        cfg = self.eos_config(b, group, slow=150000)
        self.kill_while_consuming(cfg, b, group, state, n, 3, rng, 1.5, seed)
        s = self.start(cfg, server_config=self.server, state_dir=state)
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what=f"seed {seed}: every message in the file output")
        s.stop()  # a savepoint: its transaction commits before the server exits
        self.assert_matches_oracle(self.rows(), n, f"seed {seed}: file output", exactly_once=True)
        self.assert_topic_exactly_once(b, n, f"seed {seed}")
        ms = b.read("txn.markers")
        self.assertTrue(all(m["transactional_id"] == b.t("txn") for m in ms), ms[:3])
        ids = [m["checkpoint"] for m in ms]
        self.assertEqual(len(set(m["marker"] for m in ms)), len(ms), "each marker is unique")
        # Commits follow checkpoints in order (an id may come twice: a
        # fall-back can reuse the id of a checkpoint it dropped).
        self.assertGreaterEqual(len(ids), 2)
        self.assertEqual(ids, sorted(ids))

    def test_a_pipeline_change_commits_before_the_rebuild(self):
        # A change stops the graph at a savepoint: the output commits its
        # transaction first, so the rebuilt output finds the savepoint's
        # marker and nothing is replayed.
        b = self.broker(topics=("out:2", "txn.markers:1"))
        out = (f'{{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t("out")}", key: k, '
               f'exactly_once: true, transactional_id: {b.t("txn")}}}}}')
        pipeline = ("input: {http: {path: /in}}\n"
                    "transforms: [%s]\n"
                    f"outputs: [{out}]\n")
        cfg = "pipelines:\n  p:\n" + "".join(
            "    " + l + "\n" for l in (pipeline % "{map: {stage: '1'}}").splitlines())
        s = self.start(cfg, server_config=self.server, state_dir=self.path("state"))

        def post(lo, hi):
            data = "\n".join(json.dumps({"seq": i, "k": f"k{i % 3}"}) for i in range(lo, hi))
            wait_for(lambda: http("POST", s.url + "/in", data.encode())[0] == 202,
                     what="the post to be accepted")

        post(0, 100)
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= 100, what="100 produced")
        status, _, answer = http("PUT", s.url + "/api/v1/pipelines/p",
                                 (pipeline % "{map: {stage: '2'}}").encode())
        self.assertEqual(status, 200, answer)
        self.assertIn("pipeline p outputs[0] (p.p.o0) restored from checkpoint", s.stderr())
        self.assertNotIn("was not committed", s.stderr())
        post(100, 200)
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= 100, what="100 more")
        s.stop()
        rows = b.read("out")
        self.assertEqual(sorted(r["seq"] for r in rows), list(range(200)))
        self.assertEqual({r["stage"] for r in rows if r["seq"] < 100}, {1})
        self.assertEqual({r["stage"] for r in rows if r["seq"] >= 100}, {2})

    def test_exactly_once_needs_a_state_dir(self):
        cfg = ("pipelines:\n  k:\n    input: {http: {path: /in}}\n"
               "    outputs: [{kafka: {brokers: 127.0.0.1:1, topic: t, exactly_once: true}}]\n")
        s = self.start(cfg, wait=False)
        self.assertEqual(s.proc.wait(timeout=30), 2)
        self.assertIn("exactly_once", s.stderr())
        self.assertIn("needs a state directory", s.stderr())
        cfg = ("pipelines:\n  k:\n    input: {http: {path: /in}}\n"
               "    outputs: [{kafka: {brokers: 127.0.0.1:1, topic: t, transactional_id: x}}]\n")
        with open(self.path("bad.yaml"), "w") as f:
            f.write(cfg)
        r = subprocess.run([os.environ.get("KAYAK_BIN", "kayak"), "check", self.path("bad.yaml")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("only with exactly_once", r.stderr)


class KafkaTlsTest(KafkaBase):
    """The tls block and sasl against the suite's broker's TLS listeners (a
    throwaway CA, kafka_cluster.py --tls): a producer with a client
    certificate, a consumer with SASL PLAIN over TLS; a wrong
    CA, an expired certificate, a missing client certificate and a wrong
    password refused with librdkafka's reason on the card."""

    def setUp(self):
        super().setUp()
        self.env = servers.env("kafka")
        self.ca = os.path.join(self.env["KAFKA_TLS_DIR"], "ca.crt")

    def tls(self, ca=None, cert=False):
        parts = [f"ca_file: {ca or self.ca}"]
        if cert:
            d = self.env["KAFKA_TLS_DIR"]
            parts += [f"cert_file: {d}/client.crt", f"key_file: {d}/client.key"]
        return "tls: {" + ", ".join(parts) + "}"

    def sasl(self, mechanism="PLAIN", password=None):
        return (f"sasl: {{mechanism: {mechanism}, username: kayak, "
                f"password: '{password or self.env['KAFKA_SASL_PASSWORD']}'}}")

    def test_produce_with_a_client_certificate_and_consume_with_sasl_over_tls(self):
        b = self.broker(topics=("out:2",))
        group = group_name()
        cfg = f"""
pipelines:
  gen:
    input: {{dummy: {{count: 300}}}}
    outputs: [{{kafka: {{brokers: "{self.env['KAFKA_SSL_BROKERS']}", topic: "{b.t('out')}",
                        {self.tls(cert=True)}}}}}]
  plain:
    input: {{kafka: {{brokers: "{self.env['KAFKA_SASL_BROKERS']}", topics: ["{b.t('out')}"],
                     group: p-{group}, {self.tls()}, {self.sasl()}}}}}
    outputs: [{{file: {{path: {self.path('plain')}}}}}]
"""
        s = self.start(cfg)
        for name in ("plain",):
            wait_for(lambda: len(self.read_output(name)) >= 300, timeout=90,
                     what=f"300 messages read with SASL {name}")
            self.assertEqual(sorted(json.loads(l)["seq"] for l in self.read_output(name)),
                             list(range(1, 301)))
        # The password is shown as *** and written to no log line.
        self.assertNotIn(self.env["KAFKA_SASL_PASSWORD"], json.dumps(s.get_json("/api/v1/pipelines/plain")))
        s.stop()
        self.assertNotIn(self.env["KAFKA_SASL_PASSWORD"], s.stderr())

    def refused(self, brokers, options, wants):
        b = self.broker(topics=("in:1",))
        cfg = f"""
pipelines:
  p:
    input: {{kafka: {{brokers: "{brokers}", topics: ["{b.t('in')}"], group: {group_name()},
                     {options}}}}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""
        self.assert_refused(cfg, wants, timeout=60)

    def test_a_wrong_ca_an_expired_certificate_no_client_certificate_and_a_wrong_password(self):
        e = self.env
        other = os.path.join(e["KAFKA_TLS_DIR"], "other-ca.crt")
        verify = ("certificate verify failed",)
        self.refused(e["KAFKA_SASL_BROKERS"], f"{self.tls(other)}, {self.sasl()}", verify)
        self.refused(e["KAFKA_EXPIRED_BROKERS"], self.tls(), verify)
        self.refused(e["KAFKA_SSL_BROKERS"], self.tls(), ("SSL", "certificate required"))
        self.refused(e["KAFKA_SASL_BROKERS"], f"{self.tls()}, {self.sasl(password='wrong')}",
                     ("Authentication failed", "authentication failed"))

    def test_a_stop_does_not_wait_on_a_refused_broker_and_loses_nothing(self):
        """An output whose broker refuses its handshake (another CA) holds
        messages in librdkafka's queue: a stop gives up on them (not after the
        producer's five-minute message timeout) and, with a state dir, the
        next start over the right CA delivers every one."""
        b = self.broker(topics=("out:1",))
        other = os.path.join(self.env["KAFKA_TLS_DIR"], "other-ca.crt")

        def cfg(ca):
            return f"""
pipelines:
  p:
    input: {{dummy: {{count: 50}}}}
    outputs: [{{kafka: {{brokers: "{self.env['KAFKA_SASL_BROKERS']}", topic: "{b.t('out')}",
                        {self.tls(ca)}, {self.sasl()}}}}}]
"""
        server = "listen: 127.0.0.1:0\nstop_timeout_secs: 3\ncheckpoint: {interval_secs: 1}\n"
        for state in (None, self.path("state")):
            s = self.start(cfg(other), server_config=server, state_dir=state)
            wait_for(lambda: "SSL" in s.card("p", "outputs[0]")["last_error"], timeout=60,
                     what="the refused handshake on the output's card")
            # 3 s for the savepoint, at most 10 for the producer's queue (the
            # harness allows 30 before it calls the stop hung)
            self.assertEqual(s.stop(), 1 if state else 0, s.stderr()[-2000:])
            self.assertIn("not acknowledged by the broker", s.stderr())
        s = self.start(cfg(None), server_config=server, state_dir=self.path("state"))
        got = b.read("out", n=50, seconds=60)
        self.assertEqual(sorted(m["seq"] for m in got), list(range(1, 51)))
        self.assertEqual(s.stop(), 0)

    def test_scram(self):
        """SCRAM-SHA-256 with the user the broker lists: librdkafka before 2.6.1
        sends a proof Kafka 4 refuses, and the card says so; a newer one reads."""
        version = subprocess.run(["pkg-config", "--modversion", "rdkafka"], capture_output=True,
                                 text=True).stdout.strip()
        if tuple(int(x) for x in version.split(".")[:3]) >= (2, 6, 1):
            b = self.broker(topics=("in:1",))
            b.produce("in", 10)
            s = self.start(f"""
pipelines:
  p:
    input: {{kafka: {{brokers: "{self.env['KAFKA_SASL_BROKERS']}", topics: ["{b.t('in')}"],
                     group: {group_name()}, start: earliest, {self.tls()},
                     {self.sasl("SCRAM-SHA-256")}}}}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
""")
            wait_for(lambda: len(self.read_output("out")) == 10, timeout=60, what="10 messages")
            self.assertEqual(s.stop(), 0)
            return
        self.refused(self.env["KAFKA_SASL_BROKERS"], f"{self.tls()}, {self.sasl('SCRAM-SHA-256')}",
                     ("librdkafka 2.6.1 fixed it",))

    def test_sasl_and_tls_options_that_cannot_work_are_config_errors(self):
        for options, want in [("sasl: {mechanism: GSSAPI, username: a, password: b}", "GSSAPI"),
                              ("sasl: {mechanism: PLAIN, username: a}", "username and password"),
                              (f"tls: {{ca_file: {self.ca}, server_name: x.example}}", "server_name")]:
            cfg = (f"pipelines:\n  p:\n    input: {{kafka: {{brokers: \"127.0.0.1:1\", topics: [t], "
                   f"group: g, {options}}}}}\n    outputs: [{{stdout: {{}}}}]\n")
            with open(self.path("bad.yaml"), "w") as f:
                f.write(cfg)
            r = subprocess.run([os.environ.get("KAYAK_BIN", "kayak"), "check", self.path("bad.yaml")],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)
