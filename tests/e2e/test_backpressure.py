"""A blocked output stops the input; resident memory stays flat."""
import os
import subprocess
import time

from harness import KayakTest, wait_for


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


if __name__ == "__main__":
    import unittest
    unittest.main()
