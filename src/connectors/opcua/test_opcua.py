"""The opcua input against a real OPC UA server (node-opcua, started once per
run by the CTest fixture; tests that kill or change the server start their
own): four changing variables in order with their timestamps, every built-in
type the input decodes, a structure value as an error on the card, a login,
the server killed and started again, a server that stops answering, kill -9
of kayak with a state dir, and start errors that name their cause. Under
each security policy and mode: the same data signed and encrypted, the
server's certificate checked, kayak's certificate refused by a server that
does not trust it, logins by password and by user certificate, renewals
with a 4096-bit key."""
import os
import signal
import subprocess
import tempfile
import time
import unittest

import servers

import tls_ca
from brokers import SERVER, BrokerTest
from harness import wait_for
from servers import Proxy, env, port_of

SERVERS_SH = os.path.join(os.path.dirname(os.path.abspath(servers.__file__)), "..", "servers",
                          "servers.sh")
PLANT = ["ns=1;s=Plant.Counter", "ns=1;s=Plant.Level", "ns=1;s=Plant.Temperature",
         "ns=1;s=Plant.Status"]


def opcua_url():
    return env("opcua")["OPCUA_URL"]


def start_server(directory, port=None, args=""):
    """A private node-opcua server (servers.sh); its URL."""
    e = dict(os.environ, OPCUA_ARGS=args)
    if port:
        e["OPCUA_PORT"] = str(port)
    subprocess.run([SERVERS_SH, "start", "opcua", directory], check=True, env=e, timeout=120)
    with open(os.path.join(directory, "env")) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line)["OPCUA_URL"]


def stop_server(directory):
    subprocess.run([SERVERS_SH, "stop", "opcua", directory], check=False, timeout=120)


def port_of_opc(url):
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


class DropOnePublish(Proxy):
    """A fault-injecting proxy (servers.Proxy) in front of an OPC UA server
    that reads the server's answers chunk by chunk and drops one
    PublishResponse carrying data (the tenth), as if it had been lost. It
    also counts the client's RepublishRequests."""
    PUBLISH_RESPONSE = bytes([1, 0]) + (829).to_bytes(2, "little")
    REPUBLISH_REQUEST = bytes([1, 0]) + (832).to_bytes(2, "little")

    def __init__(self, port):
        self.dropped = 0
        self.republished = 0
        super().__init__("127.0.0.1", port)

    @staticmethod
    def _chunks(sock):
        buf = b""
        while True:
            data = sock.recv(65536)
            if not data:
                return
            buf += data
            while len(buf) >= 8 and len(buf) >= int.from_bytes(buf[4:8], "little"):
                size = int.from_bytes(buf[4:8], "little")
                yield buf[:size]
                buf = buf[size:]

    def _pipe(self, a, b, replies, hung=False):
        seen = 0
        try:
            for chunk in self._chunks(a):
                payload = chunk[24:] if chunk[:3] == b"MSG" else b""
                if replies and payload.startswith(self.PUBLISH_RESPONSE) and len(payload) > 80:
                    seen += 1
                    if seen == 10 and self.dropped == 0:
                        self.dropped += 1
                        continue
                if not replies and payload.startswith(self.REPUBLISH_REQUEST):
                    self.republished += 1
                if not hung:
                    b.sendall(chunk)
        except OSError:
            pass
        self.hang_up(a, b)


class Recording(Proxy):
    """A proxy (servers.Proxy) that keeps every byte the client sends."""

    def __init__(self, port):
        self.sent = bytearray()
        super().__init__("127.0.0.1", port)

    def _pipe(self, a, b, replies, hung=False):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if not replies:
                    with self.lock:
                        self.sent += data
                b.sendall(data)
        except OSError:
            pass
        self.hang_up(a, b)


class OpcuaBase(BrokerTest):
    def opcua_input(self, nodes, url=None, extra=""):
        quoted = ", ".join(f"'{n}'" for n in nodes)
        return (f"{{opcua: {{endpoint: '{url or opcua_url()}', nodes: [{quoted}]"
                f"{', ' + extra if extra else ''}}}}}")

    def by_node(self, name="out"):
        out = {}
        for m in self.out(name):
            out.setdefault(m["node"], []).append(m)
        return out

    def setUp(self):
        super().setUp()
        self.private = []

    def tearDown(self):
        # Before the work directory goes (the base class's tearDown): a
        # server's pid file is in it, and stopping it needs the file (a
        # cleanup would run after and find nothing: the server would live on).
        for d in self.private:
            stop_server(d)
        super().tearDown()

    def private_server(self, name, port=None, args=""):
        d = self.path(name)
        self.private.append(d)
        url = start_server(d, port, args)
        return d, url


class OpcuaTest(OpcuaBase):
    def test_four_variables_arrive_in_order_with_their_timestamps(self):
        s = self.start(self.graph(self.opcua_input(
            PLANT, extra="sampling_ms: 50, publishing_ms: 200, queue_size: 20")))
        wait_for(lambda: len(self.by_node().get(PLANT[0], [])) >= 20, timeout=30,
                 what="20 changes of the counter")
        self.assertIn("subscribed to 4 nodes", s.card("p", "input")["position"])
        s.stop()
        got = self.by_node()
        self.assertEqual(set(got), set(PLANT))
        for node, msgs in got.items():
            for m in msgs:
                self.assertEqual(m["status"], "Good", m)
                self.assertRegex(m["source_ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3,7}Z$")
                self.assertIn("server_ts", m)
            stamps = [m["source_ts"] for m in msgs]
            self.assertEqual(stamps, sorted(stamps), node)
        counter = [m["value"] for m in got[PLANT[0]]]
        # Every change, in order: the server's queue (20) outlasts a publish.
        self.assertEqual(counter, list(range(counter[0], counter[0] + len(counter))))
        level = [m["value"] for m in got[PLANT[1]]]
        self.assertEqual(level[:len(counter)], [-c for c in counter][:len(level)])
        self.assertTrue(all(isinstance(m["value"], float) for m in got[PLANT[2]]))
        self.assertTrue(set(m["value"] for m in got[PLANT[3]]) <=
                        {"IDLE", "RUNNING", "STOPPED"})

    def test_every_built_in_type_and_a_structure_as_an_error(self):
        want = {
            "Boolean": True, "SByte": -5, "Int16": -12345, "UInt64": 18446744073709551615,
            "Int64": -8589934591, "Float": 1.5, "String": "Grüße \u2603 \"quoted\"",
            "DateTime": "2026-01-02T03:04:05.678Z",
            "Guid": "72962B91-FA75-4AE6-8D28-B404DC7DAF63", "ByteString": "AAEC+v8=",
            "LocalizedText": "Pump 1", "QualifiedName": "1:Valve",
            "NodeId": "ns=1;s=Plant.Counter", "StatusCode": "BadDeviceFailure",
            "Int32Array": [1, -2, 3], "StringArray": ["a", "b"],
        }
        nodes = [f"ns=1;s=Types.{t}" for t in want] + ["i=2256"]  # ServerStatus: a structure
        s = self.start(self.graph(self.opcua_input(nodes, extra="publishing_ms: 100")))
        wait_for(lambda: len(self.by_node()) >= len(want), timeout=30, what="every type")
        wait_for(lambda: s.card("p", "input")["errors"] >= 1, what="the structure's error")
        got = self.by_node()
        for t, value in want.items():
            self.assertEqual(got[f"ns=1;s=Types.{t}"][0]["value"], value, t)
        self.assertNotIn("i=2256", got)
        card = s.card("p", "input")
        self.assertIn("i=2256", card["last_error"])
        self.assertIn("ExtensionObject", card["last_error"])
        self.assertEqual(card["state"], "running")

    def test_three_thousand_variables_in_answers_of_many_chunks(self):
        # 3,000 items: six CreateMonitoredItems calls, and Publish answers of
        # hundreds of kilobytes, which arrive in many chunks of at most 64 KiB.
        # The variables change once a second, which a loaded machine's Node
        # server keeps up with.
        d, url = self.private_server("many", args="--items 3000 --bench-ms 1000")
        nodes = [f"ns=1;s=Bench.V{i}" for i in range(3000)]
        s = self.start(self.graph(self.opcua_input(
            nodes, url=url, extra="sampling_ms: 500, publishing_ms: 1000")))
        wait_for(lambda: len(self.by_node()) == 3000, timeout=120, what="every variable")
        n = len(self.out())
        wait_for(lambda: len(self.out()) >= n + 3000, timeout=120, what="another round")
        s.stop()
        got = self.by_node()
        self.assertEqual(len(got), 3000)
        # Each variable's values rise in steps of 1 (V<i> = tick + i / 1000).
        for node in (nodes[0], nodes[1234], nodes[2999]):
            ticks = [round(m["value"] - int(node.rsplit("V", 1)[1]) / 1000) for m in got[node]]
            self.assertEqual(ticks, sorted(set(ticks)), node)

    def test_a_user_logs_in_with_a_password_the_server_asked_to_encrypt(self):
        s = self.start(self.graph(self.opcua_input(
            PLANT[:1], extra="username: kayak, password: '${OPCUA_TEST_PASSWORD}'")),
            env={"OPCUA_TEST_PASSWORD": "kayak-pass"})
        wait_for(lambda: len(self.out()) >= 3, timeout=30, what="changes after a login")
        # The password never shows.
        config = s.get_json("/api/v1/pipelines/p")
        self.assertNotIn("kayak-pass", str(config))

    def test_start_errors_name_their_cause(self):
        d, secure_url = self.private_server("secure", args="--secure-only")
        cases = [
            (self.opcua_input(PLANT[:1], url=secure_url), "offers no endpoint with SecurityPolicy None"),
            (self.opcua_input(PLANT[:1], extra="username: kayak, password: wrong"),
             "refused the login of user 'kayak'"),
            (self.opcua_input(PLANT[:1] + ["ns=1;s=Plant.Nope"]), "ns=1;s=Plant.Nope: BadNodeIdUnknown"),
        ]
        for config, want in cases:
            with self.subTest(want=want):
                s = self.start(self.graph(config))
                wait_for(lambda: s.card("p", "input")["state"] == "failed", timeout=30,
                         what="the input failed")
                self.assertIn(want, s.card("p", "input")["last_error"])
                s.stop()

    def test_the_server_killed_and_started_again(self):
        d, url = self.private_server("plc")
        port = port_of_opc(url)
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url,
                                                   extra="publishing_ms: 100")),
                       server_config=SERVER)
        wait_for(lambda: len(self.out()) >= 5, timeout=30, what="changes before the kill")
        with open(os.path.join(d, "pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                 what="retrying while the server is down")
        self.assertIn("opcua input", s.card("p", "input")["last_error"])
        before = len(self.out())
        start_server(d, port)
        # The new server counts from 1 again; the input subscribed anew.
        wait_for(lambda: len(self.out()) >= before + 5, timeout=60, what="changes after the restart")
        after = [m["value"] for m in self.out()[before:]]
        self.assertEqual(after, sorted(after))
        self.assertLess(after[0], 100)
        wait_for(lambda: s.card("p", "input")["state"] == "running", what="running again")
        self.assertRegex(s.card("p", "input")["position"],
                         r"resubscribed after an outage of \d+ ms")

    def test_the_secure_channel_is_renewed_before_its_token_runs_out(self):
        # A server whose tokens last 1.5 s closes a channel not renewed in time;
        # over 6 s the input must renew four times and never lose the connection.
        d, url = self.private_server("short-tokens", args="--token-ms 1500")
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url,
                                                   extra="publishing_ms: 100")),
                       server_config=SERVER)
        wait_for(lambda: len(self.out()) >= 3, timeout=30, what="the first changes")
        n = len(self.out())
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:  # the card watched for 6 s
            card = s.card("p", "input")
            self.assertEqual(card["state"], "running", card)
            self.assertEqual(card["errors"], 0, card)
            time.sleep(0.2)
        self.assertNotIn("outage", s.card("p", "input")["position"])
        counter = [m["value"] for m in self.out()]
        self.assertGreaterEqual(len(counter), n + 40)  # 10 a second went on arriving
        # In order and none twice. A value may be missing: the server samples
        # the counter, and a loaded machine can delay a sample past two of
        # its changes (a CI run lost one at the start); an outage shows above.
        self.assertEqual(counter, sorted(set(counter)))

    def test_a_lost_publish_answer_is_asked_for_again(self):
        proxy = DropOnePublish(port_of_opc(opcua_url()))
        self.addCleanup(proxy.close)
        url = f"opc.tcp://127.0.0.1:{proxy.port}/UA/kayak"
        # Sampled five times per change of the counter (every 100 ms): a busy
        # machine's late sample still sees each value, so a gap is a loss.
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url,
                                                   extra="sampling_ms: 20, publishing_ms: 100, "
                                                         "queue_size: 20")))
        wait_for(lambda: proxy.dropped == 1 and len(self.out()) >= 25, timeout=30,
                 what="an answer dropped, and changes after it")
        self.assertEqual(proxy.republished, 1)
        counter = [m["value"] for m in self.out()]
        # Nothing missing, nothing twice, in order: the dropped message came
        # back through Republish before the one after it was handed on.
        self.assertEqual(counter, list(range(counter[0], counter[0] + len(counter))))
        self.assertEqual(s.card("p", "input")["state"], "running")

    def test_a_server_that_stops_answering_is_left_and_found_again(self):
        proxy = Proxy("127.0.0.1", port_of_opc(opcua_url()))
        self.addCleanup(proxy.close)
        url = f"opc.tcp://127.0.0.1:{proxy.port}/UA/kayak"
        s = self.start(self.graph(self.opcua_input(
            PLANT[:1], url=url, extra="publishing_ms: 100, timeout_ms: 1000")), server_config=SERVER)
        wait_for(lambda: len(self.out()) >= 3, timeout=30, what="changes")
        proxy.hold_replies()  # the connection stays up; nothing comes back
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=30,
                 what="the silence noticed")
        self.assertIn("keep-alive", s.card("p", "input")["last_error"])
        proxy.cut()
        proxy.restore()
        n = len(self.out())
        wait_for(lambda: len(self.out()) >= n + 3, timeout=60, what="changes again")

    def test_kill_9_keeps_state_and_output_in_step(self):
        # A running count per node in a bucket, written into each message:
        # after kill -9 and a restart, the output must hold each count once.
        config = ("buckets:\n  seen: {idle_timeout_secs: 3600}\n" + self.graph(
            self.opcua_input(PLANT[:2], extra="publishing_ms: 100"),
            transforms=("    transforms:\n"
                        "      - bucket: {name: seen, key: node, op: count, as: n}\n")))
        state = self.path("state")
        s = self.start(config, state_dir=state, server_config=SERVER)
        wait_for(lambda: len(self.out()) >= 30, timeout=30, what="changes")
        wait_for(lambda: s.get_json("/api/v1/checkpoints")["regions"][0]["committed"] >= 2,
                 timeout=30, what="checkpoints")
        # Kill between checkpoints, with output past the last one.
        n = len(self.out())
        wait_for(lambda: len(self.out()) >= n + 4, timeout=30, what="output past the checkpoint")
        s.kill()
        s2 = self.start(config, state_dir=state, server_config=SERVER)
        n = len(self.out())
        wait_for(lambda: len(self.out()) >= n + 20, timeout=30, what="changes after the restart")
        s2.stop()
        for node, msgs in self.by_node().items():
            counts = [m["n"] for m in msgs]
            self.assertEqual(counts, list(range(1, len(counts) + 1)), node)

    def test_the_browser_lists_the_nodes_and_their_values(self):
        from harness import KAYAK
        r = subprocess.run([KAYAK, "tool", "opcua", opcua_url(), "--depth", "2"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "i=85")
        plant = [l for l in lines if l.strip().startswith("ns=1;s=Plant.Counter ")]
        self.assertEqual(len(plant), 1, r.stdout)
        self.assertRegex(plant[0], r'^    ns=1;s=Plant\.Counter  Variable  1:Counter  \{"value":\d+,"status":"Good"')
        self.assertTrue(any("1:Plant" in l and "Object" in l for l in lines))
        # A login, from the environment; and the errors, on stderr with exit codes.
        r = subprocess.run([KAYAK, "tool", "opcua", opcua_url(), "--node", "ns=1;s=Plant.Counter",
                            "--username", "kayak"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, KAYAK_OPCUA_PASSWORD="kayak-pass"))
        self.assertEqual((r.returncode, r.stdout), (0, "ns=1;s=Plant.Counter\n"), r.stderr)
        r = subprocess.run([KAYAK, "tool", "opcua", opcua_url(), "--node", "ns=1;s=Plant.Counter",
                            "--username", "kayak"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, KAYAK_OPCUA_PASSWORD="wrong"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("refused the login", r.stderr)
        r = subprocess.run([KAYAK, "tool", "opcua", "opc.tcp://127.0.0.1:1/x"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot connect", r.stderr)
        r = subprocess.run([KAYAK, "tool", "opcua", "--depth", "0"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        r = subprocess.run([KAYAK, "tool"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0)
        self.assertIn("kayak tool opcua ENDPOINT", r.stdout)
        r = subprocess.run([KAYAK, "tool", "file"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("has a helper", r.stderr)

    def test_options_that_do_not_fit(self):
        for inp, want in [
            (self.opcua_input(["ns=1;x=1"]), "expected i=, s=, g= or b="),
            (self.opcua_input(PLANT, url="http://127.0.0.1:1/"), "opc.tcp://"),
            (self.opcua_input(PLANT, extra="password: x"), "a password needs a username"),
            (self.opcua_input(PLANT, extra="queue_size: 0"), "queue_size"),
        ]:
            with self.subTest(want=want):
                code, text = self.check_config(self.graph(inp))
                self.assertNotEqual(code, 0)
                self.assertIn(want, text)


OPCUA_KEY_USAGE = "keyUsage=critical,digitalSignature,nonRepudiation,keyEncipherment,dataEncipherment"


def opcua_certs(d):
    """RSA certificates for the security tests, in `d`: app (kayak's, with
    its application URI), big (the same with a 4096-bit key), user (a user
    certificate), nouri (no URI), small (1024 bits), and for servers of their
    own a CA (ca) with server (valid) and expired."""
    uri = "subjectAltName=URI:urn:kayak:test,DNS:localhost"
    tls_ca.self_signed("app", "kayak", d, 2048, uri, OPCUA_KEY_USAGE)
    tls_ca.self_signed("big", "kayak", d, 4096, uri, OPCUA_KEY_USAGE)
    tls_ca.self_signed("user", "operator", d, 2048, "keyUsage=critical,digitalSignature")
    tls_ca.self_signed("nouri", "kayak", d, 2048, OPCUA_KEY_USAGE)
    tls_ca.self_signed("small", "kayak", d, 1024, uri, OPCUA_KEY_USAGE)
    tls_ca.authority("ca", "kayak OPC UA test CA", d, 2048)
    ext = ("subjectAltName=URI:urn:kayak:test-server,DNS:localhost,IP:127.0.0.1\n" +
           OPCUA_KEY_USAGE)
    tls_ca.signed("server", "localhost", d, "200101000000Z", "491231000000Z", ext, rsa_bits=2048)
    tls_ca.signed("expired", "localhost", d, "200101000000Z", "200102000000Z", ext, rsa_bits=2048)
    return d


class OpcuaSecurityTest(OpcuaBase):
    POLICIES = ["Basic256Sha256", "Aes128_Sha256_RsaOaep", "Aes256_Sha256_RsaPss"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._certs = tempfile.TemporaryDirectory(prefix="kayak-opcua-certs-")
        cls.certs = opcua_certs(cls._certs.name)

    @classmethod
    def tearDownClass(cls):
        cls._certs.cleanup()
        super().tearDownClass()

    def secure(self, policy="Basic256Sha256", mode="SignAndEncrypt", cert="app", extra=""):
        c = self.certs
        return (f"security_policy: {policy}, security_mode: {mode}, "
                f"certificate_file: {c}/{cert}.crt, private_key_file: {c}/{cert}.key"
                + (", " + extra if extra else ""))

    def test_every_policy_and_mode_carries_the_data_with_the_server_checked(self):
        # One pipeline per policy and mode, each logging in with a password
        # (encrypted under the policy) and checking the server's certificate.
        server_cert = env("opcua")["OPCUA_SERVER_CERT"]
        names, pipelines = [], []
        for policy in self.POLICIES:
            for mode in ("Sign", "SignAndEncrypt"):
                name = f"{policy}_{mode}".lower()
                names.append(name)
                extra = (f"server_certificate_file: {server_cert}, username: kayak, "
                         f"password: kayak-pass, publishing_ms: 100")
                pipelines.append(
                    f"  {name}:\n    input: {self.opcua_input(PLANT[:1], extra=self.secure(policy, mode, extra=extra))}\n"
                    f"    outputs:\n      - file: {{path: {self.path(name)}}}\n")
        s = self.start("pipelines:\n" + "".join(pipelines))
        for name in names:
            wait_for(lambda: len(self.out(name)) >= 10, timeout=60, what=f"changes over {name}")
        cards = {n: s.card(n, "input") for n in names}
        s.stop()
        thumbprint = subprocess.run(
            ["openssl", "x509", "-in", server_cert, "-noout", "-fingerprint", "-sha1"],
            capture_output=True, text=True, check=True).stdout.split("=", 1)[1].strip()
        thumbprint = thumbprint.replace(":", "").lower()
        for policy in self.POLICIES:
            for mode in ("Sign", "SignAndEncrypt"):
                name = f"{policy}_{mode}".lower()
                with self.subTest(name):
                    counter = [m["value"] for m in self.out(name)]
                    self.assertEqual(counter, sorted(set(counter)))
                    self.assertEqual(cards[name]["errors"], 0, cards[name])
                    self.assertIn(f"{policy}/{mode}, server certificate SHA-1 {thumbprint} "
                                  "(verified)", cards[name]["position"])

    def test_sign_and_encrypt_hides_what_sign_shows(self):
        # The bytes kayak sends, seen by a proxy: under SignAndEncrypt the
        # node it subscribes to (in CreateMonitoredItems) never shows; under
        # Sign it travels in clear. The password is encrypted in both.
        proxy = Recording(port_of_opc(opcua_url()))
        self.addCleanup(proxy.close)
        url = f"opc.tcp://127.0.0.1:{proxy.port}/UA/kayak"
        for mode, visible in (("SignAndEncrypt", False), ("Sign", True)):
            with self.subTest(mode=mode):
                with proxy.lock:
                    proxy.sent.clear()
                n = len(self.out())
                s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url, extra=self.secure(
                    mode=mode, extra="username: kayak, password: kayak-pass, publishing_ms: 100"))))
                wait_for(lambda: len(self.out()) >= n + 3, timeout=30, what="changes")
                self.assertEqual(s.stop(), 0)
                with proxy.lock:
                    sent = bytes(proxy.sent)
                self.assertEqual(b"Plant.Counter" in sent, visible)
                self.assertNotIn(b"kayak-pass", sent)

    def test_a_server_that_trusts_only_its_own_list(self):
        c = self.certs
        d, url = self.private_server(
            "trusting", args=f"--trust {c}/big.crt --trust-user {c}/user.crt --token-ms 1500")
        # kayak's certificate is not on the list: the card names it, retrying.
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url, extra=self.secure())))
        wait_for(lambda: "may not trust kayak's certificate" in
                 (s.card("p", "input")["last_error"] or ""), timeout=30, what="the refusal")
        card = s.card("p", "input")
        self.assertEqual(card["state"], "retrying", card)
        self.assertIn("BadSecurityChecksFailed", card["last_error"])
        app_sha1 = subprocess.run(
            ["openssl", "x509", "-in", f"{c}/app.crt", "-noout", "-fingerprint", "-sha1"],
            capture_output=True, text=True, check=True).stdout.split("=", 1)[1].strip()
        self.assertIn(app_sha1.replace(":", "").lower(), card["last_error"])
        self.assertEqual(self.out(), [])
        s.stop()
        # A user certificate not on its list is a refused login.
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url, extra=self.secure(
            cert="big", extra=f"user_certificate_file: {c}/app.crt, "
                              f"user_private_key_file: {c}/app.key"))))
        wait_for(lambda: s.card("p", "input")["state"] == "failed", timeout=30,
                 what="the refused login")
        self.assertIn("refused the login with the user certificate",
                      s.card("p", "input")["last_error"])
        s.stop()
        # The trusted 4096-bit certificate (two bytes of padding size) and the
        # trusted user: data flows, and the 1.5 s tokens are renewed under
        # the policy for 6 s without a loss of the channel.
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url, extra=self.secure(
            cert="big", extra=f"user_certificate_file: {c}/user.crt, "
                              f"user_private_key_file: {c}/user.key, publishing_ms: 100"))))
        wait_for(lambda: len(self.out()) >= 3, timeout=30, what="the first changes")
        n = len(self.out())
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            card = s.card("p", "input")
            self.assertEqual((card["state"], card["errors"]), ("running", 0), card)
            time.sleep(0.2)
        self.assertNotIn("outage", s.card("p", "input")["position"])
        counter = [m["value"] for m in self.out()]
        self.assertGreaterEqual(len(counter), n + 40)
        self.assertEqual(counter, sorted(set(counter)))

    def test_the_servers_certificate_is_checked_against_its_issuer(self):
        c = self.certs
        _, good = self.private_server("signed", args=f"--cert {c}/server.crt --key {c}/server.key")
        _, expired = self.private_server("expired",
                                         args=f"--cert {c}/expired.crt --key {c}/expired.key")
        pin = f"server_certificate_file: {c}/ca.crt, publishing_ms: 100"
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=good, extra=self.secure(extra=pin))))
        wait_for(lambda: len(self.out()) >= 3, timeout=30, what="changes from the CA's server")
        self.assertIn("(verified)", s.card("p", "input")["position"])
        s.stop()
        before = len(self.out())
        for url, extra, want in [
            (expired, pin, "certificate has expired"),
            # Another server's certificate pinned: this one is refused.
            (opcua_url(), f"server_certificate_file: {c}/server.crt", "is not trusted by"),
        ]:
            with self.subTest(want=want):
                s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url,
                                                           extra=self.secure(extra=extra))))
                wait_for(lambda: s.card("p", "input")["state"] == "failed", timeout=30,
                         what="the refusal")
                self.assertIn(want, s.card("p", "input")["last_error"])
                self.assertEqual(len(self.out()), before)
                s.stop()

    def test_a_secure_only_server_is_reached_under_its_policy(self):
        d, url = self.private_server("secure", args="--secure-only")
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url, extra=self.secure(
            extra="publishing_ms: 100"))))
        wait_for(lambda: len(self.out()) >= 3, timeout=30, what="changes")
        self.assertIn("(not verified)", s.card("p", "input")["position"])
        s.stop()
        # The browser goes the same way.
        from harness import KAYAK
        c = self.certs
        r = subprocess.run([KAYAK, "tool", "opcua", url, "--node", "ns=1;s=Plant.Counter",
                            "--security-policy", "Basic256Sha256", "--certificate",
                            f"{c}/app.crt", "--private-key", f"{c}/app.key"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (0, "ns=1;s=Plant.Counter\n"), r.stderr)
        r = subprocess.run([KAYAK, "tool", "opcua", url, "--node", "ns=1;s=Plant.Counter"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("offers no endpoint with SecurityPolicy None", r.stderr)
        # Sign alone is not offered there; the error lists what is.
        s = self.start(self.graph(self.opcua_input(PLANT[:1], url=url,
                                                   extra=self.secure(mode="Sign"))))
        wait_for(lambda: s.card("p", "input")["state"] == "failed", timeout=30, what="failed")
        self.assertIn("offers no endpoint with SecurityPolicy Basic256Sha256 and mode Sign "
                      "(it offers: Basic256Sha256/SignAndEncrypt)",
                      s.card("p", "input")["last_error"])

    def test_security_options_that_do_not_fit(self):
        c = self.certs
        for extra, want in [
            ("security_policy: Basic256Sha256", "needs kayak's certificate and key"),
            (self.secure(cert="nouri"), "no URI in its subjectAltName"),
            (self.secure(cert="small"), "a key of 1024 bits; Basic256Sha256 takes 2048 to 4096"),
            (f"security_policy: Basic256Sha256, certificate_file: {c}/app.crt, "
             f"private_key_file: {c}/user.key", "is not the key of"),
            (f"security_policy: Basic256Sha256, certificate_file: {c}/nope.crt, "
             f"private_key_file: {c}/app.key", "nope.crt cannot be read"),
            (f"server_certificate_file: {c}/ca.crt", "only under a security_policy"),
            ("security_policy: Basic128Rsa15", "security_policy"),
            (f"user_certificate_file: {c}/user.crt", "go together"),
            (f"user_certificate_file: {c}/user.crt, user_private_key_file: {c}/user.key, "
             "username: kayak, password: x", "not both"),
        ]:
            with self.subTest(want=want):
                code, text = self.check_config(self.graph(self.opcua_input(PLANT, extra=extra)))
                self.assertNotEqual(code, 0)
                self.assertIn(want, text)


if __name__ == "__main__":
    unittest.main()
