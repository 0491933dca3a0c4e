"""The kit must be able to fail: with one rule broken on purpose in the binary
(KAYAK_MUTATION, src/common/crash_point.h), the kit's kill9 case against the
redis stream input must fail. Run by CTest (`kit_mutation`) with the redis
server the fixtures started.

    ack_on_read  entries are acknowledged (XACK) as soon as they are read,
                 before any checkpoint holds them: a kill -9 loses them
"""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class MutationCheck(unittest.TestCase):
    def run_kit(self, mutation):
        env = dict(os.environ, KAYAK_KIT_ONLY="redis", KAYAK_MUTATION=mutation)
        return subprocess.run(
            [sys.executable, "-m", "unittest", "-v", "test_conformance.ConformanceTest.test_kill9"],
            cwd=HERE, env=env, capture_output=True, text=True, timeout=300)

    def test_the_kit_fails_when_acks_go_out_before_the_checkpoint(self):
        r = self.run_kit("ack_on_read")
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 0, "the kit passed with acks before the checkpoint:\n" + out)
        self.assertIn("connector='redis'", out, out)
        self.assertNotIn("kit: redis kill9: ok", out, out)

    def test_the_same_case_passes_without_the_mutation(self):
        r = self.run_kit("")
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("kit: redis kill9: ok", out, out)


if __name__ == "__main__":
    unittest.main()
