"""The connector conformance kit (docs/connectors.md): the same cases against
every connector, each described by a Connector subclass in its own folder,
src/connectors/<name>/kit.py (found by that place; `dummy`, the kit's own
source, is here). Prints one line per connector and case:

    kit: <connector> <case>: ok (<what was checked>)

Cases, by what the connector declares:
  delivery     N messages in, N out, in order per key
  kill9        (inputs) kill -9 while data flows, three times, then to the end:
               rewindable or replayable: every bucket count exact, every message in
               the output; neither (tcp): the bucket agrees with the output, and only
               what was in flight at a kill is missing
  down_and_up  (connectors with a server) the server goes away: the card shows it,
               the server comes back, nothing acknowledged is lost
  bad_options  a wrong option value: `kayak check` names file:line:column
  bad_data     a record that is not JSON: counted on the card, the rest delivered
  rotate_credentials
               (connectors with secret options) kill -9, every secret changed to a second
               valid credential, restart: state and outputs as without the change
  secrets_never_leak
               (connectors with secret options) canary secrets, a run with errors: the
               canary is nowhere in the state directory, the log, /ready, the API
The faults (test_kit_faults.py, a CTest of its own):
  cut_mid_batch
               (connectors behind the fault proxy) three times, the server's answers
               are lost while a batch is in flight and then the connection is cut:
               an output has every message at least once; a rewindable or replayable
               input's bucket is exact and its output complete; any other input's
               bucket agrees with its output and what is written after the cuts arrives
  transient_refusal
               (connectors with a refusal switch) the server refuses for a while (its
               rights taken from the connector's user and given back): `retrying` on
               the card, nothing dropped, every message delivered after, the bucket exact
  no_orphans   (connectors with sessions on the server) nothing a killed run opened is
               left open
The config case (test_kit_config.py, a CTest of its own):
  config_change_after_crash
               kill -9, every tuning option and address changed at once: state exact,
               outputs complete, nothing started empty; then an identity option
               changed: the input starts empty
"""
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import unittest
from http.server import ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))  # the harness, and the kafka broker
from harness import KAYAK, KayakTest, committed, wait_for  # noqa: E402
import servers  # noqa: E402,F401 (tests/e2e: the real servers; the connectors' kit.py use it)

SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"
# A secret no server knows: after a run with it, it must be found nowhere.
CANARY = f"kitcanary{os.getpid()}z{random.randrange(1 << 30):x}"
KEYS = 4


def message(i):
    return {"k": f"k{i % KEYS}", "seq": i}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(connector, case, what):
    print(f"kit: {connector} {case}: ok ({what})", flush=True)


def elsewhere(connector, case, why):
    """A case the kit does not run for this connector, and where it is tested instead."""
    print(f"kit: {connector} {case}: not here ({why})", flush=True)


# ---- the connectors: how to write into a source and read back a sink ----

class Connector:
    name = ""
    delivery = "rewindable"  # rewindable | replayable | none
    has_input = True
    has_output = False
    has_server = False
    proxied = False  # its connections go through a servers.Proxy, `self.proxy`

    def __init__(self, t):
        self.t = t

    def input_yaml(self):  # the `input:` value
        raise NotImplementedError

    def write(self, s, msgs):  # into the running source; s: the kayak Server
        raise NotImplementedError

    def write_bad(self, s):  # a record that is not JSON
        raise NotImplementedError

    def bad_input_option(self):  # (input yaml with one wrong value, the wrong value)
        raise NotImplementedError

    def transforms(self):  # transforms that make the input's messages the kit's {k, seq}
        return []

    def expected(self, n):  # the n messages the kit writes, as they come out
        return [message(i) for i in range(n)]

    # bad_data: `bad_data_elsewhere` says why the kit writes no bad record into
    # this source (and where one is tested); `bad_data_refused`, that a bad
    # record is refused to its sender (and not counted on the card).
    bad_data_elsewhere = ""
    bad_data_refused = False

    # Connectors with secret options set `credentials` and implement
    # use_credential: 0 and 1 are two valid credentials the test server knows
    # (rotate_credentials), CANARY a secret in every secret option
    # (secrets_never_leak); input_yaml and output_yaml use the one set last.
    credentials = False

    def use_credential(self, which):
        raise NotImplementedError

    # Connectors whose test server can refuse for a passing reason set
    # `refusals` and implement refuse(on): the server refuses the user of
    # credential 0 while on, and serves it again when off.
    refusals = False

    def refuse(self, on):
        raise NotImplementedError

    # How fast the `dummy` feeding an output writes in the cases that change
    # something while it runs (a server slow to apply a switch wants longer).
    feed_rate = 100

    # down_and_up: a connector whose server the case can take away says which
    # side meets the outage, `outage` "input", "output" or "both" (by
    # default, one behind the fault proxy: its input, and its output when it
    # has one), and gives down() and up() (the proxy cut and restored).
    # `for_outage(t)` makes the
    # connector the case uses (kafka: on a broker of its own). With
    # `writable_while_down`, the kit writes the second half into the source
    # while kayak cannot reach it (a proxy between them); otherwise after it
    # is back. after_outage(s) checks what else the card should say.
    outage = None  # None: by the proxy (outage_side)

    @classmethod
    def outage_side(cls):
        if cls.outage is not None:
            return cls.outage
        if not cls.proxied:
            return ""
        return "both" if cls.has_input and cls.has_output else "input" if cls.has_input \
            else "output"

    writable_while_down = True

    @classmethod
    def for_outage(cls, t):
        return cls(t)

    def down(self):
        self.proxy.cut()

    def up(self):
        self.proxy.restore()

    def after_outage(self, s):
        pass

    # Connectors that open sessions on the server (uploads, transactions,
    # consumers) set `sessions` to "input" or "output" and implement
    # open_sessions(): what of them is left open on the server (no_orphans),
    # after kills and a final stop. session_output_yaml() is the output that
    # opens them.
    sessions = ""

    def open_sessions(self):
        raise NotImplementedError

    def session_output_yaml(self):
        return self.output_yaml()

    # config_change_after_crash (test_kit_config.py): tuning(side) gives a new
    # value for every tuning option and address ("input" or "output" side,
    # docs/components.md names them) that use_credential(1) does not change
    # already and the kit does not know (`retry`); tuning_exempt[side] names
    # those it cannot change, with the reason. identity_change() is one
    # identity option of the input with a new value (None: it has none).
    # tuning() may move what write() and read_sink() use along with it.
    tuning_exempt = {}

    def tuning(self, side):
        return {}

    def identity_change(self):
        return None

    # tls (test_kit_tls.py): tls(side) gives the options that reach the same
    # data over TLS: an address and a `tls` block whose ca_file is the
    # ca.crt of a tls_ca.py directory (which also holds other-ca.crt); None
    # with `no_tls` saying why the connector has no such way (another server,
    # no TLS at all).
    no_tls = ""

    def tls(self, side):
        return None

    # schema_change (test_kit_config.py): database connectors set `schema` and
    # implement alter(table, step) on their source ("src") or sink ("dst")
    # table: "prepare" adds a column `extra` before the run, "add" adds a
    # column `added` with a default, "drop" drops `extra`; the input of
    # schema_input_yaml() reads every column (SELECT *).
    schema = False

    def alter(self, table, step):
        raise NotImplementedError

    def schema_input_yaml(self):
        raise NotImplementedError

    def close(self):
        pass


class Endpoint:
    """A local HTTP server a connector talks to, which a case can stop and
    start again on the same port."""
    srv = None

    def serve(self, handler, port=0):
        self.srv = ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return self.srv.server_address[1]

    def stop_endpoint(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.srv = None

    def close(self):
        if self.srv:
            self.stop_endpoint()


class DummyConnector(Connector):
    name = "dummy"
    # the generator is the source: it writes its own messages
    TEMPLATE = '{"k":"k0","seq":{{seq}}}'

    def __init__(self, t, count=200):
        super().__init__(t)
        self.count = count

    def input_yaml(self):
        return (f"{{dummy: {{count: {self.count}, rate_per_sec: 400, batch_size: 10, "
                f"template: '{self.TEMPLATE}'}}}}")

    def write(self, s, msgs):
        pass  # it generates seq 1..count itself

    def expected(self, n):
        return [{"k": "k0", "seq": i} for i in range(1, self.count + 1)]

    bad_data_elsewhere = "the generator cannot make bad data"

    def tuning(self, side):
        return {"rate_per_sec": 300, "batch_size": 7}

    def identity_change(self):
        return {"template": '{"k":"k1","seq":{{seq}}}'}

    def bad_input_option(self):
        return "{dummy: {rate_per_sec: -1}}", "-1"


class Subscribed:
    """For inputs that keep nothing for an absent subscriber (delivery none):
    write() waits until the running server `s` has subscribed."""
    _ready_for = None

    def ensure_subscribed(self, s):
        if self._ready_for is not s:
            wait_for(lambda: self.subscribed(s), timeout=30, interval=0.05,
                     what=f"{self.name}: subscribed")
            self._ready_for = s


# The kit's own source: it feeds the outputs, and is a connector of the kit too.
INPUTS = [DummyConnector]
OUTPUTS = []


def _connectors_in_their_folders():
    """The connectors whose kit adapter lives in their own folder,
    src/connectors/<name>/kit.py (its INPUTS and OUTPUTS lists)."""
    import glob
    import importlib.util
    found_in, found_out = [], []
    for path in sorted(glob.glob(os.path.join(HERE, "..", "..", "src", "connectors", "*",
                                              "kit.py"))):
        name = "kit_" + os.path.basename(os.path.dirname(path))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        found_in += getattr(module, "INPUTS", [])
        found_out += getattr(module, "OUTPUTS", [])
    return found_in, found_out


_in, _out = _connectors_in_their_folders()
INPUTS += _in
OUTPUTS += _out
# KAYAK_KIT_ONLY=<name>[,<name>...]: those connectors only (mutation_check.py).
if os.environ.get("KAYAK_KIT_ONLY"):
    _only = set(os.environ["KAYAK_KIT_ONLY"].split(","))
    INPUTS = [c for c in INPUTS if c.name in _only]
    OUTPUTS = [c for c in OUTPUTS if c.name in _only]


class KitCase(KayakTest):
    """What every kit case needs: a connector made and closed, its graph, the
    messages it should carry, a directory per connector."""
    N = 200

    def connector(self, cls):
        c = cls(self)
        self.addCleanup(c.close)
        return c

    def sink_yaml(self):
        return f"{{file: {{path: {self.path('out')}}}}}"

    def graph(self, input_yaml, output_yaml=None, with_bucket=False, shape=()):
        bucket = "buckets: {n: {}}\n" if with_bucket else ""
        steps = list(shape) + (["{bucket: {name: n, key: k, op: count}}"] if with_bucket else [])
        transforms = f"    transforms: [{', '.join(steps)}]\n" if steps else ""
        return (f"{bucket}pipelines:\n  p:\n    input: {input_yaml}\n{transforms}"
                f"    outputs: [{output_yaml or self.sink_yaml()}]\n")

    def expected(self, c):
        return c.expected(self.N)

    def check_order(self, got, want):
        by_key = {}
        for m in got:
            by_key.setdefault(m["k"], []).append(m["seq"])
        for k, seqs in by_key.items():
            self.assertEqual(seqs, sorted(seqs), f"key {k} out of order")
        self.assertEqual(sorted(m["seq"] for m in got), sorted(m["seq"] for m in want))

    def start_fed_output(self, c):
        """The output `c` fed by a slow `dummy` of N messages, under checkpoints."""
        d = DummyConnector(self, count=self.N)
        slow = d.input_yaml().replace("rate_per_sec: 400", f"rate_per_sec: {c.feed_rate}")
        return self.start(self.graph(slow, c.output_yaml()), server_config=SERVER,
                          state_dir=self.path("state")), d

    def finish_fed_output(self, s, c, d, what):
        """The dummy's end, a graceful stop, and every message in the sink."""
        wait_for(lambda: s.card("p", "input")["state"] == "finished", timeout=60,
                 what=f"{c.name}: the input to end")
        self.assertEqual(s.stop(), 0)
        want = {m["seq"] for m in self.expected(d)}
        wait_for(lambda: want <= {m["seq"] for m in c.read_sink()}, timeout=30,
                 what=f"{c.name} output: every message {what}")

    def write_with_kills(self, c, cfg, state, want, jitter=0.0):
        """Writes `want` into `c`'s source 25 at a time, kill -9 and a restart
        before three of the chunks (up to `jitter` s after each chunk, so a
        kill lands anywhere in the flow); returns the running server."""
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        chunks = [want[i:i + 25] for i in range(0, len(want), 25)]
        kills = set(random.sample(range(1, len(chunks)), 3))
        for i, chunk in enumerate(chunks):
            if i in kills:
                s.kill()
                s = self.start(cfg, server_config=SERVER, state_dir=state)
            c.write(s, chunk)
            if jitter:
                time.sleep(random.uniform(0, jitter))
        return s

    def assert_bucket_exact(self, s, want, name):
        """Bucket `n` counts every key of `want` once per message."""
        keys = sorted({m["k"] for m in want})
        want_counts = {}
        for m in want:
            want_counts[m["k"]] = want_counts.get(m["k"], 0) + 1
        wait_for(lambda: sum(self.bucket_counts(s, keys).values()) >= len(want), timeout=30,
                 what=f"{name}: the bucket to hold every message")
        self.assertEqual(self.bucket_counts(s, keys), want_counts)

    def kill_and_change(self, c, cfg, change):
        """Half of `c`'s messages through `cfg` and a checkpoint holding them,
        kill -9, then the rest through the config `change()` gives (called
        after the kill): every bucket count exact (rewindable, replayable) or
        the bucket equal to the output (neither), nothing started empty.
        Returns the running server and the messages."""
        state = self.path("state")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        want = self.expected(c)
        half = len(want) // 2
        out = lambda: {m["seq"] for m in map(json.loads, self.read_output("out"))}  # noqa: E731
        for i in range(0, half, 25):
            c.write(s, want[i:min(i + 25, half)])
        wait_for(lambda: len(out()) >= half, timeout=60, what=f"{c.name}: the first half")
        c0 = committed(s)
        wait_for(lambda: committed(s) >= c0 + 2, timeout=30,
                 what=f"{c.name}: a checkpoint holding the first half")
        s.kill()
        s = self.start(change(), server_config=SERVER, state_dir=state)
        if hasattr(c, "_ready_for"):
            c._ready_for = None
        for i in range(half, len(want), 25):
            c.write(s, want[i:i + 25])
        keys = sorted({m["k"] for m in want})
        if c.delivery != "none":
            wait_for(lambda: len(out()) >= len(want), timeout=60,
                     what=f"{c.name}: every message after the change")
            self.assert_bucket_exact(s, want, c.name)
        else:
            c0 = committed(s)
            wait_for(lambda: committed(s) >= c0 + 2, timeout=30,
                     what=f"{c.name}: checkpoints after the last write")
            total = sum(self.bucket_counts(s, keys).values())
            self.assertGreaterEqual(total, half, "the state before the change is gone")
            self.assertEqual(total, len(out()), "the bucket and the output disagree")
        self.assertNotIn("starts empty", s.stderr())
        return s, want

    def bucket_counts(self, s, keys):
        def value(k):
            status, body = s.get(f"/api/v1/buckets/n?key={k}")
            return json.loads(body)["value"] if status == 200 else 0
        return {k: value(k) for k in keys}

    def dir_for(self, name):
        """A fresh directory for one connector's run inside this test."""
        self.dir = os.path.join(self.root, name)
        os.makedirs(self.dir, exist_ok=True)

    def setUp(self):
        super().setUp()
        self.root = self.dir

    def tearDown(self):
        self.dir = self.root  # removed whole, with every connector's directory
        super().tearDown()


class ConformanceTest(KitCase):
    # ---- delivery ----
    def test_delivery_inputs(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name)
                c = self.connector(cls)
                s = self.start(self.graph(c.input_yaml(), shape=c.transforms()), server_config=SERVER)
                want = self.expected(c)
                for i in range(0, len(want), 50):
                    c.write(s, want[i:i + 50])
                wait_for(lambda: len(self.read_output("out")) >= len(want), timeout=30,
                         what=f"{cls.name}: {len(want)} messages")
                got = [json.loads(l) for l in self.read_output("out")]
                self.check_order(got, want)
                s.stop()
                report(cls.name, "delivery", f"{len(want)} messages in order per key")

    def test_delivery_outputs(self):
        for cls in OUTPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-out")
                c = self.connector(cls)
                d = DummyConnector(self, count=self.N)
                s = self.start(self.graph(d.input_yaml(), c.output_yaml()), server_config=SERVER)
                want = self.expected(d)
                wait_for(lambda: len(c.read_sink()) >= len(want), timeout=30,
                         what=f"{cls.name} output: {len(want)} messages")
                got = c.read_sink()
                self.check_order(got, want)
                s.stop()
                report(cls.name, "delivery (output)", f"{len(want)} messages in order per key")

    # ---- kill -9 ----
    def test_kill9(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-kill9")
                c = self.connector(cls)
                state = self.path("state")
                cfg = self.graph(c.input_yaml(), with_bucket=True, shape=c.transforms())
                want = self.expected(c)
                s = self.write_with_kills(c, cfg, state, want, jitter=0.05)
                out = lambda: [json.loads(l) for l in self.read_output("out")]  # noqa: E731
                keys = sorted({m["k"] for m in want})
                counts = lambda: {  # noqa: E731
                    k: (s.get_json(f"/api/v1/buckets/n?key={k}")["value"]
                        if s.get(f"/api/v1/buckets/n?key={k}")[0] == 200 else 0)
                    for k in keys}
                if c.delivery != "none":
                    wait_for(lambda: len({m["seq"] for m in out()}) >= len(want), timeout=60,
                             what=f"{cls.name}: every message after the kills")
                    # state exactly once: each key counted once per message
                    self.assert_bucket_exact(s, want, cls.name)
                    report(cls.name, "kill9", f"3 kills, {len(want)} messages, bucket exact, "
                                              "output complete")
                else:
                    # not replayable: what was in flight at a kill may be gone, the rest is
                    # there once in the bucket, and the bucket agrees with the output
                    # two checkpoints after the last write: what the source took is in
                    # the pipeline by then (the stop keeps what passed its barrier)
                    c0 = committed(s)
                    wait_for(lambda: committed(s) >= c0 + 2, timeout=30,
                             what=f"{cls.name}: checkpoints after the last write")
                    s.stop()
                    s = self.start(cfg, server_config=SERVER, state_dir=state)
                    seen = {m["seq"] for m in out()}
                    total = sum(counts().values())
                    self.assertLessEqual(total, len(want))
                    self.assertEqual(total, len(seen), "the bucket and the output disagree")
                    report(cls.name, "kill9", f"3 kills, {len(want) - len(seen)} of "
                                              f"{len(want)} in flight lost, bucket = output")
                s.stop()

    # ---- a server that goes away ----
    def test_down_and_up(self):
        for cls in [c for c in dict.fromkeys(INPUTS + OUTPUTS) if c.outage_side()]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-down")
                c = cls.for_outage(self)
                self.addCleanup(c.close)
                if c.outage_side() == "output":
                    self.output_down_and_up(c)
                else:
                    self.input_down_and_up(c)

    def input_down_and_up(self, c):
        """Half the messages through, the server away (the card says retrying),
        the rest written while it is away (or once it is back, for a source
        that keeps nothing or is the server itself), the server back: every
        message through the input (and the connector's own output, "both")."""
        both = c.outage_side() == "both"
        cfg = self.graph(c.input_yaml(), c.output_yaml() if both else None, shape=c.transforms())
        s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
        want = self.expected(c)
        half = len(want) // 2
        sink = c.read_sink if both else \
            (lambda: [json.loads(l) for l in self.read_output("out")])  # noqa: E731
        distinct = lambda: sorted({m["seq"] for m in sink()})  # noqa: E731
        c.write(s, want[:half])
        wait_for(lambda: len(distinct()) >= half, timeout=30, what=f"{c.name}: before")
        c.down()
        later = c.delivery == "none" or not c.writable_while_down
        if not later:
            c.write(s, want[half:])  # written while kayak cannot see the server
        wait_for(lambda: s.card("p", "input")["state"] == "retrying", timeout=60,
                 what=f"{c.name}: the input retrying")
        c.up()
        if later:
            wait_for(lambda: s.card("p", "input")["state"] == "running", timeout=60,
                     what=f"{c.name}: running again")
            if hasattr(c, "_ready_for"):
                c._ready_for = None  # subscribed again before the kit writes
            c.write(s, want[half:])
        wait_for(lambda: len(distinct()) >= len(want), timeout=60, what=f"{c.name}: after")
        self.assertEqual(distinct(), sorted(m["seq"] for m in want))
        c.after_outage(s)
        s.stop()
        report(c.name, "down_and_up", f"retrying shown, {len(want)} of {len(want)} through "
                                      f"the input{' and the output' if both else ''}")

    def output_down_and_up(self, c):
        """The server away before kayak starts: the output's card says
        retrying; it comes back: every message in the sink."""
        d = DummyConnector(self, count=self.N)
        yaml = c.output_yaml()
        c.down()
        s = self.start(self.graph(d.input_yaml(), yaml), server_config=SERVER,
                       state_dir=self.path("state"))
        wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", timeout=30,
                 what=f"{c.name}: the output retrying")
        c.up()
        want = sorted(m["seq"] for m in self.expected(d))
        wait_for(lambda: sorted({m["seq"] for m in c.read_sink()}) == want, timeout=60,
                 what=f"{c.name} output: every message after the server came back")
        s.stop()
        report(c.name, "down_and_up (output)", f"retrying shown, {self.N} of {self.N} in the "
                                               "sink")

    # ---- bad options, bad data ----
    def check_config(self, text, bad_value):
        path = self.path("bad.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([KAYAK, "check", "--config", path], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        line_no = next(i for i, l in enumerate(text.splitlines(), 1) if bad_value in l)
        self.assertRegex(r.stdout + r.stderr, rf"bad\.yaml:{line_no}:\d+: ")
        return (r.stdout + r.stderr).strip().splitlines()[0]

    def test_bad_options(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-opts")
                c = self.connector(cls)
                yaml, bad = c.bad_input_option()
                first = self.check_config(self.graph(yaml), bad)
                report(cls.name, "bad_options", first.split(": ", 1)[1])
        for cls in OUTPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-outopts")
                c = self.connector(cls)
                yaml, bad = c.bad_output_option()
                first = self.check_config(self.graph("{dummy: {}}", yaml), bad)
                report(cls.name, "bad_options (output)", first.split(": ", 1)[1])

    def test_bad_data(self):
        for cls in INPUTS:
            if cls.bad_data_elsewhere:
                elsewhere(cls.name, "bad_data", cls.bad_data_elsewhere)
                continue
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-bad")
                c = self.connector(cls)
                s = self.start(self.graph(c.input_yaml()), server_config=SERVER)
                c.write(s, [message(0)])
                c.write_bad(s)
                c.write(s, [message(1)])
                wait_for(lambda: len(self.read_output("out")) >= 2, what="the good messages")
                if not c.bad_data_refused:
                    wait_for(lambda: s.card("p", "input")["errors"] >= 1, what="the bad one")
                self.assertIsNone(s.proc.poll(), "the server stopped")
                s.stop()
                report(cls.name, "bad_data", "counted or refused, the rest delivered")

    def test_rotate_credentials(self):
        for cls in [c for c in INPUTS if c.credentials]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-rotate")
                c = self.connector(cls)
                c.use_credential(0)
                cfg = lambda: self.graph(c.input_yaml(), with_bucket=True,  # noqa: E731
                                         shape=c.transforms())

                def rotate():
                    c.use_credential(1)  # every secret option now the second credential
                    return cfg()
                s, want = self.kill_and_change(c, cfg(), rotate)
                s.stop()
                report(cls.name, "rotate_credentials", f"kill -9, credentials rotated: "
                                                       f"{len(want)} messages, state kept")
        for cls in [c for c in OUTPUTS if c.credentials]:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-rotate-out")
                c = self.connector(cls)
                c.use_credential(0)
                d = DummyConnector(self, count=self.N)
                state = self.path("state")
                slow = d.input_yaml().replace("rate_per_sec: 400", "rate_per_sec: 100")
                s = self.start(self.graph(slow, c.output_yaml()), server_config=SERVER,
                               state_dir=state)
                wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= self.N // 4,
                         timeout=60, what=f"{cls.name}: a quarter out")
                c0 = committed(s)
                wait_for(lambda: committed(s) >= c0 + 1, timeout=30, what="a checkpoint")
                s.kill()
                c.use_credential(1)
                s = self.start(self.graph(slow, c.output_yaml()), server_config=SERVER,
                               state_dir=state)
                wait_for(lambda: s.card("p", "input")["state"] == "finished", timeout=60,
                         what=f"{cls.name}: the input to end")
                self.assertEqual(s.stop(), 0)
                want = {m["seq"] for m in self.expected(d)}
                wait_for(lambda: want <= {m["seq"] for m in c.read_sink()}, timeout=30,
                         what=f"{cls.name} output: every message at least once")
                self.assertNotIn("starts empty", s.stderr())
                report(cls.name, "rotate_credentials (output)",
                       f"kill -9, credentials rotated: all {self.N} messages in the sink")

    def test_secrets_never_leak(self):
        for cls in [c for c in dict.fromkeys(INPUTS + OUTPUTS) if c.credentials]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-leak")
                c = self.connector(cls)
                c.use_credential(CANARY)
                d = DummyConnector(self, count=self.N)
                cfg = self.graph(c.input_yaml() if c.has_input else d.input_yaml(),
                                 c.output_yaml() if c.has_output else None)
                state = self.path("state")
                s = self.start(cfg, server_config=SERVER, state_dir=state)
                proxy = getattr(c, "proxy", None)
                if proxy is not None:  # errors: the connection cut
                    time.sleep(0.3)
                    proxy.cut()
                deadline = time.monotonic() + 8
                while time.monotonic() < deadline and committed(s) < 3:
                    time.sleep(0.1)
                seen = {"log": ""}
                for path in ["/ready", "/health", "/api/v1/overview", "/api/v1/pipelines",
                             "/api/v1/pipelines/p", "/api/v1/checkpoints", "/metrics"]:
                    seen[path] = s.get(path)[1]
                s.kill()
                seen["log"] = s.stderr()
                for root, _, files in os.walk(state):
                    for f in files:
                        with open(os.path.join(root, f), "rb") as fh:
                            seen[os.path.join(root, f)] = fh.read().decode("latin-1")
                for where, text in seen.items():
                    self.assertNotIn(CANARY, text, f"{cls.name}: the canary secret in {where}")
                report(cls.name, "secrets_never_leak",
                       f"canary in every secret option: not in {len(seen) - 8} state files, "
                       "the log, /ready, the API or /metrics")


if __name__ == "__main__":
    unittest.main()
