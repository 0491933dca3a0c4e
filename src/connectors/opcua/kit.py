"""The opcua connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import os
import shutil
import subprocess
import tempfile

import tls_ca

from test_conformance import Connector, HERE, KEYS, Subscribed, servers


class OpcuaConnector(Subscribed, Connector):
    """OPC UA data changes from the node-opcua server the fixture started: the
    kit's messages are written by a node-opcua client into Kit.k0 .. Kit.k3
    (seq + 1 into the variable of key k), each write answered before the
    next and a variable's writes paced past the server's sampling interval
    (tests/servers/opcua-write.js), and every variable set back to 0 after a
    write (so the value a new
    subscription first receives is 0, which the shaping drops). Nothing is
    kept for an absent subscriber. A lua step makes each change the kit's
    {k, seq} again."""
    name = "opcua"
    delivery = "none"
    bad_data_elsewhere = ("an OPC UA value is typed (a structure the input does not decode: "
                          "src/connectors/opcua/test_opcua.py)")
    has_server = True
    proxied = True
    SHAPE = ("{lua: {script: 'function process(m) if m.value == 0 then return nil end "
             "return {k = string.sub(m.node, 12), seq = m.value - 1} end'}}")

    def __init__(self, t):
        super().__init__(t)
        self.real = servers.env("opcua")["OPCUA_URL"]
        port = int(self.real.split("://")[1].split("/")[0].rsplit(":", 1)[1])
        self.proxy = servers.Proxy("127.0.0.1", port)
        self.url = f"opc.tcp://127.0.0.1:{self.proxy.port}/UA/kayak"
        here = os.path.join(HERE, "..", "servers")
        self.writer = subprocess.Popen(
            ["node", os.path.join(here, "opcua-write.js"), self.real], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=dict(os.environ, NODE_PATH=os.path.join(here, "npm", "node_modules")))
        assert self.answer() == "ready", "opcua-write.js did not connect"
        self.send([[f"ns=1;s=Kit.k{i}", 0] for i in range(KEYS)])

    def answer(self):
        # node-opcua prints its own warnings on stdout too: skip them
        while True:
            line = self.writer.stdout.readline()
            if not line or line.split(" ", 1)[0].strip() in ("ready", "ok", "error"):
                return line.strip()

    def send(self, pairs):
        self.writer.stdin.write(json.dumps(pairs) + "\n")
        self.writer.stdin.flush()
        answer = self.answer()
        assert answer == "ok", answer

    def input_yaml(self):
        nodes = ", ".join(f"'ns=1;s=Kit.k{i}'" for i in range(KEYS))
        return (f"{{opcua: {{endpoint: '{self.url}', nodes: [{nodes}], sampling_ms: 0, "
                f"publishing_ms: 50, queue_size: 1000, timeout_ms: 2000}}}}")

    def transforms(self):
        return [self.SHAPE]

    def subscribed(self, s):
        return s.card("p", "input")["position"].startswith("subscribed")

    def write(self, s, msgs):
        self.ensure_subscribed(s)
        if msgs:
            touched = sorted({m["k"] for m in msgs})
            self.send([[f"ns=1;s=Kit.{m['k']}", m["seq"] + 1] for m in msgs] +
                      [[f"ns=1;s=Kit.{k}", 0] for k in touched])

    def bad_input_option(self):
        return (f"{{opcua: {{endpoint: '{self.url}', nodes: ['ns=1;q=7']}}}}", "q=7")

    def after_outage(self, s):
        assert "outage" in s.card("p", "input")["position"], s.card("p", "input")["position"]

    ANONYMOUS = "the test server is run for anonymous sessions: no credential to change"
    NO_USER_CERT = ("the suite's server trusts no user certificate (test_opcua.py's servers of "
                    "their own do)")
    tuning_exempt = {"input": {"username": ANONYMOUS, "password": ANONYMOUS,
                               "user_certificate_file": NO_USER_CERT,
                               "user_private_key_file": NO_USER_CERT}}

    def tuning(self, side):
        # Straight to the server, and from SecurityPolicy None to a signed and
        # encrypted channel under a certificate made here, the server's own
        # certificate checked.
        direct = self.url.replace(f":{self.proxy.port}/", f":{self.proxy.target[1]}/")
        self.certs = tempfile.mkdtemp(prefix="kayak-opcua-kit-")
        tls_ca.self_signed("app", "kayak", self.certs, 2048,
                           "subjectAltName=URI:urn:kayak:kit",
                           "keyUsage=critical,digitalSignature,nonRepudiation,keyEncipherment,"
                           "dataEncipherment")
        return {"endpoint": direct,
                "security_policy": "Basic256Sha256", "security_mode": "SignAndEncrypt",
                "certificate_file": os.path.join(self.certs, "app.crt"),
                "private_key_file": os.path.join(self.certs, "app.key"),
                "server_certificate_file": servers.env("opcua")["OPCUA_SERVER_CERT"],
                "sampling_ms": 5, "publishing_ms": 60, "queue_size": 900, "timeout_ms": 2500,
                "batch_size": 800}

    certs = None

    def close(self):
        if self.certs:
            shutil.rmtree(self.certs, ignore_errors=True)
        self.proxy.close()
        self.writer.stdin.close()
        self.writer.wait(timeout=30)


INPUTS = [OpcuaConnector]
OUTPUTS = []
