"""The kafka input and output against a Kafka-protocol broker on loopback
(tests/kafka/mockbroker.c, librdkafka's mock cluster in its own process)."""
import glob
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
import uuid

from harness import KayakTest, committed, http, wait_for

MOCK = os.environ.get("KAYAK_MOCKBROKER", "")
KEYS = 7


def value(i):
    return (i * 31) % 97


def oracle(n):
    """What a batch computation gives for the messages `mockbroker produce` wrote
    through a 5-message count window and a running sum per key (in production
    order: a key stays on one partition). Returns ({seq: (count, sum, total)},
    {key: final sum})."""
    windows, sums, want = {}, {}, {}
    for i in range(n):
        k = f"k{i % KEYS}"
        w = windows.setdefault(k, [])
        w.append(value(i))
        del w[:-5]
        sums[k] = sums.get(k, 0) + value(i)
        want[i] = (len(w), float(sum(w)), sums[k])
    return want, sums


class Broker:
    def __init__(self, workdir, brokers=1, topics=("in:4",)):
        assert MOCK, "KAYAK_MOCKBROKER must name build/tests/mockbroker (ctest sets it)"
        self.file = os.path.join(workdir, "bootstrap")
        args = [MOCK, "serve", "-b", str(brokers), "-f", self.file]
        for t in topics:
            args += ["-t", t]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        wait_for(lambda: os.path.exists(self.file), what="the broker's bootstrap file")
        with open(self.file) as f:
            self.bootstrap = f.read().strip()

    def produce(self, topic, n):
        subprocess.run([MOCK, "produce", self.bootstrap, topic, str(n)], check=True, timeout=60)

    def committed(self, topic, group):
        out = subprocess.run([MOCK, "committed", self.bootstrap, topic, group], check=True,
                             capture_output=True, text=True, timeout=60).stdout
        return {int(p): int(o) for p, o in (l.split() for l in out.splitlines())}

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        if line.startswith(("down ", "up ")):
            # The broker answers once the change took effect; without waiting,
            # what the test does next could still meet the broker as it was.
            ready, _, _ = select.select([self.proc.stdout], [], [], 30)
            assert ready, f"the mock broker did not answer '{line}'"
            answer = self.proc.stdout.readline().strip()
            assert answer == "ok " + line, f"the mock broker answered {answer!r} to {line!r}"

    def close(self):
        try:
            self.command("quit")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


def checkpointed_offsets(state, pipeline):
    """The input offsets of the newest committed manifest, read from the state dir
    (docs/state_format.md: a 32-byte frame header, then JSON)."""
    manifests = sorted(glob.glob(os.path.join(state, "MANIFEST-*.kym")),
                       key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    if not manifests:
        return None
    with open(manifests[-1], "rb") as f:
        m = json.loads(f.read()[32:])
    unit = m["units"].get(f"p.{pipeline}.input")
    if unit is None:
        return None
    with open(os.path.join(state, unit["chunk"]), "rb") as f:
        return {p: o for _, p, o in json.loads(f.read()[32:])["offsets"]}


class KafkaBase(KayakTest):
    server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"

    def broker(self, **kw):
        b = Broker(self.dir, **kw)
        self.addCleanup(b.close)
        return b

    def config(self, b, group, slow=0, extra_out=""):
        lua = (f"      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end'}}\n"
               if slow else "")
        return f"""
buckets:
  sums: {{}}
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: [in], group: {group}, batch_size: 50,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}
    transforms:
{lua}      - rolling_window: {{key: k, field: v, window_messages: 5, aggregates: [count, sum]}}
      - bucket: {{name: sums, key: k, op: add, field: v, as: total}}
    outputs: [{{file: {{path: {self.path('out')}}}}}{extra_out}]
"""

    def rows(self):
        return [json.loads(l) for l in self.read_output("out")]

    def kill_while_consuming(self, cfg, b, group, state, n, kills, rng, most_secs, seed):
        """Starts pipeline `k` and kills it with SIGKILL `kills` times at random
        instants while it consumes; after each kill the group's committed offsets
        are never ahead of the last durable checkpoint."""
        for _ in range(kills):
            s = self.start(cfg, server_config=self.server, state_dir=state)
            # Killed while consuming. (Not while joining the group: the mock
            # broker then stalls later joins of the group for minutes, a limit
            # of the mock, not of kayak. A run that got through the whole topic
            # before its kill leaves nothing for the next one to consume.)
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


class KafkaTest(KafkaBase):

    def test_kill_9_while_consuming_matches_the_batch_oracle(self):
        seed = int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        print(f"\nseed {seed} (KAYAK_SEED={seed} replays it)", file=sys.stderr)
        n = 3000
        b = self.broker()
        b.produce("in", n)
        group = "g-" + uuid.uuid4().hex[:8]
        state = self.path("state")
        cfg = self.config(b, group, slow=150000)
        self.kill_while_consuming(cfg, b, group, state, n, 3, rng, 2.0, seed)
        s = self.start(cfg, server_config=self.server, state_dir=state)
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what=f"seed {seed}: every message in the output")
        want, sums = oracle(n)
        rows = self.rows()
        self.assertEqual(sorted(r["seq"] for r in rows), list(range(n)), f"seed {seed}")
        for r in rows:
            self.assertEqual((r["v_count"], r["v_sum"], r["total"]), want[r["seq"]],
                             f"seed {seed}: seq {r['seq']}")
        for k, v in sums.items():
            self.assertEqual(s.get_json(f"/api/v1/buckets/sums?key={k}")["value"], v)
        wait_for(lambda: sum(b.committed("in", group).values()) == n, timeout=30,
                 what="the group to commit the final offsets")

    def test_broker_down_shows_on_the_card_and_nothing_is_lost(self):
        b = self.broker()
        b.produce("in", 500)
        group = "g-" + uuid.uuid4().hex[:8]
        s = self.start(self.config(b, group) , server_config=self.server,
                       state_dir=self.path("state"))
        wait_for(lambda: len(self.read_output("out")) >= 500, timeout=60, what="the first 500")
        b.command("down 1")
        wait_for(lambda: s.card("k", "input")["errors"] > 0, timeout=60,
                 what="the broker outage on the card")
        self.assertIn("kafka", s.card("k", "input")["last_error"])
        # retrying, not running, while no broker answers (and /ready says so)
        wait_for(lambda: s.card("k", "input")["state"] == "retrying", timeout=60,
                 what="the input to show that it retries")
        self.assertEqual(s.get("/ready")[0], 503)
        b.command("up 1")
        b.produce("in", 500)
        wait_for(lambda: len(self.read_output("out")) >= 1000, timeout=120,
                 what="the messages produced after the broker came back")
        self.assertEqual(sorted(r["seq"] for r in self.rows()), sorted(list(range(500)) * 2))
        wait_for(lambda: s.card("k", "input")["state"] == "running", what="running again")

    def test_start_latest_loses_nothing_to_a_kill_before_the_first_checkpoint(self):
        # The position where `latest` put each partition is pinned at
        # assignment: a kill -9 before any checkpoint covers the partition
        # restarts there, not at a later end.
        b = self.broker(topics=("in:2",))
        b.produce("in", 100)  # before the start: not read
        group = "g-" + uuid.uuid4().hex[:8]
        cfg = f"""
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: [in], group: {group}, start: latest,
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
        group = "g-" + uuid.uuid4().hex[:8]
        out = f""", {{kafka: {{brokers: "{b.bootstrap}", topic: out, key: k, compression: zstd}}}}"""
        s = self.start(self.config(b, group, extra_out=out))
        wait_for(lambda: s.card("k", "outputs[1]")["messages_out"] >= 400, timeout=60,
                 what="400 messages produced to `out`")
        # read them back through a second kayak pipeline: a kafka input on `out`
        cfg = f"""
pipelines:
  back:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: [out], group: r-{group}, meta_field: _kafka}}}}
    outputs: [{{file: {{path: {self.path('back')}}}}}]
"""
        self.start(cfg)
        wait_for(lambda: len(self.read_output("back")) >= 400, timeout=60, what="the read-back")
        rows = [json.loads(l) for l in self.read_output("back")]
        self.assertEqual(sorted(r["seq"] for r in rows), list(range(400)))
        self.assertEqual(rows[0]["_kafka"]["topic"], "out")
        self.assertEqual(rows[0]["_kafka"]["key"], rows[0]["k"])

    def test_kafka_output_produces_again_what_a_broker_outage_failed(self):
        # Two brokers: `out` partition 1 is led by broker 2, which is down
        # while the output produces; messages for it time out (1.5 s), are
        # kept, produced again, and delivered once the broker is back.
        b = self.broker(brokers=2, topics=("in:1", "out:2"))
        group = "g-" + uuid.uuid4().hex[:8]
        cfg = f"""
pipelines:
  k:
    input: {{http: {{path: /in}}}}
    outputs: [{{kafka: {{brokers: "{b.bootstrap}", topic: out, key: k,
                         properties: {{message.timeout.ms: "1500"}}}}}}]
"""
        s = self.start(cfg, server_config=self.server, state_dir=self.path("state"))
        wait_for(lambda: s.card("k", "input")["state"] == "running", what="the http input")
        b.command("down 2")
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
        b.command("up 2")
        cfg = f"""
pipelines:
  back:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: [out], group: r-{group}}}}}
    outputs: [{{file: {{path: {self.path('back')}}}}}]
"""
        self.start(cfg)
        seqs = lambda: {json.loads(l)["seq"] for l in self.read_output("back")}
        wait_for(lambda: len(seqs()) >= 300, timeout=120, what="every message read back")
        self.assertEqual(seqs(), set(range(300)))

    def test_a_message_whose_key_fails_is_dropped_once_and_the_rest_produced_once(self):
        # `key: 'k + 1'` fails on the one message whose k is a string (a
        # type error): it is dropped and counted, the other 49 of its batch
        # are produced once, and the output goes on (no retry of the batch).
        b = self.broker(topics=("in:1", "out:1", "out2:1", "kayak-k-0.markers:1"))
        group = "g-" + uuid.uuid4().hex[:8]
        for exactly_once in (False, True):
            with self.subTest(exactly_once=exactly_once):
                topic = "out" if not exactly_once else "out2"
                cfg = f"""
pipelines:
  k:
    input: {{http: {{path: /in}}}}
    outputs: [{{kafka: {{brokers: "{b.bootstrap}", topic: {topic}, key: 'k + 1',
                         exactly_once: {str(exactly_once).lower()}}}}}]
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
                back = self.path(f"back-{exactly_once}")
                self.start(f"""
pipelines:
  back:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: [{topic}], group: r-{group}-{topic}}}}}
    outputs: [{{file: {{path: {back}}}}}]
""")
                seqs = lambda: [json.loads(l)["seq"] for l in self.read_output(back)]
                wait_for(lambda: len(seqs()) >= 50, timeout=90, what="the read-back")
                self.assertEqual(sorted(seqs()), [i for i in range(51) if i != 17])

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
        b = self.broker()
        b.produce("in", 140)
        group = "g-" + uuid.uuid4().hex[:8]
        cfg = f"""
pipelines:
  route:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: [in], group: {group}}}}}
    outputs: [{{kafka: {{brokers: "{b.bootstrap}", topic_expr: k}}}}]
  back:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: [k3], group: r-{group}}}}}
    outputs: [{{file: {{path: {self.path('k3')}}}}}]
"""
        self.start(cfg)
        wait_for(lambda: len(self.read_output("k3")) >= 20, timeout=90, what="topic k3's messages")
        rows = [json.loads(l) for l in self.read_output("k3")]
        self.assertEqual(sorted(r["seq"] for r in rows), [i for i in range(140) if i % 7 == 3])


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

    The mock broker delivers aborted transactions to read_committed consumers
    (tests/kafka/mockbroker.c), so these tests cannot see an abort hide
    anything; they show the protocol around it: one committed marker per
    checkpoint, the fall-back to the checkpoint before when a durable
    checkpoint's commit did not happen, and the inputs hearing of a checkpoint
    only after the commit (docs/durability.md)."""

    def eos_config(self, b, group, slow=0):
        out = f""", {{kafka: {{brokers: "{b.bootstrap}", topic: out, key: k, exactly_once: true}}}}"""
        return self.config(b, group, slow=slow, extra_out=out)

    def read_topic(self, b, topic, name):
        cfg = f"""
pipelines:
  back:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{topic}"], group: r-{uuid.uuid4().hex[:8]},
                      properties: {{isolation.level: read_committed}}}}}}
    outputs: [{{file: {{path: {self.path(name)}}}}}]
"""
        s = self.start(cfg)
        return s, lambda: [json.loads(l) for l in self.read_output(name)]

    def assert_matches_oracle(self, rows, n, what):
        want, _ = oracle(n)
        self.assertEqual(sorted({r["seq"] for r in rows}), list(range(n)), what)
        for r in rows:
            self.assertEqual((r["v_count"], r["v_sum"], r["total"]), want[r["seq"]],
                             f"{what}: seq {r['seq']}")

    def test_a_durable_checkpoint_whose_commit_did_not_happen_is_replayed(self):
        n = 1500
        b = self.broker(topics=("in:4", "out:2", "kayak-k-1.markers:1"))
        b.produce("in", n)
        group = "g-" + uuid.uuid4().hex[:8]
        state = self.path("state")
        cfg = self.eos_config(b, group, slow=100000)
        # Dies after the second checkpoint with data is durable, before its
        # transaction's marker and commit.
        s = self.start(cfg, server_config=self.server, state_dir=state,
                       env={"KAYAK_CRASH_POINT": "kafka_before_marker:2"})
        wait_for(lambda: s.proc.poll() is not None, timeout=120, what="the crash point")
        self.assertIn("crash point kafka_before_marker reached", s.stderr())
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
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what="every message in the file output")
        # The file output went back to checkpoint N-1 with the rest of the
        # region: every message in it once, with state matching the oracle.
        rows = self.rows()
        self.assertEqual(sorted(r["seq"] for r in rows), list(range(n)))
        self.assert_matches_oracle(rows, n, "file output")
        _, sums = oracle(n)
        for k, v in sums.items():
            self.assertEqual(s.get_json(f"/api/v1/buckets/sums?key={k}")["value"], v)
        # Everything reached the topic, consistent with the oracle.
        _, back = self.read_topic(b, "out", "back")
        wait_for(lambda: len({r["seq"] for r in back()}) >= n, timeout=120,
                 what="every message read back from `out`")
        self.assert_matches_oracle(back(), n, "topic out")
        # The group's offsets reach the end once the last commit happened.
        wait_for(lambda: sum(b.committed("in", group).values()) == n, timeout=60,
                 what="the group to commit the final offsets")

    def test_kill_9_repeatedly_with_one_marker_per_committed_checkpoint(self):
        seed = int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        print(f"\nseed {seed} (KAYAK_SEED={seed} replays it)", file=sys.stderr)
        n = 3000
        b = self.broker(topics=("in:4", "out:2", "kayak-k-1.markers:1"))
        b.produce("in", n)
        group = "g-" + uuid.uuid4().hex[:8]
        state = self.path("state")
        cfg = self.eos_config(b, group, slow=150000)
        self.kill_while_consuming(cfg, b, group, state, n, 2, rng, 1.5, seed)
        s = self.start(cfg, server_config=self.server, state_dir=state)
        wait_for(lambda: len(self.read_output("out")) >= n, timeout=180,
                 what=f"seed {seed}: every message in the file output")
        s.stop()  # a savepoint: its transaction commits before the server exits
        self.assert_matches_oracle(self.rows(), n, f"seed {seed}: file output")
        _, back = self.read_topic(b, "out", "back")
        wait_for(lambda: len({r["seq"] for r in back()}) >= n, timeout=120,
                 what=f"seed {seed}: every message read back from `out`")
        self.assert_matches_oracle(back(), n, f"seed {seed}: topic out")
        _, markers = self.read_topic(b, "kayak-k-1.markers", "markers")
        wait_for(lambda: len(markers()) >= 2, timeout=60, what="the commit markers")
        ms = markers()
        self.assertTrue(all(m["transactional_id"] == "kayak-k-1" for m in ms), ms[:3])
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
        b = self.broker(topics=("out:2", "kayak-p-0.markers:1"))
        out = f"{{kafka: {{brokers: \"{b.bootstrap}\", topic: out, key: k, exactly_once: true}}}}"
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
        _, back = self.read_topic(b, "out", "back")
        wait_for(lambda: len(back()) >= 200, timeout=120, what="200 messages read back")
        rows = back()
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
