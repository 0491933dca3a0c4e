"""Checkpoints with --state-dir: kill -9 and graceful restarts against an uninterrupted run."""
import json
import os
import random
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
"""


def oracle_sums():
    sums, counts = {}, {}
    for i in range(N):
        k = f"k{i % KEYS}"
        sums[k] = sums.get(k, 0) + (i * 7919) % 101
        counts[k] = counts.get(k, 0) + 1
    return sums, counts


SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 30}\n"


class CheckpointTest(KayakTest):
    def setUp(self):
        super().setUp()
        with open(self.path("in.ndjson"), "w") as f:
            for i in range(N):
                f.write(json.dumps({"seq": i, "k": f"k{i % KEYS}", "v": (i * 7919) % 101}) + "\n")
        self.src = self.path("in.ndjson")

    def finished(self, s, out="out"):
        """The input read everything and the last pipeline's file holds every message."""
        return s.card("readings", "input")["state"] == "finished" and \
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
        wait_for(lambda: self.committed(s) > 0, timeout=30, what="a commit")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=10)
        before = self.read_bytes("out")
        s = self.start(pipelines(self.src, self.path("out"), slow=1), server_config=SERVER,
                       state_dir=state)
        wait_for(lambda: self.committed(s) > 0, timeout=30, what="a commit after restart")
        self.assertEqual(s.card("readings", "input")["messages_out"], 0)
        self.assertEqual(s.stop(), 0)
        self.assertEqual(self.read_bytes("out"), before)


if __name__ == "__main__":
    import unittest
    unittest.main()
