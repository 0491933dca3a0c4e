"""Checkpoints with --state-dir: kill -9 and graceful restarts against an uninterrupted run."""
import json
import os
import random
import re
import signal
import subprocess
import time

from harness import KayakTest, Server, http, wait_for

N = 20000
KEYS = 37


def pipelines(src, out, slow=30000):
    return f"""
buckets:
  sums: {{}}
  counts: {{idle_timeout_secs: 3600}}
pipelines:
  readings:
    input: {{file: {{path: {src}, batch_size: 50}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end'}}
      - rolling_window: {{key: k, field: v, window_messages: 7, aggregates: [count, sum, max]}}
      - bucket: {{name: sums, key: k, op: add, field: v, as: total}}
      - buffer: {{max_messages: 30}}
    outputs: [{{file: {{path: {out}}}}}]
  counted:
    input: {{pipeline: readings}}
    transforms:
      - bucket: {{name: counts, key: k, op: count}}
    outputs: [{{file: {{path: {out}-counted}}}}]
  extra:
    input: {{file: {{path: {src}.extra, batch_size: 20}}}}
    transforms:
      - bucket: {{name: counts, key: k, op: count}}
"""

M = 3000  # messages of the second writer of bucket `counts`


def oracle_sums():
    sums, counts = {}, {}
    for i in range(N):
        k = f"k{i % KEYS}"
        sums[k] = sums.get(k, 0) + (i * 7919) % 101
        counts[k] = counts.get(k, 0) + 1
    for i in range(M):
        k = f"k{i % KEYS}"
        counts[k] = counts.get(k, 0) + 1
    return sums, counts


def oracle_rows():
    """Per seq: the window aggregates and running total a batch computation gives."""
    windows, totals, rows = {}, {}, {}
    for i in range(N):
        k, v = f"k{i % KEYS}", (i * 7919) % 101
        w = windows.setdefault(k, [])
        w.append(v)
        del w[:-7]
        totals[k] = totals.get(k, 0) + v
        rows[i] = (len(w), float(sum(w)), float(max(w)), totals[k])
    return rows


SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 30}\n"


def append_keys(path, ids, v):
    """Lines {"id": "key-<i>", "v": v} for each i, appended to `path`."""
    with open(path, "a") as f:
        f.write("".join(f'{{"id":"key-{i}","v":{v}}}\n' for i in ids))


def checkpoint_now(s):
    """POST /api/v1/checkpoints: its status and the first region's record."""
    status, _, body = http("POST", s.url + "/api/v1/checkpoints")
    return status, json.loads(body)["regions"][0]


class CheckpointTest(KayakTest):
    def setUp(self):
        super().setUp()
        with open(self.path("in.ndjson"), "w") as f:
            for i in range(N):
                f.write(json.dumps({"seq": i, "k": f"k{i % KEYS}", "v": (i * 7919) % 101}) + "\n")
        self.src = self.path("in.ndjson")
        with open(self.src + ".extra", "w") as f:
            for i in range(M):
                f.write(json.dumps({"k": f"k{i % KEYS}"}) + "\n")

    def finished(self, s, out="out"):
        """The input read everything and the last pipeline's file holds every message."""
        return s.card("readings", "input")["state"] == "finished" and \
            s.card("extra", "input")["state"] == "finished" and \
            len(self.read_output(out + "-counted")) >= N

    def straight_run(self):
        s = self.start(pipelines(self.src, self.path("straight"), slow=1),
                       server_config=SERVER)
        wait_for(lambda: self.finished(s, "straight"), timeout=120, what="the straight run")
        self.assertEqual(s.stop(), 0)
        return self.read_bytes("straight"), self.read_bytes("straight-counted")

    def read_bytes(self, d):
        out = b""
        for name in sorted(os.listdir(self.path(d))):
            with open(self.path(d, name), "rb") as f:
                out += f.read()
        return out

    def committed(self, s):
        status, body = s.get("/api/v1/checkpoints")
        regions = json.loads(body)["regions"]
        return min(r["last_committed_id"] for r in regions) if regions else 0

    def test_kill_9_then_resume_matches_an_uninterrupted_run(self):
        straight, straight_counted = self.straight_run()
        seed = int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30)))
        print(f"kill seed {seed}")
        rng = random.Random(seed)
        state = self.path("state")
        kills = 0
        for _ in range(3):
            s = self.start(pipelines(self.src, self.path("out")), server_config=SERVER,
                           state_dir=state)
            first = self.committed(s)
            wait_for(lambda: self.committed(s) > first, timeout=30, what="a commit")
            if self.finished(s):
                s.stop()
                break
            # a random instant, often in the middle of a checkpoint: the kill's
            # timing is the point of the test, not a synchronisation
            time.sleep(rng.uniform(0.0, 1.5))
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait(timeout=10)
            kills += 1
        s = self.start(pipelines(self.src, self.path("out")), server_config=SERVER, state_dir=state)
        wait_for(lambda: self.finished(s), timeout=180, what="the resumed run to finish")
        sums, counts = oracle_sums()
        for k in ("k0", "k5", "k36"):
            self.assertEqual(s.get_json(f"/api/v1/buckets/sums?key={k}")["value"], sums[k], k)
            self.assertEqual(s.get_json(f"/api/v1/buckets/counts?key={k}")["value"], counts[k], k)
        page = s.get_json("/api/v1/buckets/sums?limit=1000")
        self.assertEqual({e["key"]: e["value"] for e in page["entries"]}, sums)
        self.assertEqual(s.stop(), 0)
        # Every window and running total equals the batch computation.
        rows = oracle_rows()
        got = [json.loads(l) for l in self.read_output("out")]
        self.assertEqual(sorted(g["seq"] for g in got), list(range(N)))
        for g in got:
            self.assertEqual((g["v_count"], g["v_sum"], g["v_max"], g["total"]), rows[g["seq"]],
                             f"seq {g['seq']}, seed {seed}")
        # The file output truncates back to the checkpoint and rewrites: byte-identical.
        self.assertEqual(self.read_bytes("out"), straight, f"seed {seed}, {kills} kills")
        self.assertEqual(self.read_bytes("out-counted"), straight_counted)
        self.assertGreaterEqual(kills, 1)

    def test_graceful_restart_replays_nothing_and_keeps_state(self):
        state = self.path("state")
        out = self.path("out")
        config = pipelines(self.src, out).replace(
            f"outputs: [{{file: {{path: {out}}}}}]", f"outputs: [{{file: {{path: {out}}}}}, {{stdout: {{}}}}]")
        printed = []
        for _ in range(2):
            s = self.start(config, server_config=SERVER, state_dir=state, capture_stdout=True)
            wait_for(lambda: len(s.stdout_lines) > 1000, what="some output")
            self.assertEqual(s.stop(signal.SIGTERM), 0)
            self.assertIn("savepoint committed", s.stderr())
            printed += s.stdout_lines
        s = self.start(config, server_config=SERVER, state_dir=state, capture_stdout=True)
        wait_for(lambda: self.finished(s), timeout=180, what="the last run to finish")
        wait_for(lambda: len(printed) + len(s.stdout_lines) >= N, what="stdout to catch up")
        self.assertEqual(s.stop(), 0)
        printed += s.stdout_lines
        # Each run carried on where the last one stopped: nothing twice, nothing lost,
        # even from the buffer, which held messages across each restart.
        seqs = [json.loads(l)["seq"] for l in printed]
        self.assertEqual(len(seqs), N, "a graceful restart replayed or lost messages")
        self.assertEqual(seqs, list(range(N)))

    def test_finished_input_replays_nothing_after_restart(self):
        state = self.path("state")
        s = self.start(pipelines(self.src, self.path("out"), slow=1), server_config=SERVER,
                       state_dir=state)
        wait_for(lambda: self.finished(s), timeout=60, what="the first run")
        # a checkpoint begun after the end of the input
        at_end = self.committed(s)
        wait_for(lambda: self.committed(s) > at_end + 1, timeout=30, what="a commit after the end")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=10)
        before = self.read_bytes("out")
        s = self.start(pipelines(self.src, self.path("out"), slow=1), server_config=SERVER,
                       state_dir=state)
        wait_for(lambda: self.committed(s) > 0, timeout=30, what="a commit after restart")
        self.assertEqual(s.card("readings", "input")["messages_out"], 0)
        self.assertEqual(s.stop(), 0)
        self.assertEqual(self.read_bytes("out"), before)

    def test_crash_inside_a_commit_leaves_the_previous_checkpoint_in_force(self):
        state = self.path("state")
        config = pipelines(self.src, self.path("out"))
        # before_dir_fsync: the rename may or may not be durable; either checkpoint is
        # consistent, and on this file system the rename is visible after the kill.
        for point, expect_new in (("after_chunks", False), ("before_rename", False),
                                  ("before_dir_fsync", True), ("after_dir_fsync", True)):
            s = self.start(config, server_config=SERVER, state_dir=state)
            wait_for(lambda: self.committed(s) > 0, timeout=30, what="a first commit")
            self.assertEqual(s.stop(), 0)
            good = max(int(n.split("-")[-1].split(".")[0]) for n in os.listdir(state)
                       if n.startswith("MANIFEST-"))
            s = self.start(config, server_config=SERVER, state_dir=state,
                           env={"KAYAK_CRASH_POINT": point})
            self.assertEqual(s.proc.wait(timeout=60), -signal.SIGKILL, s.stderr())
            self.assertIn(f"crash point {point} reached", s.stderr())
            restarted = time.time_ns()
            s = self.start(config, server_config=SERVER, state_dir=state)
            restored = int(re.search(r"restoring region \S+ from checkpoint (\d+)", s.stderr()).group(1))
            if expect_new:
                self.assertGreater(restored, good, point)
            else:
                self.assertEqual(restored, good, point)
            # nothing half-written survives the restart (a temporary file written
            # since may be the restarted server's own next checkpoint)
            self.assertFalse([n for n in os.listdir(state) if n.endswith(".tmp") and
                              os.stat(os.path.join(state, n)).st_mtime_ns < restarted])
            self.assertEqual(s.stop(), 0)

    def test_regions_commit_independently(self):
        other = self.write_ndjson("other.ndjson", [{"k": "x", "v": i} for i in range(10)])
        config = f"""
pipelines:
  stuck:
    input: {{dummy: {{}}}}
    outputs: [{{stdout: {{}}}}]
  fine:
    input: {{file: {{path: {other}, follow: true}}}}
    transforms:
      - rolling_window: {{key: k, field: v, window_messages: 100}}
    outputs: [{{file: {{path: {self.path("fine")}}}}}]
"""
        # stdout is a pipe nobody reads: region "stuck" can never finish a checkpoint.
        s = self.start(config, server_config="listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 2}\n",
                       state_dir=self.path("state"), stdout=subprocess.PIPE)

        def regions():
            return {r["region"]: r for r in s.get_json("/api/v1/checkpoints")["regions"]}

        wait_for(lambda: regions()["stuck"]["abandoned"] >= 1, timeout=30,
                 what="the stuck region's checkpoint to be abandoned")
        # only the checkpoint every region takes at start, before data flowed
        stuck_id = regions()["stuck"]["last_committed_id"]
        self.assertEqual(regions()["stuck"]["committed"], 1)
        start = regions()["fine"]["committed"]
        wait_for(lambda: regions()["fine"]["committed"] >= start + 2, timeout=30,
                 what="the other region to keep committing")
        self.assertIn("abandoned", s.stderr())
        self.assertEqual(regions()["stuck"]["last_committed_id"], stuck_id)
        s.kill()

    def test_changed_components_start_empty_unchanged_keep_state(self):
        state = self.path("state")
        src = self.write_ndjson("w.ndjson", [{"k": "a", "v": 1}] * 5)

        def config(out, window):
            return f"""
pipelines:
  p:
    input: {{file: {{path: {src}, follow: true, poll_ms: 20}}}}
    transforms:
      - rolling_window: {{key: k, field: v, window_messages: {window}, aggregates: [count]}}
    outputs: [{{file: {{path: {self.path(out)}}}}}]
"""
        s = self.start(config("o1", 100), server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.read_output("o1")) == 5, what="first five")
        self.assertEqual(s.stop(), 0)
        # only the output changed: the window keeps its five
        with open(src, "a") as f:
            f.write(json.dumps({"k": "a", "v": 1}) + "\n")
        s = self.start(config("o2", 100), server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.read_output("o2")) == 1, what="the sixth")
        self.assertEqual(json.loads(self.read_output("o2")[0])["v_count"], 6)
        self.assertEqual(s.stop(), 0)
        # the window changed: it starts empty
        with open(src, "a") as f:
            f.write(json.dumps({"k": "a", "v": 1}) + "\n")
        s = self.start(config("o2", 50), server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.read_output("o2")) == 2, what="the seventh")
        self.assertEqual(json.loads(self.read_output("o2")[1])["v_count"], 1)
        self.assertIn("config changed", s.stderr())
        self.assertEqual(s.stop(), 0)

    def test_unchanged_bucket_adds_nothing_to_the_next_checkpoint(self):
        keys = 100_000
        src = self.path("keys.ndjson")
        with open(src, "w") as f:
            for i in range(keys):
                f.write(f'{{"id":"key-{i}","v":{i}}}\n')
        s = self.start(f"""
buckets:
  big: {{}}
pipelines:
  fill:
    input: {{file: {{path: {src}}}}}
    transforms:
      - bucket: {{name: big, key: id, op: set, field: v}}
""", server_config="listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\n",
                       state_dir=self.path("state"))
        wait_for(lambda: s.card("fill", "transforms[0]")["messages_out"] == keys,
                 timeout=60, what="the bucket to fill")
        status, _, body = http("POST", s.url + "/api/v1/checkpoints")
        self.assertEqual(status, 200, body)
        first = json.loads(body)["regions"][0]
        self.assertGreater(first["bytes_written"], keys * 10)  # the whole bucket, once
        status, _, body = http("POST", s.url + "/api/v1/checkpoints")
        self.assertEqual(status, 200, body)
        second = json.loads(body)["regions"][0]
        self.assertGreater(second["last_committed_id"], first["last_committed_id"])
        print(f"100k-key bucket: first checkpoint {first['bytes_written']} bytes, "
              f"unchanged next one {second['bytes_written']} bytes written, "
              f"{second['bytes_reused']} reused")
        self.assertLess(second["bytes_written"], 4096)
        self.assertGreaterEqual(second["bytes_reused"], first["bytes_written"] - 4096)
        self.assertEqual(s.stop(), 0)

    def test_a_changed_bucket_writes_only_what_changed_and_restores_from_the_chain(self):
        keys = 20_000
        src = self.path("keys.ndjson")

        append_keys(src, range(keys), 0)
        lines = keys
        cfg = f"""
buckets:
  big: {{}}
pipelines:
  fill:
    input: {{file: {{path: {src}, follow: true, poll_ms: 20}}}}
    transforms:
      - bucket: {{name: big, key: id, op: set, field: v}}
"""
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\n"
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))

        def settle():
            wait_for(lambda: s.card("fill", "transforms[0]")["messages_out"] == lines,
                     timeout=60, what=f"{lines} messages into the bucket")

        def checkpoint():
            status, region = checkpoint_now(s)
            self.assertEqual(status, 200, region)
            return region["bytes_written"]

        settle()
        full = checkpoint()
        self.assertGreater(full, keys * 20)
        # 1% of the keys changed, then 1% new keys, then both with the
        # first 1% again: each checkpoint writes about what changed
        written = []
        for r, ids in enumerate([range(0, 200), range(keys, keys + 200),
                                 list(range(0, 200)) + list(range(keys + 200, keys + 400))]):
            append_keys(src, ids, r + 1)
            lines += len(ids)
            settle()
            written.append(checkpoint())
        print(f"20k-key bucket: full {full} bytes; after 1% changed, 1% new, 2% both: {written}")
        for w, n in zip(written, [200, 200, 400]):
            self.assertLess(w, full * n / keys * 2 + 4096)
        chain = [f for f in os.listdir(self.path("state")) if f.endswith("-b.big.kyc")]
        self.assertEqual(len(chain), 4, chain)  # the full chunk and three deltas
        # what the chain restores after kill -9 is the bucket as it was
        def entries(s):
            out, after = {}, ""
            while True:
                page = s.get_json(f"/api/v1/buckets/big?limit=1000&after={after}")
                for e in page["entries"]:
                    out[e["key"]] = (e["value"], e["last_write_ms"])
                if not page.get("next_after"):
                    return out
                after = page["next_after"]
        before = entries(s)
        self.assertEqual(len(before), keys + 400)
        s.kill()
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        wait_for(lambda: s.get("/api/v1/buckets/big?limit=1")[0] == 200, what="restarted")
        self.assertEqual(entries(s), before)
        # the checkpoint taken at the restart refers to the restored chain
        # rather than write the bucket again
        regions = s.get_json("/api/v1/checkpoints")["regions"]
        self.assertLess(regions[0]["bytes_written"], 4096, regions)
        self.assertGreater(regions[0]["bytes_reused"], full, regions)
        # deltas past the size of the full chunk (4% in the chain, then 60%,
        # then 40% of the keys): the next checkpoint writes it whole,
        # compacted from the chain in the store and the changes
        lines = 0  # the card counts from the restart
        for r, ids in enumerate([range(0, keys * 6 // 10), range(keys * 6 // 10, keys - 10)]):
            append_keys(src, ids, 10 + r)
            lines += len(ids)
            settle()
            written.append(checkpoint())
        self.assertLess(written[-2], full * 0.7, written)
        self.assertGreater(written[-1], full * 0.9, written)
        before = entries(s)
        self.assertEqual(before["key-0"][0], 10)
        self.assertEqual(before[f"key-{keys - 1}"][0], 0)
        s.kill()
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        wait_for(lambda: s.get("/api/v1/buckets/big?limit=1")[0] == 200, what="restarted")
        self.assertEqual(entries(s), before)
        self.assertEqual(s.stop(), 0)

    def test_a_changed_window_writes_only_the_keys_written_and_restores_from_the_chain(self):
        keys = 5000
        src = self.path("w.ndjson")
        vals = {}

        def write(ids, v):
            with open(src, "a") as f:
                for i in ids:
                    f.write(f'{{"id":"key-{i}","v":{v + i}}}\n')
                    vals.setdefault(i, []).append(v + i)

        write(range(keys), 0)
        lines = keys
        cfg = f"""
pipelines:
  fill:
    input: {{file: {{path: {src}, follow: true, poll_ms: 20}}}}
    transforms:
      - rolling_window: {{key: id, field: v, window_messages: 3, aggregates: [count, sum]}}
    outputs: [{{file: {{path: {self.path("out")}}}}}]
"""
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\n"
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))

        def settle(n):
            wait_for(lambda: len(self.read_output("out")) >= n, timeout=60,
                     what=f"{n} lines out")

        def checkpoint():
            status, region = checkpoint_now(s)
            self.assertEqual(status, 200, region)
            return region["bytes_written"]

        settle(lines)
        full = checkpoint()
        written = []
        for r in range(2):
            write(range(100 * r, 100 * r + 100), 1000 * (r + 1))  # 2% of the keys
            lines += 100
            settle(lines)
            written.append(checkpoint())
        print(f"5k-key window: full {full} bytes; 2% of the keys written twice: {written}")
        for w in written:
            self.assertLess(w, full * 0.02 * 2 + 4096)
        chain = [f for f in os.listdir(self.path("state")) if f.endswith("-p.fill.t0.kyc")]
        self.assertEqual(len(chain), 3, chain)  # the full state and two deltas
        s.kill()
        # restored from the chain: these keys' windows go on from what they held
        write(range(50, 150), 5000)
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        settle(lines + 100)
        rows = [json.loads(l) for l in self.read_output("out")][-100:]
        for row in rows:
            i = int(row["id"].split("-")[1])
            last = vals[i][-3:]
            self.assertEqual((row["v_count"], row["v_sum"]), (len(last), float(sum(last))), row)
        lines += 100
        # the checkpoint taken at the restart referred to the restored chain
        # (only the input's and output's small units were written)
        history = s.get_json("/api/v1/checkpoints")["regions"][0]
        self.assertLess(history["bytes_written"], 4096, history)
        # every key written: the deltas would pass the size of the full
        # state, so the coordinator writes it whole, merged from the chain
        # in the store and this delta
        write(range(keys), 7000)
        lines += keys
        settle(lines)
        compacted = checkpoint()
        self.assertGreater(compacted, full * 0.9, (full, compacted))
        s.kill()
        write(range(990, 1010), 9000)  # keys on both sides of the compacted ones
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        settle(lines + 20)
        rows = [json.loads(l) for l in self.read_output("out")][-20:]
        for row in rows:
            i = int(row["id"].split("-")[1])
            last = vals[i][-3:]
            self.assertEqual((row["v_count"], row["v_sum"]), (len(last), float(sum(last))), row)
        self.assertEqual(s.stop(), 0)

    def test_a_chain_that_cannot_be_read_back_is_replaced_from_memory(self):
        # A full chunk damaged on disk while kayak runs: the compaction that
        # reads it back fails that checkpoint, naming the chunk, and the
        # previous one stays in force; the next takes the bucket and the
        # window whole from memory, and a restart restores them.
        keys = 5000
        src = self.path("c.ndjson")

        append_keys(src, range(keys), 1)
        lines = keys
        cfg = f"""
buckets:
  big: {{}}
pipelines:
  fill:
    input: {{file: {{path: {src}, follow: true, poll_ms: 20}}}}
    transforms:
      - rolling_window: {{key: id, field: v, window_messages: 3, aggregates: [count, sum]}}
      - bucket: {{name: big, key: id, op: add, field: v, as: total}}
    outputs: [{{file: {{path: {self.path("out")}}}}}]
"""
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\n"
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))

        def settle():
            wait_for(lambda: len(self.read_output("out")) >= lines, timeout=60,
                     what=f"{lines} lines out")


        settle()
        status, first = checkpoint_now(s)
        self.assertEqual(status, 200, first)
        append_keys(src, range(100), 1)
        lines += 100
        settle()
        self.assertEqual(checkpoint_now(s)[0], 200)
        state = self.path("state")
        for unit in ("-b.big.kyc", "-p.fill.t0.kyc"):
            base = sorted(f for f in os.listdir(state) if f.endswith(unit))[0]
            with open(os.path.join(state, base), "r+b") as f:
                f.seek(os.path.getsize(f.name) // 2)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0xFF]))
        # every key: past the full chunk's size, a compaction reads the chain back
        append_keys(src, range(keys), 1)
        lines += keys
        settle()
        status, failed = checkpoint_now(s)
        self.assertEqual(status, 503, failed)
        self.assertRegex(failed["last_error"],
                         r"chunk-\d+-(b\.big|p\.fill\.t0)\.kyc: .*(checksum|does not match)")
        status, again = checkpoint_now(s)
        self.assertEqual(status, 200, again)
        self.assertGreater(again["bytes_written"], first["bytes_written"] * 0.9, (first, again))
        s.kill()
        append_keys(src, range(5), 1)
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        lines += 5
        settle()
        rows = [json.loads(l) for l in self.read_output("out")][-5:]
        for row in rows:  # key-0..4: written three times before, once now
            self.assertEqual((row["v_count"], row["v_sum"], row["total"]), (3, 3.0, 4), row)
        self.assertEqual(s.stop(), 0)

    def blocked_output_config(self, n, retry=""):
        src = self.write_ndjson("b.ndjson", [{"i": i} for i in range(n)])
        with open(self.path("blocker"), "w") as f:
            f.write("a file where the output wants a directory")
        return f"""
pipelines:
  p:
    input: {{file: {{path: {src}, batch_size: 10}}}}
    outputs: [{{file: {{path: {self.path("blocker", "out")}{retry}}}}}]
"""

    def test_failing_output_is_retried_and_holds_its_pipeline(self):
        n = 5000
        s = self.start(self.blocked_output_config(n), server_config=SERVER,
                       state_dir=self.path("state"))
        card = wait_for(lambda: (c := s.card("p", "outputs[0]"))["errors"] >= 3 and c,
                        timeout=30, what="the error count to climb")
        self.assertEqual(card["state"], "retrying")
        self.assertIn("blocker", card["last_error"])
        held = s.card("p", "input")["messages_out"]
        self.assertLess(held, n)  # backpressure holds the input
        # the destination comes back: every message arrives, none dropped
        os.remove(self.path("blocker"))
        os.makedirs(self.path("blocker"))
        wait_for(lambda: len(self.read_output(os.path.join("blocker", "out"))) == n, timeout=60,
                 what="everything after the output recovered")
        self.assertEqual(s.card("p", "outputs[0]")["state"], "running")
        self.assertEqual([json.loads(l)["i"] for l in self.read_output(os.path.join("blocker", "out"))],
                         list(range(n)))
        self.assertEqual(s.stop(), 0)

    def test_without_state_dir_a_failing_output_drops_after_its_retries(self):
        n = 100
        s = self.start(self.blocked_output_config(n, ", retry: {base_ms: 5, max_ms: 10, max_attempts: 2}"))
        card = wait_for(lambda: (c := s.card("p", "outputs[0]"))["messages_in"] == n and c,
                        timeout=30, what="every batch to reach the output")
        self.assertEqual(card["messages_out"], 0)
        self.assertGreaterEqual(card["errors"], 2 * n // 10)
        self.assertIn("dropped a batch", s.stderr())
        self.assertEqual(s.stop(), 0)

    def test_the_exposure_says_what_a_kill_now_would_replay(self):
        # Checkpoints only when asked: what the input reads piles up as
        # exposure until a checkpoint commits it.
        s = self.start("""
pipelines:
  p:
    input: {dummy: {rate_per_sec: 2000}}
    outputs: [{file: {path: out}}]
""", server_config="listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\n",
            state_dir=self.path("state"))

        def exposure():
            return s.get_json("/api/v1/checkpoints")["regions"][0]["exposure"]

        wait_for(lambda: exposure()["messages"] >= 2000, timeout=30, what="a second of reads")
        e = exposure()
        self.assertEqual(e["not_committing"], "")
        self.assertEqual(e["checkpoint_in_progress"], 0)
        read = s.card("p", "input")["messages_in"]
        self.assertLessEqual(e["messages"], read)
        self.assertGreater(e["since_commit_ms"], 500)
        status, _, _ = http("POST", s.url + "/api/v1/checkpoints")
        self.assertEqual(status, 200)
        after = exposure()
        # Since the new checkpoint's barrier: a fraction of a second of reads.
        self.assertLess(after["messages"], e["messages"])
        self.assertLess(after["since_commit_ms"], e["since_commit_ms"])
        self.assertLess(after["since_commit_ms"], 5000)

    def test_failed_pipeline_holds_back_its_region_only(self):
        ok_src = self.write_ndjson("ok.ndjson", [{"i": 1}])
        s = self.start(f"""
pipelines:
  broken:
    input: {{file: {{path: {self.path("missing.ndjson")}}}}}
  after_broken:
    input: {{pipeline: broken}}
  fine:
    input: {{file: {{path: {ok_src}}}}}
""", server_config=SERVER, state_dir=self.path("state"))

        def regions():
            return {r["region"]: r for r in s.get_json("/api/v1/checkpoints")["regions"]}

        wait_for(lambda: "broken" in regions()["after_broken"]["held_back"], timeout=30,
                 what="the region to be held back")
        before = regions()["after_broken"]["committed"]  # at most the one taken at start
        self.assertLessEqual(before, 1)
        start = regions()["fine"]["committed"]
        wait_for(lambda: regions()["fine"]["committed"] >= start + 2, timeout=30,
                 what="commits elsewhere")
        held = regions()["after_broken"]
        self.assertEqual(held["committed"], before)
        self.assertIn("broken", held["exposure"]["not_committing"])
        self.assertEqual(regions()["fine"]["exposure"]["not_committing"], "")
        self.assertIn("held back", s.stderr())
        status, metrics = s.get("/metrics")
        self.assertIn('kayak_checkpoint_held_back{region="after_broken"} 1', metrics)
        self.assertIn('kayak_checkpoint_held_back{region="fine"} 0', metrics)
        self.assertRegex(metrics, r'kayak_checkpoints_committed_total\{region="fine"\} [1-9]')
        # the held-back region cannot take the savepoint: the stop says so, exit 1
        self.assertEqual(s.stop(), 1)
        self.assertRegex(s.stderr(), r"region after_broken did not reach its savepoint \(held back")
        self.assertRegex(s.stderr(), r"savepoint \d+ of region fine committed")


if __name__ == "__main__":
    import unittest
    unittest.main()


class DeadLetterTest(KayakTest):
    """`dead_letter:` on a pipeline: a message a transform fails on goes there
    in an envelope (why, where, the message) while the rest of its batch goes
    on; under checkpointing it is an output like the others, so across a
    kill -9 every message is in exactly one of the two files, once."""

    CONFIG = """\
pipelines:
  p:
    input: {dummy: {rate_per_sec: 1500, count: 3000, batch_size: 50, template: '{"seq":{{seq}}}'}}
    transforms:
      - map: {w: '100 / (seq % 10 - 3)'}
      - filter: 'seq > 0'
    outputs: [{file: {path: out}}]
    dead_letter: {file: {path: dead}}
"""
    SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"

    def rows(self, d):
        return [json.loads(l) for l in self.read_output(d)]

    def test_failed_messages_go_to_the_dead_letters_once_across_a_kill(self):
        state = self.path("state")
        s = self.start(self.CONFIG, state_dir=state, server_config=self.SERVER)
        wait_for(lambda: len(self.rows("dead")) >= 50, timeout=30, what="dead letters")
        s.kill()
        s = self.start(self.CONFIG, state_dir=state, server_config=self.SERVER)
        wait_for(lambda: len(self.rows("out")) + len(self.rows("dead")) >= 3000, timeout=60,
                 what="every message in one of the two files")
        out, dead = self.rows("out"), self.rows("dead")
        good = [i for i in range(1, 3001) if i % 10 != 3]
        self.assertEqual(sorted(r["seq"] for r in out), good, "each good message once")
        self.assertEqual(sorted(r["message"]["seq"] for r in dead),
                         [i for i in range(1, 3001) if i % 10 == 3], "each failed one once")
        for r in dead[:5]:
            self.assertEqual((r["pipeline"], r["component"], r["type"]), ("p", "transforms[0]", "map"))
            self.assertEqual(r["reason"], "'w': division by zero")
            self.assertTrue(r["position"].startswith("generated "), r)
            self.assertGreater(r["at_ms"], 0)
        # The cards count them: the map's dead letters since this start, the
        # dead-letter output's writes.
        card = s.card("p", "transforms[0]")
        self.assertGreater(card["dead_letters"], 0, card)
        self.assertEqual(card["dead_letters"], card["errors"])
        dl = s.card("p", "dead_letter")
        self.assertEqual(dl["type"], "file")
        self.assertEqual(dl["messages_out"], card["dead_letters"])
        self.assertEqual(s.get_json("/api/v1/pipelines/p")["config"]["dead_letter"],
                         {"file": {"path": "dead"}})
        self.assertIn('kayak_messages_dead_lettered_total{pipeline="p",component="transforms[0]"',
                      s.get("/metrics")[1])
        self.assertEqual(s.stop(), 0)

    def test_lines_the_input_cannot_decode_go_to_the_dead_letters(self):
        lines, bad = [], []
        for i in range(1, 1001):
            if i % 10 == 7:
                lines.append(f"seq {i} is not JSON")
                bad.append(f"seq {i} is not JSON")
            else:
                lines.append(json.dumps({"seq": i}))
        with open(self.path("in.ndjson"), "w") as f:
            f.write("\n".join(lines) + "\n")
        s = self.start(f"""
pipelines:
  p:
    input: {{file: {{path: {self.path("in.ndjson")}}}}}
    outputs: [{{file: {{path: out}}}}]
    dead_letter: {{file: {{path: dead}}}}
""")
        wait_for(lambda: len(self.rows("dead")) == 100 and len(self.rows("out")) == 900,
                 what="every line in one of the two files")
        dead = self.rows("dead")
        self.assertEqual([r["message_text"] for r in dead], bad, "each bad line once, in order")
        first = dead[0]
        self.assertEqual((first["pipeline"], first["component"], first["type"]),
                         ("p", "input", "file"))
        offset = len("\n".join(lines[:6])) + 1
        self.assertEqual(first["reason"], f"not JSON: {self.path('in.ndjson')} at byte {offset}")
        self.assertEqual(sorted(r["seq"] for r in self.rows("out")),
                         [i for i in range(1, 1001) if i % 10 != 7])
        card = s.card("p", "input")
        self.assertEqual(card["dead_letters"], 100)
        self.assertEqual(card["errors"], 100)
        self.assertIn("sent to the dead letters", card["last_error"])
        self.assertEqual(s.card("p", "dead_letter")["messages_out"], 100)
        self.assertIn('kayak_messages_dead_lettered_total{pipeline="p",component="input",type="file"} 1e+02',
                      s.get("/metrics")[1])

    def test_without_a_dead_letter_a_failure_drops_its_batch_and_bad_ones_are_config_errors(self):
        s = self.start(self.CONFIG.replace("    dead_letter: {file: {path: dead}}\n", ""))
        wait_for(lambda: s.card("p", "transforms[0]")["errors"] > 0, what="a failed batch")
        self.assertEqual(s.card("p", "transforms[0]")["dead_letters"], 0)
        self.assertEqual(s.stop(), 0)
        for bad, want in [("    dead_letter: {fyle: {path: dead}}\n", "unknown output type 'fyle'"),
                          ("    dead_letter: [{file: {path: dead}}]\n", "one-key map")]:
            cfg = self.CONFIG.replace("    dead_letter: {file: {path: dead}}\n", bad)
            with open(self.path("bad.yaml"), "w") as f:
                f.write(cfg)
            r = subprocess.run([os.environ["KAYAK_BIN"], "check", self.path("bad.yaml")],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)
            self.assertRegex(r.stderr, r"bad.yaml:8:\d+: ")
