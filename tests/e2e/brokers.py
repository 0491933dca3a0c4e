"""What the broker tests (test_nats, test_redis, test_mqtt) share: a test
with a config builder, its file output read back, `kayak check` on a config,
and the oracle of brokertool's messages."""
import json
import os
import subprocess

from harness import KAYAK, KayakTest

SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"


def message(seq):
    """What brokertool publishes as message `seq`."""
    return {"seq": seq, "device": f"d{seq % 4}", "value": seq}


def sums(n, start=0):
    """Per device, the sum of `value` over messages start..start+n-1."""
    out = {}
    for i in range(start, start + n):
        m = message(i)
        out[m["device"]] = out.get(m["device"], 0) + m["value"]
    return out


class BrokerTest(KayakTest):
    def setUp(self):
        super().setUp()
        # names unique per test: tests share one server and run in parallel
        self.tag = f"{self.id().split('.')[-1].replace('test_', '')[:30]}_{os.getpid()}"

    def graph(self, input_yaml, outputs=None, transforms="", buckets=""):
        outs = outputs or f"[{{file: {{path: {self.path('out')}}}}}]"
        return (f"{buckets}pipelines:\n  p:\n    input: {input_yaml}\n{transforms}"
                f"    outputs: {outs}\n")

    def out(self, name="out"):
        return [json.loads(l) for l in self.read_output(name)]

    def seqs(self, name="out"):
        return [m["seq"] for m in self.out(name) if "seq" in m]

    def check_config(self, config):
        """`kayak check` on `config`: (exit code, output)."""
        path = self.path("check.yaml")
        with open(path, "w") as f:
            f.write(config)
        r = subprocess.run([KAYAK, "check", "--config", path], capture_output=True, text=True,
                           timeout=30)
        return r.returncode, r.stdout + r.stderr

    def bucket(self, s, name, key):
        return s.get_json(f"/api/v1/buckets/{name}?key={key}")["value"]
