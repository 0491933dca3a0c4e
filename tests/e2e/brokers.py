"""What the broker tests (test_nats, test_redis, test_mqtt) share: a test
with a config builder, its file output read back, `kayak check` on a config,
the oracle of brokertool's messages, and a tls block with a refusal awaited
on a card."""
import json
import os
import subprocess

from harness import KAYAK, KayakTest, wait_for

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

    def tls_block(self, tls_dir, *names, **kw):
        """A `tls` block of tls_ca.py's files in `tls_dir`: "ca", "other_ca",
        "cert" (the client's certificate and key), and any other key as given."""
        keys = {"ca": "ca_file: {}/ca.crt", "other_ca": "ca_file: {}/other-ca.crt",
                "cert": "cert_file: {0}/client.crt, key_file: {0}/client.key"}
        parts = [keys[n].format(tls_dir) for n in names] + [f"{k}: {v}" for k, v in kw.items()]
        return "tls: {" + ", ".join(parts) + "}"

    def assert_refused(self, config, wants, card="input", timeout=30):
        """Runs pipeline p of `config` until its `card` says one of `wants` in
        last_error; nothing may reach the output, and the server must stop
        cleanly (nothing left reporting to a card)."""
        s = self.start(config)
        try:
            wait_for(lambda: any(w in s.card("p", card)["last_error"] for w in wants),
                     timeout=timeout, what=f"{wants} on the card")
        except AssertionError:
            raise AssertionError(f"the card says {s.card('p', card)}") from None
        self.assertEqual(self.out(), [])
        self.assertEqual(s.stop(), 0, s.stderr()[-2000:])
        return s

    def bucket(self, s, name, key):
        return s.get_json(f"/api/v1/buckets/{name}?key={key}")["value"]
