"""A blocked output stops the input; resident memory stays flat; the memory
budget (memory_limit_bytes) holds the inputs before it is reached."""
import json
import os
import subprocess
import threading
import time

from harness import KayakTest, http, wait_for

PAD = "x" * 400
MIB = 1 << 20


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class BackpressureTest(KayakTest):
    def test_blocked_output_holds_the_input_and_memory_is_flat(self):
        # stdout goes to a pipe that nobody reads: once the pipe is full the
        # output blocks, its queue fills, and the pipeline stops reading.
        s = self.start("""
pipelines:
  fast:
    input: {dummy: {batch_size: 500, template: '{"seq":{{seq}},"pad":"0123456789012345678901234567890123456789"}'}}
    outputs: [{stdout: {}}]
  copy:
    input: {pipeline: fast}
    outputs: [{file: {path: out}}]
""", stdout=subprocess.PIPE)

        def stable():
            a = s.card("fast", "input")["messages_out"]
            time.sleep(0.5)
            b = s.card("fast", "input")["messages_out"]
            return a > 0 and a == b and b

        held = wait_for(stable, timeout=30, what="the input to stop")
        # 8 batches queued in front of stdout + the one being written + the one
        # the pipeline is pushing, and the same for the edge: a few thousand.
        self.assertLess(held, 30 * 500)
        rss_before = rss_kib(s.proc.pid)
        samples = []
        for _ in range(6):
            time.sleep(0.5)
            samples.append(rss_kib(s.proc.pid))
        self.assertEqual(s.card("fast", "input")["messages_out"], held)
        print(f"input held at {held} messages; RSS {rss_before} KiB, then {samples} KiB over 3 s")
        self.assertLess(max(samples) - rss_before, 4 * 1024, f"RSS grew: {rss_before} -> {samples}")
        # The downstream pipeline is held too: it got no more than was read.
        self.assertLessEqual(len(self.read_output("out")), held)
        # Reading stdout releases the whole graph.
        deadline = time.monotonic() + 20
        while s.card("fast", "input")["messages_out"] <= held + 5000:
            self.assertLess(time.monotonic(), deadline, "the input did not resume")
            os.read(s.proc.stdout.fileno(), 1 << 20)
        wait_for(lambda: len(self.read_output("out")) > held, what="downstream resumes")
        s.kill()


class MemoryBudgetTest(KayakTest):
    def memory(self, s):
        return s.get_json("/api/v1/overview")["memory"]

    def test_the_budget_holds_the_input_before_the_queues_fill(self):
        # An output nobody reads: without a budget its queue fills (8
        # batches of ~270 KB here); with 1 MiB the input waits at 90% of it.
        count = 20000
        s = self.start(f"""
pipelines:
  fast:
    input: {{dummy: {{batch_size: 500, count: {count}, template: '{{"seq":{{{{seq}}}},"pad":"{PAD}"}}'}}}}
    outputs: [{{stdout: {{}}}}]
""", server_config=f"listen: 127.0.0.1:0\nmemory_limit_bytes: {MIB}\n", stdout=subprocess.PIPE)
        m = wait_for(lambda: (lambda m: m if m["inputs_waiting"] == 1 else None)(self.memory(s)),
                     what="the input to wait for the budget")
        self.assertEqual(m["limit_bytes"], MIB)
        self.assertEqual(m["high_water_bytes"], int(MIB * 0.9))
        self.assertTrue(m["exceeded"])
        self.assertGreaterEqual(m["pauses"], 1)
        # Past the high-water mark by what one batch brings at most.
        self.assertGreaterEqual(m["used_bytes"], m["high_water_bytes"])
        self.assertLess(m["used_bytes"], MIB + 400 * 1024, m)
        self.assertEqual((m["top"][0]["pipeline"], m["top"][0]["component"], m["top"][0]["kind"]),
                         ("fast", "outputs[0]", "queue"), m)
        p = s.get_json("/api/v1/pipelines/fast")
        self.assertTrue(p["memory_paused"])
        out = [c for c in p["components"] if c["name"] == "outputs[0]"][0]
        self.assertGreater(out["memory_bytes"], 0)
        depth = [q["depth"] for q in p["queues"] if q["name"] == "outputs[0]"][0]
        self.assertLess(depth, 8, "the queue filled: the budget did not hold the input")
        status, body = s.get("/ready")
        self.assertEqual(status, 503)
        reason = [r for r in json.loads(body)["reasons"] if r["reason"].startswith("memory")][0]
        self.assertEqual(reason["most_in"]["component"], "outputs[0]")
        _, metrics = s.get("/metrics")
        self.assertIn(f"kayak_memory_limit_bytes {MIB}", metrics)
        self.assertRegex(metrics, r'kayak_memory_bytes\{pipeline="fast",component="outputs\[0\]",'
                                  r'kind="queue"\} [1-9]')
        self.assertIn("kayak_memory_inputs_waiting 1", metrics)
        self.assertIn("waits: the memory budget is", s.stderr())
        # Read stdout: everything comes, in order, none twice, and the input
        # no longer waits.
        lines = []

        def drain():
            buf = b""
            while len(lines) < count:
                chunk = os.read(s.proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    return
                buf += chunk
                *whole, buf = buf.split(b"\n")
                lines.extend(whole)
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        reader.join(timeout=60)
        self.assertEqual([json.loads(l)["seq"] for l in lines], list(range(1, count + 1)))
        m = wait_for(lambda: (lambda m: m if m["inputs_waiting"] == 0 else None)(self.memory(s)),
                     what="the input to stop waiting")
        self.assertFalse(s.get_json("/api/v1/pipelines/fast")["memory_paused"])
        s.kill()

    def test_state_past_the_budget_holds_the_input_until_it_expires(self):
        # Every message a new key: the window's state grows until the input
        # waits; once the keys expire (idle 2 s) it reads again. Meanwhile an
        # http input refuses posts with 503.
        s = self.start("""
pipelines:
  keys:
    input: {dummy: {batch_size: 200}}
    transforms:
      - rolling_window: {key: seq, field: seq, window_messages: 1, idle_timeout_secs: 2}
      - filter: 'seq < 0'
    outputs: [{file: {path: none}}]
  posts:
    input: {http: {path: /in}}
    outputs: [{file: {path: posts}}]
""", server_config=f"listen: 127.0.0.1:0\nmemory_limit_bytes: {MIB}\n")
        m = wait_for(lambda: (lambda m: m if m["inputs_waiting"] >= 1 else None)(self.memory(s)),
                     what="the input to wait for the budget")
        top = m["top"][0]
        self.assertEqual((top["pipeline"], top["component"], top["kind"]),
                         ("keys", "transforms[0]", "state"), m)
        self.assertGreater(top["bytes"], MIB // 2)
        window = s.card("keys", "transforms[0]")
        self.assertGreater(window["memory_bytes"], MIB // 2)

        def refused():
            status, _, text = http("POST", s.url + "/in", b'{"a":1}')
            return status == 503 and "memory budget" in text and text
        wait_for(refused, what="a post refused for the budget")
        # The input holds until the keys expire (2 s after they were
        # written), then the state shrinks and it reads again; never far
        # past the limit meanwhile.
        held = s.card("keys", "input")["messages_out"]
        held_at = time.monotonic()
        highest = 0

        def read_again():
            nonlocal highest
            highest = max(highest, self.memory(s)["used_bytes"])
            return s.card("keys", "input")["messages_out"] > held
        wait_for(read_again, timeout=30, what="the input to read again after the keys expired")
        self.assertGreater(time.monotonic() - held_at, 0.5, "the input did not wait for the expiry")
        wait_for(lambda: self.memory(s)["pauses"] >= 3, timeout=30, what="more waits")
        self.assertLess(highest, MIB + 256 * 1024)
        s.kill()


if __name__ == "__main__":
    import unittest
    unittest.main()
