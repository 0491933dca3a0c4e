"""The conformance kit's fault cases (docs/connectors.md), against every
connector that provides what a case needs (test_conformance.py describes the
connectors and the cases):

  cut_mid_batch      connectors behind the fault proxy (`proxied`)
  transient_refusal  connectors with a refusal switch (`refusals`, refuse(on))
  no_orphans         connectors that open sessions on the server (`sessions`,
                     open_sessions())
"""
import json
import random
import time
import unittest

import test_conformance as kit
from test_conformance import INPUTS, OUTPUTS, SERVER, message, report
from harness import committed, wait_for  # noqa: E402 (tests/e2e, on the path test_conformance set)


class FaultKitTest(kit.KitCase):
    # ---- the connection cut while a batch is in flight ----
    @staticmethod
    def cut_mid_batch(proxy):
        """The server's answers lost for a moment (requests arrive, their replies
        do not), then every connection cut; the proxy listens again at once."""
        proxy.hold_replies()
        time.sleep(random.uniform(0.05, 0.3))  # the fault lands anywhere in a batch
        proxy.cut()
        proxy.restore()

    def test_cut_mid_batch(self):
        for cls in [c for c in INPUTS if c.proxied]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-cut")
                c = self.connector(cls)
                proxy = c.proxy
                cfg = self.graph(c.input_yaml(), with_bucket=True, shape=c.transforms())
                s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
                want = self.expected(c)
                chunks = [want[i:i + 25] for i in range(0, len(want), 25)]
                cuts = set(random.sample(range(len(chunks) - 1), 3))
                for i, chunk in enumerate(chunks):
                    c.write(s, chunk)
                    if i in cuts:
                        self.cut_mid_batch(proxy)
                lines = lambda: [json.loads(l) for l in self.read_output("out")]  # noqa: E731
                keys = sorted({m["k"] for m in want})
                if c.delivery != "none":
                    wait_for(lambda: len({m["seq"] for m in lines()}) >= len(want), timeout=60,
                             what=f"{cls.name}: every message after the cuts")
                    self.assert_bucket_exact(s, want, cls.name)
                    what = f"3 cuts mid-batch, {len(want)} messages, bucket exact"
                else:
                    # what was sent while the link was down is gone; once it is back,
                    # what is written arrives, and the bucket agrees with the output
                    wait_for(lambda: s.card("p", "input")["state"] == "running", timeout=40,
                             what=f"{cls.name}: running again")
                    c._ready_for = None
                    after = [message(i) for i in range(len(want), len(want) + 20)]
                    c.write(s, after)
                    wait_for(lambda: {m["seq"] for m in after} <= {m["seq"] for m in lines()},
                             timeout=30, what=f"{cls.name}: what was written after the cuts")
                    c0 = committed(s)
                    wait_for(lambda: committed(s) >= c0 + 2, timeout=30,
                             what=f"{cls.name}: checkpoints after the last write")
                    self.assertEqual(sum(self.bucket_counts(s, keys).values()), len(lines()),
                                     "the bucket and the output disagree")
                    lost = len(want) - len({m["seq"] for m in lines()} - {m["seq"] for m in after})
                    what = (f"3 cuts mid-batch, {lost} of {len(want)} lost to the cuts, "
                            "bucket = output, what came after delivered")
                self.assertIsNone(s.proc.poll(), "the server stopped")
                s.stop()
                report(cls.name, "cut_mid_batch", what)
        for cls in [c for c in OUTPUTS if c.proxied]:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-cut-out")
                c = self.connector(cls)
                proxy = c.proxy
                s, d = self.start_fed_output(c)
                for _ in range(3):
                    time.sleep(random.uniform(0.2, 0.5))
                    self.cut_mid_batch(proxy)
                self.finish_fed_output(s, c, d, "at least once")
                report(cls.name, "cut_mid_batch (output)",
                       f"3 cuts mid-batch: all {self.N} messages in the sink")

    # ---- a server that refuses for a while ----
    def test_transient_refusal(self):
        for cls in [c for c in INPUTS if c.refusals and c.delivery != "none"]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-refuse")
                c = self.connector(cls)
                c.use_credential(0)
                cfg = self.graph(c.input_yaml(), with_bucket=True, shape=c.transforms())
                s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
                want = self.expected(c)
                half = len(want) // 2
                seqs = lambda: {m["seq"] for m in map(json.loads, self.read_output("out"))}  # noqa: E731
                c.write(s, want[:half])
                wait_for(lambda: len(seqs()) >= half, timeout=30, what=f"{cls.name}: before")
                c.refuse(True)
                c.write(s, want[half:])
                wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                         what=f"{cls.name}: retrying shown")
                c.refuse(False)
                wait_for(lambda: len(seqs()) >= len(want), timeout=60,
                         what=f"{cls.name}: every message after the refusal")
                self.assert_bucket_exact(s, want, cls.name)
                s.stop()
                report(cls.name, "transient_refusal", f"retrying shown, {len(want)} of "
                                                      f"{len(want)} delivered, bucket exact")
        for cls in [c for c in OUTPUTS if c.refusals]:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-refuse-out")
                c = self.connector(cls)
                c.use_credential(0)
                s, d = self.start_fed_output(c)
                wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= self.N // 4,
                         timeout=60, what=f"{cls.name}: a quarter out")
                c.refuse(True)
                wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", timeout=30,
                         what=f"{cls.name} output: retrying shown")
                c.refuse(False)
                self.finish_fed_output(s, c, d, "after the refusal")
                report(cls.name, "transient_refusal (output)",
                       f"retrying shown, all {self.N} messages in the sink")

    # ---- nothing left open on the server ----
    def test_no_orphans(self):
        for cls in [c for c in OUTPUTS if c.sessions == "output"]:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-orphans-out")
                c = self.connector(cls)
                d = kit.DummyConnector(self, count=self.N)
                slow = d.input_yaml().replace("rate_per_sec: 400", "rate_per_sec: 100")
                cfg = self.graph(slow, c.session_output_yaml())
                s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
                for _ in range(3):  # killed while it writes, sessions open
                    wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] > 0, timeout=60,
                             what=f"{cls.name}: messages out")
                    time.sleep(random.uniform(0.3, 1.0))
                    s.kill()
                    s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
                self.finish_fed_output(s, c, d, "after the kills")
                wait_for(lambda: c.open_sessions() == [], timeout=30,
                         what=f"{cls.name} output: nothing left open")
                report(cls.name, "no_orphans (output)",
                       f"3 kills and a stop: all {self.N} messages in the sink, nothing left open")
        for cls in [c for c in INPUTS if c.sessions == "input"]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-orphans")
                c = self.connector(cls)
                cfg = self.graph(c.input_yaml(), with_bucket=True, shape=c.transforms())
                want = self.expected(c)
                s = self.write_with_kills(c, cfg, self.path("state"), want)
                seqs = lambda: {m["seq"] for m in map(json.loads, self.read_output("out"))}  # noqa: E731
                wait_for(lambda: len(seqs()) >= len(want), timeout=60,
                         what=f"{cls.name}: every message after the kills")
                s.stop()
                self.assertEqual(c.open_sessions(), [])
                report(cls.name, "no_orphans", f"3 kills and a stop: {len(want)} messages, "
                                               "nothing left open")


if __name__ == "__main__":
    unittest.main()
