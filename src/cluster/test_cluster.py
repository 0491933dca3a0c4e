"""Several kayak servers as one cluster over a real Kafka topic (the suite's
broker): members killed with SIGKILL, joining and leaving while a producer
goes on, and every key's total, read from whichever member holds it, equal to
the batch oracle (docs/cluster.md)."""
import glob
import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid

from harness import KayakTest, Server, post_until_taken, wait_for
from harness import run as run_kayak
from kafka_broker import Broker, value
from servers import s3_env, s3_objects_signed

KEYS = 60
PARTITIONS = 6


def oracle(n):
    """Each key's total of v over messages 0..n-1 (kafkatool produce with KEYS
    keys: key k<i % KEYS>)."""
    sums = {}
    for i in range(n):
        k = f"k{i % KEYS}"
        sums[k] = sums.get(k, 0) + value(i)
    return sums


def window_oracle(n):
    """{seq: (count, sum)} of a 5-message window per key, in production order
    (a key stays on one partition)."""
    windows, want = {}, {}
    for i in range(n):
        w = windows.setdefault(i % KEYS, [])
        w.append(value(i))
        del w[:-5]
        want[i] = (len(w), float(sum(w)))
    return want


def device_sums(n, devices):
    """{device: total} of messages 0..n-1 spread over `devices` devices."""
    sums = {}
    for i in range(n):
        sums[str(i % devices)] = sums.get(str(i % devices), 0) + value(i)
    return sums


def post_devices(s, first, count, devices):
    """Messages first..first+count-1 in one post to /ingest, until 202."""
    body = "".join(json.dumps({"seq": i, "dev": i % devices, "v": value(i)}) + "\n"
                   for i in range(first, first + count)).encode()
    post_until_taken(s, "/ingest", body)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def get_once(url):
    """(status, headers, body) of a GET, redirects not followed."""
    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


class ClusterTest(KayakTest):

    def member(self, name, b, group, store, slow=60000, output=None, env=None, graph=None):
        """A member `name`: its own directory, state dir and output (a file
        unless `output` gives one). A store s3://kayak/<prefix> is in the
        suite's S3 server, its secret key given as ${ENV}. `graph`, given the
        member's directory, makes its pipelines file (by default: a window and
        bucket `sums` over the topic `in`, read by `group`)."""
        d = self.path(name)
        os.makedirs(d, exist_ok=True)
        output = output or f"{{file: {{path: {os.path.join(d, 'out')}}}}}"
        graph = graph(d) if graph else f"""
buckets:
  sums: {{}}
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group},
                      batch_size: 100,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end'}}
      - rolling_window: {{key: k, field: v, window_messages: 5, aggregates: [count, sum]}}
      - bucket: {{name: sums, key: k, op: add, field: v, as: total}}
    outputs: [{output}]
"""
        s3, env = "", dict(env or {})
        if store.startswith("s3://"):
            e = s3_env()
            s3 = (f", s3: {{endpoint: '{e['S3_ENDPOINT']}', path_style: true, "
                  f"access_key_id: {e['S3_ACCESS_KEY_ID']}, "
                  "secret_access_key: '${CLUSTER_S3_SECRET}'}")
            env["CLUSTER_S3_SECRET"] = e["S3_SECRET_ACCESS_KEY"]
        server = (f"listen: 127.0.0.1:0\ncheckpoint: {{interval_secs: 1}}\n"
                  f"cluster: {{name: c1, member: {name}, store: '{store}', partitioner: crc32"
                  f"{s3}}}\n")
        s = Server(d, graph, server_config=server, state_dir=os.path.join(d, "state"),
                   env=env or None)
        self.servers.append(s)
        return s

    def two_members(self, store, n):
        """A topic of PARTITIONS partitions holding n messages, and members a
        and b on it, settled: (broker, group, members)."""
        b = Broker((f"in:{PARTITIONS}",))
        group = "g-" + uuid.uuid4().hex[:8]
        b.produce("in", n, 0, KEYS)
        members = {name: self.member(name, b, group, store) for name in ("a", "b")}
        self.assert_settles(members, n, "two members: the first messages")
        return b, group, members

    def wait_owns_shards(self, s, name):
        """Until member `name`'s file, as `s` reads it, names shards it owns.
        (Not "until it reads": a partition handed over at its end has
        nothing left for its next owner to read.)"""
        def owns():
            ov = s.get_json("/api/v1/overview")["cluster"]
            return any(m["member"] == name and m["live"] and m["shards"] for m in ov["members"])
        wait_for(owns, timeout=120, interval=0.5, what=f"{name} to be given partitions")

    def kill(self, members, name):
        """Member `name` killed with SIGKILL, and gone from `members`."""
        s = members.pop(name)
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)

    def buckets(self, members, bucket="sums"):
        """{member: {key: total}} of `bucket` on each member."""
        out = {}
        for name, s in members.items():
            got, after = {}, None
            while True:
                q = f"/api/v1/buckets/{bucket}?limit=1000" + (f"&after={after}" if after else "")
                page = s.get_json(q)
                for e in page["entries"]:
                    got[e["key"]] = e["value"]
                after = page.get("next_after")
                if not after:
                    break
            out[name] = got
        return out

    def settled(self, members, n, bucket="sums", want=None):
        """True once the members' buckets hold every key once, each with the
        oracle's total for n messages (or `want`): a key counted twice, on
        two members or in one, never settles."""
        want = want or oracle(n)
        seen = {}
        for name, got in self.buckets(members, bucket).items():
            for k, v in got.items():
                if k in seen:
                    return False
                seen[k] = v
        self.last_seen = seen
        return seen == want

    def assert_settles(self, members, n, what, timeout=180, bucket="sums", want=None):
        try:
            wait_for(lambda: self.settled(members, n, bucket, want), timeout=timeout,
                     interval=0.5, what=what)
        except AssertionError:
            want = want or oracle(n)
            bad = {k: (v, want.get(k)) for k, v in getattr(self, "last_seen", {}).items()
                   if want.get(k) != v}
            raise AssertionError(f"{what}: keys off the oracle (got, want): "
                                 f"{dict(list(bad.items())[:10])}; "
                                 f"{len(want) - len(getattr(self, 'last_seen', {}))} missing")

    def assert_any_member_answers(self, members, n):
        """Every member answers for every key: the owner from its bucket, the
        others with a 307 to the owner; the overview lists each live member
        and the shards it owns, every partition once, each at its end."""
        want = oracle(n)
        holder = {k: name for name, got in self.buckets(members).items() for k in got}
        keys = [f"k{i}" for i in range(0, KEYS, 7)]

        def answers():
            for name, s in members.items():
                for k in keys:
                    status, headers, body = get_once(s.url + f"/api/v1/buckets/sums?key={k}")
                    if holder[k] == name:
                        self.assertEqual((status, json.loads(body)["value"]), (200, want[k]))
                    elif status != 307:
                        return False  # the member files are written every 2 s
                    else:
                        self.assertEqual(headers["Location"],
                                         members[holder[k]].url + f"/api/v1/buckets/sums?key={k}")
            return True
        wait_for(answers, timeout=30, interval=0.5, what="a 307 to each key's owner")
        # Followed, the redirect gives the owner's value.
        for s in members.values():
            self.assertEqual(s.get_json("/api/v1/buckets/sums?key=k1")["value"], want["k1"])

        def overview():
            ov = next(iter(members.values())).get_json("/api/v1/overview")["cluster"]
            live = {m["member"]: m for m in ov["members"] if m["live"]}
            shards = [sh for m in live.values() for sh in m["shards"]]
            parts = sorted(sh["partition"] for sh in shards)
            # Every message is in: each shard's input is at its partition's end.
            caught_up = all(sh["lag"] == 0 and sh["next"] is not None for sh in shards)
            return set(live) == set(members) and parts == list(range(PARTITIONS)) and caught_up
        wait_for(overview, timeout=30, interval=0.5,
                 what="the overview to list the cluster, each shard caught up")

    def shard_logs(self, store):
        """Every readable shard log entry: (shard dir, seq, manifest)."""
        if store.startswith("s3://"):
            prefix = store[len("s3://kayak/"):] + "/c1/"
            files = [(k, body) for k, body in s3_objects_signed(prefix).items()
                     if os.path.basename(k).startswith("LOG-")]
        else:
            files = []
            for path in glob.glob(os.path.join(store, "c1", "*", "*", "LOG-*.kys")):
                with open(path, "rb") as f:
                    files.append((path, f.read()))
        out = []
        for path, body in sorted(files):
            m = json.loads(body[32:])
            seq = int(os.path.basename(path)[4:-4])
            out.append((os.path.dirname(path), seq, m))
        return out

    def assert_one_owner_an_epoch(self, store, partitions=PARTITIONS):
        """No epoch of a shard had two owners, and each shard's log moves to
        higher epochs only; `partitions` shards in all."""
        owners = {}
        last = {}
        for shard, seq, m in self.shard_logs(store):
            self.assertEqual(owners.setdefault((shard, m["epoch"]), m["owner"]), m["owner"],
                             f"{shard}: epoch {m['epoch']} has two owners")
            self.assertGreaterEqual(m["epoch"], last.get(shard, 0), f"{shard} seq {seq}")
            last[shard] = m["epoch"]
        self.assertEqual(len(last), partitions, "a shard log per partition")

    def test_members_killed_joining_and_leaving_count_every_message_once(self):
        b = Broker((f"in:{PARTITIONS}",))
        group = "g-" + uuid.uuid4().hex[:8]
        store = self.path("store")
        n = 6000
        b.produce("in", n, 0, KEYS)
        a = self.member("a", b, group, store)
        bm = self.member("b", b, group, store)
        c = self.member("c", b, group, store)
        members = {"a": a, "b": bm, "c": c}
        self.assert_settles(members, n, "three members: the first messages")

        # b is killed while it works: its partitions go to a and c once its
        # session ends, each restored from b's last published checkpoint of it.
        b.produce("in", 6000, n, KEYS)
        n += 6000
        wait_for(lambda: bm.card("k", "input")["messages_in"] > 0, what="b to read")
        time.sleep(0.5)
        self.kill(members, "b")
        self.assert_settles(members, n, "after b was killed")

        # b comes back on its state directory: it joins again, and what its
        # local checkpoint held of partitions it is not given goes.
        bm = self.member("b", b, group, store)
        members["b"] = bm
        b.produce("in", 3000, n, KEYS)
        n += 3000
        self.assert_settles(members, n, "after b came back")

        # d joins: some partitions move to it, with their state.
        d = self.member("d", b, group, store)
        members["d"] = d
        b.produce("in", 2000, n, KEYS)
        n += 2000
        self.wait_owns_shards(d, "d")
        b.produce("in", 2000, n, KEYS)
        n += 2000
        wait_for(lambda: d.card("k", "input")["messages_in"] > 0, timeout=60,
                 what="d to read")
        self.assert_settles(members, n, "after d joined")
        self.assert_any_member_answers(members, n)

        # a leaves with a graceful stop (its savepoint is published).
        self.assertEqual(a.stop(), 0, a.stderr()[-2000:])
        del members["a"]
        b.produce("in", 4000, n, KEYS)
        n += 4000
        self.assert_settles(members, n, "after a left")

        self.assert_one_owner_an_epoch(store)
        # Every message reached an output at least once (the file outputs
        # are not transactional: a replay after a move writes some again),
        # each time with the window the oracle gives it: a window moved with
        # its partition goes on where its checkpoint stopped.
        windows = window_oracle(n)
        seqs = set()
        for name in ("a", "b", "c", "d"):
            for line in self.read_output(os.path.join(name, "out")):
                r = json.loads(line)
                seqs.add(r["seq"])
                self.assertEqual((r["v_count"], r["v_sum"]), windows[r["seq"]],
                                 f"member {name}, seq {r['seq']}")
        self.assertEqual(seqs, set(range(n)))

    def test_a_join_hands_partitions_over_without_a_replay(self):
        """Members joining while the others work: each revoked partition is
        held until a checkpoint covering what was read is published, and its
        next owner goes on from there, so no message is put out twice."""
        store = self.path("store")
        n = 3000
        b, group, members = self.two_members(store, n)
        a, bm = members["a"], members["b"]
        b.produce("in", 9000, n, KEYS)
        n += 9000
        wait_for(lambda: a.card("k", "input")["messages_in"] > 3000 or
                 bm.card("k", "input")["messages_in"] > 3000, what="a and b to be at work")
        c = self.member("c", b, group, store)
        members["c"] = c
        self.wait_owns_shards(c, "c")
        self.assert_settles(members, n, "after c joined")
        handed = [name for name, s in members.items()
                  if "partitions handed over" in s.stderr()]
        self.assertTrue(set(handed) & {"a", "b"}, "a or b handed its partitions over")
        windows = window_oracle(n)

        def counted():
            count = {}
            for name in ("a", "b", "c"):
                for line in self.read_output(os.path.join(name, "out")):
                    r = json.loads(line)
                    count[r["seq"]] = count.get(r["seq"], 0) + 1
                    self.assertEqual((r["v_count"], r["v_sum"]), windows[r["seq"]],
                                     f"member {name}, seq {r['seq']}")
            return count if len(count) >= n else None
        count = wait_for(counted, timeout=30, interval=0.5, what="every message in an output")
        twice = sorted(q for q, k in count.items() if k > 1)
        self.assertEqual(twice, [], f"{len(twice)} messages put out more than once")
        self.assertEqual(set(count), set(range(n)))

    def eos_broker(self, txn_timeout_ms=10000):
        """A broker with topics in, out and markers, and an exactly_once
        kafka output into out (YAML)."""
        b = Broker((f"in:{PARTITIONS}", "out:3", "markers:1"))
        out = (f'{{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t("out")}", '
               f'exactly_once: true, transactional_id: {b.t("txn")}, '
               f'marker_topic: "{b.t("markers")}", '
               f'properties: {{transaction.timeout.ms: "{txn_timeout_ms}"}}}}}}')
        return b, out

    def produce_until(self, b, n, s, line):
        """Produces 500 more messages a second, from seq n on, until `line`
        is in member s's log (a crash or stop point it reaches while it
        works; the broker's first transactions can be slow to start), at
        most 180 batches. The number of messages then produced in all."""
        def reached():
            nonlocal n
            if line in s.stderr():
                return True
            b.produce("in", 500, n, KEYS)
            n += 500
            return False
        try:
            wait_for(reached, timeout=180, interval=1, what=line)
        except AssertionError as e:
            raise AssertionError(f"{e}: {s.stderr()[-3000:]}") from None
        return n

    def assert_read_once(self, b, n):
        """A read_committed reader of out reads every message 0..n-1 once,
        each with the oracle's window (an open transaction of a member
        killed ends within its timeout, 10 s)."""
        windows = window_oracle(n)

        def read():
            rows = b.read("out", seconds=30)
            return rows if len(rows) >= n else None
        rows = wait_for(read, timeout=120, interval=2, what="every message in topic out")
        count = {}
        for r in rows:
            count[r["seq"]] = count.get(r["seq"], 0) + 1
            self.assertEqual((r["v_count"], r["v_sum"]), windows[r["seq"]], f"seq {r['seq']}")
        twice = sorted(q for q, k in count.items() if k > 1)
        self.assertEqual(twice, [], f"{len(twice)} messages read twice")
        self.assertEqual(set(count), set(range(n)))

    def test_exactly_once_output_across_kills(self):
        """An exactly_once kafka output in a cluster. b is killed with
        SIGKILL after it published a checkpoint's shards and before its
        transaction committed, and comes back inside its session; then a is
        killed right after a commit and stays away. Each shard goes on from the
        newest checkpoint whose transaction committed, so a read_committed
        reader of the output sees every message once, with the oracle's
        window."""
        store = self.path("store")
        b, out = self.eos_broker()
        group = "g-" + uuid.uuid4().hex[:8]
        n = 3000
        b.produce("in", n, 0, KEYS)
        a = self.member("a", b, group, store, output=out)
        bm = self.member("b", b, group, store, output=out,
                         env={"KAYAK_CRASH_POINT": "kafka_before_commit:2"})
        members = {"a": a, "b": bm}

        n = self.produce_until(b, n, bm, "crash point kafka_before_commit reached")
        bm.proc.wait(timeout=30)
        del members["b"]
        # Back inside its session (6 s): its newest entries name a commit
        # that did not take place, so it claims those shards again.
        bm = self.member("b", b, group, store, output=out)
        members["b"] = bm
        self.assert_settles(members, n, "after b came back")
        self.assertIn("did not take place", bm.stderr())

        # a is killed, comes back inside its session, and is killed again
        # right after a transaction committed, before it heard so; it stays
        # away, and b claims its shards once its session ends.
        self.kill(members, "a")
        a = self.member("a", b, group, store, output=out,
                        env={"KAYAK_CRASH_POINT": "kafka_after_commit:2"})

        n = self.produce_until(b, n, a, "crash point kafka_after_commit reached")
        a.proc.wait(timeout=30)
        self.assert_settles(members, n, "after a was killed")
        self.assert_one_owner_an_epoch(store)
        # A graceful stop commits its savepoint's transaction.
        b.produce("in", 1000, n, KEYS)
        n += 1000
        self.assert_settles(members, n, "the last messages")
        self.assertEqual(bm.stop(), 0, bm.stderr()[-2000:])
        self.assert_read_once(b, n)

    def test_a_claim_sees_a_commit_behind_another_open_transaction(self):
        """Another producer opens a transaction on the marker topic and holds
        it, so the topic's last stable offset stays below every marker after
        it. b commits its last messages and is killed; it stays away. a,
        claiming b's shards, cannot see b's marker yet: it fences b's
        transactional id and waits for the marker topic's end, and once that
        transaction ends it finds the commit and restores b's newest entry.
        Nothing is replayed: a read_committed reader of out reads every
        message once."""
        store = self.path("store")
        b, out = self.eos_broker()
        group = "g-" + uuid.uuid4().hex[:8]
        n = 3000
        b.produce("in", n, 0, KEYS)
        members = {m: self.member(m, b, group, store, output=out) for m in ("a", "b")}
        self.assert_settles(members, n, "two members")
        holder = b.hold("markers", b.t("other-txn"))
        self.addCleanup(holder.kill)
        self.addCleanup(holder.stdout.close)
        b.produce("in", 2000, n, KEYS)
        n += 2000
        self.assert_settles(members, n, "two members, the marker topic held")
        # Committed: the group's offsets follow the transactions' commits.
        wait_for(lambda: sum(b.committed("in", group).values()) == n, timeout=60,
                 what="the last checkpoint committed")
        a = members["a"]
        self.kill(members, "b")
        wait_for(lambda: "fenced transactional id" in a.stderr() and
                 "where a transaction still open holds its end" in a.stderr(), timeout=120,
                 what="a to fence b and wait for the marker topic's end")
        holder.stdin.close()
        self.assertEqual(holder.wait(timeout=60), 0)
        self.assert_settles(members, n, "a alone, with b's shards")
        self.assertNotIn("did not take place", a.stderr())
        self.assert_read_once(b, n)

    def test_a_member_paused_past_its_session_cannot_commit(self):
        """An exactly_once kafka output in a cluster: b stops (SIGSTOP) after
        it published a checkpoint's shards and before it produced the
        commit's marker, and stays stopped past its session. a claims b's
        shards, does not see that commit, and fences b's transactional id
        before it restores the entry before. b, resumed well inside its
        transaction's timeout (60 s), cannot commit; its region restarts by
        itself and goes on. Every message is read once."""
        store = self.path("store")
        b, out = self.eos_broker(txn_timeout_ms=60000)
        group = "g-" + uuid.uuid4().hex[:8]
        n = 3000
        b.produce("in", n, 0, KEYS)
        a = self.member("a", b, group, store, output=out)
        bm = self.member("b", b, group, store, output=out,
                         env={"KAYAK_STOP_POINT": "kafka_before_marker:2"})

        n = self.produce_until(b, n, bm, "stop point kafka_before_marker reached")
        # a takes every shard once b's session ends (6 s).
        self.assert_settles({"a": a}, n, "a alone, b paused")
        self.assertIn("fenced transactional id", a.stderr())
        bm.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: "transaction aborted" in bm.stderr(), timeout=60,
                 what="b's commit refused")
        # b's region commits nothing more until it restarts, which it does by
        # itself (its savepoint cannot commit and is given up after 30 s).
        wait_for(lambda: "cluster: region k restarted" in bm.stderr(), timeout=90,
                 what="b's region restarted by itself")
        b.produce("in", 2000, n, KEYS)
        n += 2000
        self.assert_settles({"a": a, "b": bm}, n, "after b restarted")
        self.assert_read_once(b, n)

    def test_a_store_in_s3(self):
        """The shards and the member files in an S3 bucket: a member killed
        with SIGKILL has its shards restored from the bucket by the other,
        and comes back."""
        store = f"s3://kayak/cluster-{uuid.uuid4().hex[:8]}"
        n = 4000
        b, group, members = self.two_members(store, n)
        bm = members["b"]
        b.produce("in", 4000, n, KEYS)
        n += 4000
        wait_for(lambda: bm.card("k", "input")["messages_in"] > 0, what="b to read")
        self.kill(members, "b")
        self.assert_settles(members, n, "after b was killed: its shards restored from S3")
        bm = self.member("b", b, group, store)
        members["b"] = bm
        b.produce("in", 2000, n, KEYS)
        n += 2000
        self.assert_settles(members, n, "after b came back")
        self.assert_any_member_answers(members, n)
        self.assert_one_owner_an_epoch(store)
        members_files = s3_objects_signed(store[len("s3://kayak/"):] + "/c1/members/")
        self.assertEqual(sorted(os.path.basename(k) for k in members_files), ["a.json", "b.json"])

    def test_state_keyed_by_another_field_after_a_repartition_step(self):
        """A bucket keyed by a field the input topic is not partitioned by
        (dev = seq % 7, where the producer keys by k = seq % 60), after a
        `repartition` step: each member writes the topic between the parts
        keyed by dev, in transactions, and reads back the partitions of it
        the group gives it. b is killed with SIGKILL while it works and stays
        away, then comes back: every device's total is the oracle's, on one
        member only."""
        devices = 7
        b = Broker((f"in:{PARTITIONS}", "by-dev:4", "markers:1"))
        group = "g-" + uuid.uuid4().hex[:8]
        store = self.path("store")

        def want(n):
            sums = {}
            for i in range(n):
                sums[str(i % devices)] = sums.get(str(i % devices), 0) + value(i)
            return sums

        def graph(d):
            return f"""
buckets:
  per_dev: {{}}
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group},
                      batch_size: 100,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,60000 do end return m end'}}
      - map: {{dev: 'seq % {devices}'}}
      - repartition: {{key: dev, topic: "{b.t('by-dev')}", marker_topic: "{b.t('markers')}",
                       properties: {{transaction.timeout.ms: "10000"}}}}
      - bucket: {{name: per_dev, key: dev, op: add, field: v}}
    outputs: [{{file: {{path: {os.path.join(d, 'out')}}}}}]
"""

        def member(name):
            return self.member(name, b, group, store, graph=graph)

        n = 3000
        b.produce("in", n, 0, KEYS)
        members = {name: member(name) for name in ("a", "b")}
        self.assert_settles(members, n, "two members", bucket="per_dev", want=want(n))
        bm = members["b"]
        read = bm.card("k", "input")["messages_in"]
        b.produce("in", 3000, n, KEYS)
        n += 3000
        # Both read a part of the topic between the parts.
        for s in members.values():
            wait_for(lambda: s.card("k-part2", "input")["messages_in"] > 0, timeout=60,
                     what="each member to read the repartitioned topic")
        # (The broker's first transactions can be slow to start: the step's
        # writer holds the part before it until they do.)
        wait_for(lambda: bm.card("k", "input")["messages_in"] > read + 300, timeout=90,
                 what="b at work")
        self.assertLess(bm.card("k", "input")["messages_in"], read + 2000, "b done already")
        self.kill(members, "b")
        self.assert_settles(members, n, "after b was killed", bucket="per_dev", want=want(n))
        members["b"] = member("b")
        b.produce("in", 2000, n, KEYS)
        n += 2000
        self.assert_settles(members, n, "after b came back", bucket="per_dev", want=want(n))
        # The part after the step restarts through the API under its own id
        # (as a fenced region restarts by itself), and counts nothing twice.
        a = members["a"]
        req = urllib.request.Request(a.url + "/api/v1/pipelines/k-part2/restart", data=b"",
                                     method="POST")
        with urllib.request.urlopen(req, timeout=90) as r:
            self.assertEqual(json.loads(r.read())["change"], "restarted")
        b.produce("in", 1000, n, KEYS)
        n += 1000
        self.assert_settles(members, n, "after a's second part restarted", bucket="per_dev",
                            want=want(n))
        # Shards of both parts: the input topic's and the repartitioned one's.
        self.assert_one_owner_an_epoch(store, PARTITIONS + 4)
        self.assertEqual(sorted(os.listdir(os.path.join(store, "c1"))),
                         ["k", "k-part2", "members"])

    def test_posts_to_every_member_after_a_repartition_step(self):
        """An http input runs on every member, each taking the posts sent to
        it; a `repartition` step writes them to a topic keyed by device, in
        transactions, and the bucket after it counts each once, on the member
        that owns the device's partition. b is killed with SIGKILL right
        after it accepted posts and comes back on its state directory: what
        it accepted is counted, once. Both members' commit markers go to the
        one marker topic of the step's transactional id."""
        devices = 7
        b = Broker(("by-dev:4", "txn.markers:1"))
        store = self.path("store")

        def graph(d):
            return f"""
buckets:
  per_dev: {{}}
pipelines:
  h:
    input: {{http: {{path: /ingest}}}}
    transforms:
      - repartition: {{key: dev, topic: "{b.t('by-dev')}", brokers: "{b.bootstrap}",
                       transactional_id: "{b.t('txn')}",
                       properties: {{transaction.timeout.ms: "10000"}}}}
      - bucket: {{name: per_dev, key: dev, op: add, field: v}}
    outputs: [{{file: {{path: {os.path.join(d, 'out')}}}}}]
"""

        def member(name):
            return self.member(name, b, None, store, graph=graph)

        def want(n):
            return device_sums(n, devices)

        def post(s, first, count):
            post_devices(s, first, count, devices)

        members = {name: member(name) for name in ("a", "b")}
        n = 0
        for i in range(40):
            post(members["ab"[i % 2]], n, 50)
            n += 50
        self.assert_settles(members, n, "posts to both members", bucket="per_dev", want=want(n))
        # Accepted by b (202: in its http log), then b is killed before its
        # step can have sent them all.
        for _ in range(20):
            post(members["b"], n, 50)
            n += 50
        self.kill(members, "b")
        for _ in range(10):
            post(members["a"], n, 50)
            n += 50
        members["b"] = member("b")
        for i in range(10):
            post(members["ab"[i % 2]], n, 50)
            n += 50
        self.assert_settles(members, n, "after b came back", bucket="per_dev", want=want(n))
        # Each member's part after the step owns some of the topic's shards.
        self.assert_one_owner_an_epoch(store, 4)
        self.assertEqual(sorted(os.listdir(os.path.join(store, "c1"))),
                         ["h-part2", "members"])
        writers = {m["transactional_id"] for m in b.read("txn.markers")}
        self.assertEqual(writers, {b.t("txn") + ".a", b.t("txn") + ".b"})

    def test_posts_written_ahead_to_kafka_outlive_their_member(self):
        """An http input given `topic` produces each post to the topic,
        keyed by device, before its 202; the bucket after it, in the part
        that reads the topic, counts per device with no repartition step. b
        is killed with SIGKILL right after it accepted posts and never comes
        back: a takes over its partitions and counts what b accepted, once.
        The topic holds every accepted message once (an idempotent
        producer)."""
        devices = 7
        b = Broker(("posts:4",))
        store = self.path("store")

        def graph(d):
            return f"""
buckets:
  per_dev: {{}}
pipelines:
  h:
    input: {{http: {{path: /ingest, topic: "{b.t('posts')}", brokers: "{b.bootstrap}", key: dev,
                    delivery_timeout_ms: 5000,
                    kafka_properties: {{session.timeout.ms: "6000",
                                        heartbeat.interval.ms: "500"}}}}}}
    transforms:
      - bucket: {{name: per_dev, key: dev, op: add, field: v}}
    outputs: [{{file: {{path: {os.path.join(d, 'out')}}}}}]
"""

        def want(n):
            return device_sums(n, devices)

        def post(s, first, count):
            post_devices(s, first, count, devices)

        members = {name: self.member(name, b, None, store, graph=graph) for name in ("a", "b")}
        n = 0
        for i in range(20):
            post(members["ab"[i % 2]], n, 50)
            n += 50
        self.assert_settles(members, n, "posts to both members", bucket="per_dev", want=want(n))
        # Accepted by b (202: in the topic), then b is gone for good.
        for _ in range(20):
            post(members["b"], n, 50)
            n += 50
        self.kill(members, "b")
        for _ in range(10):
            post(members["a"], n, 50)
            n += 50
        self.assert_settles(members, n, "a alone, b never back", bucket="per_dev", want=want(n))
        self.assertEqual(sorted(m["seq"] for m in b.read("posts", isolation="read_uncommitted")),
                         list(range(n)))
        self.assertEqual(sorted(os.listdir(os.path.join(store, "c1"))), ["h-part2", "members"])

    def test_a_graph_that_cannot_follow_partitions_is_refused(self):
        b = Broker(("in:2",))
        store = self.path("store")
        d = self.path("x")
        os.makedirs(d, exist_ok=True)
        server = (f"listen: 127.0.0.1:0\n"
                  f"cluster: {{name: c1, member: x, store: {store}, partitioner: crc32}}\n")
        cases = [
            ("pipelines:\n  p:\n    input: {dummy: {count: 1}}\n    outputs: [{stdout: {}}]\n",
             "would give every member the same messages"),
            ("pipelines:\n  p:\n    input: {nats: {url: 'nats://127.0.0.1:1', subject: s}}\n"
             "    outputs: [{stdout: {}}]\n",
             "would give every member the same messages"),
            ("buckets: {n: {}}\npipelines:\n  p:\n    input: {http: {path: /in}}\n"
             "    transforms: [{bucket: {name: n, key: k, op: count}}]\n"
             "    outputs: [{stdout: {}}]\n",
             "only a pipeline that reads a partitioned input writes buckets"),
            ("buckets: {n: {}}\npipelines:\n  p:\n"
             f"    input: {{kafka: {{brokers: \"{b.bootstrap}\", topics: [\"{b.t('in')}\"], "
             "group: g}}\n"
             "    transforms: [{bucket: {name: n, key: k, op: count}}]\n"
             "    outputs: [{stdout: {}}]\n"
             "  q:\n    input: {http: {path: /in}}\n"
             "    transforms: [{bucket: {name: n, key: k, op: lookup, as: c}}]\n"
             "    outputs: [{stdout: {}}]\n",
             "reads pipeline p's partitions and pipeline q's http input"),
            ("pipelines:\n  p:\n"
             f"    input: {{kafka: {{brokers: \"{b.bootstrap}\", topics: [\"{b.t('in')}\"], "
             "group: g}}\n    outputs: [{stdout: {}}]\n"
             "  q:\n    input: {pipeline: p}\n"
             "    transforms: [{buffer: {max_messages: 10}}]\n    outputs: [{stdout: {}}]\n",
             "keeps state that does not move with partitions"),
            ("pipelines:\n  p:\n"
             f"    input: {{kafka: {{brokers: \"{b.bootstrap}\", topics: [\"{b.t('in')}\"], "
             "group: g}}\n"
             "    transforms: [{rolling_window: {field: v, window_messages: 3}}]\n"
             "    outputs: [{stdout: {}}]\n",
             "in a cluster a window needs a `key`"),
        ]
        with open(os.path.join(d, "server.yaml"), "w") as f:
            f.write(server)
        for i, (graph, want) in enumerate(cases):
            # `kayak check` with the server config refuses what the member would.
            with open(os.path.join(d, f"g{i}.yaml"), "w") as f:
                f.write(graph)
            r = run_kayak(["check", os.path.join(d, f"g{i}.yaml"), "--server-config",
                           os.path.join(d, "server.yaml")])
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn(want, r.stderr)
            self.assertRegex(r.stderr, rf"g{i}\.yaml:\d+:\d+: ")
            r = run_kayak(["check", os.path.join(d, f"g{i}.yaml")])
            self.assertEqual(r.returncode, 0, f"without a cluster: {r.stderr}")
            s = Server(d, graph, server_config=server, state_dir=os.path.join(d, "state"),
                       wait=False)
            self.servers.append(s)
            code = s.proc.wait(timeout=60)
            s.kill()
            self.assertNotEqual(code, 0)
            self.assertIn(want, s.stderr())
        # Inputs whose messages the members share run on every member.
        shared = ("pipelines:\n"
                  "  n:\n    input: {nats: {url: 'nats://127.0.0.1:1', subject: s, queue: q}}\n"
                  "    outputs: [{stdout: {}}]\n"
                  "  t:\n    input: {tcp: {listen: '127.0.0.1:0'}}\n    outputs: [{stdout: {}}]\n"
                  "  u:\n    input: {udp: {listen: '127.0.0.1:0'}}\n    outputs: [{stdout: {}}]\n"
                  "  h:\n    input: {http: {path: /in}}\n    outputs: [{stdout: {}}]\n")
        with open(os.path.join(d, "shared.yaml"), "w") as f:
            f.write(shared)
        r = run_kayak(["check", os.path.join(d, "shared.yaml"), "--server-config",
                       os.path.join(d, "server.yaml")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("fit for cluster c1", r.stdout)
        s = Server(d, shared, server_config=server, state_dir=os.path.join(d, "state"))
        self.servers.append(s)
        self.assertEqual(sorted(p["id"] for p in s.get_json("/api/v1/pipelines")["pipelines"]),
                         ["h", "n", "t", "u"])
        s.kill()
        # Without a state directory there is no cluster.
        s = Server(d, cases[0][0], server_config=server, wait=False)
        self.servers.append(s)
        self.assertNotEqual(s.proc.wait(timeout=60), 0)
        s.kill()
        self.assertIn("a cluster needs --state-dir", s.stderr())
