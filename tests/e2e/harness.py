"""Drives the real kayak binary for end-to-end tests.

Every server binds 127.0.0.1 on a port the kernel picks; every wait polls a
condition with a deadline.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

KAYAK = os.environ.get("KAYAK_BIN", os.path.join(os.path.dirname(__file__), "../../build/kayak"))
EXAMPLES = os.environ.get("KAYAK_EXAMPLES", os.path.join(os.path.dirname(__file__), "../../examples"))


def wait_for(cond, timeout=20.0, interval=0.05, what="condition"):
    """Polls cond() until it returns a truthy value; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def run(args, **kw):
    kw.setdefault("timeout", 60)
    return subprocess.run([KAYAK] + args, capture_output=True, text=True, **kw)


def http(method, url, body=None, headers=None, context=None):
    """Returns (status, headers, body text); `context` is the ssl context of
    an https url."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def post_until_taken(s, path, body, headers=None):
    """Posts `body` to `path` until 202: an http input answers 503 while it starts."""
    def once():
        status, _, text = http("POST", s.url + path, body, headers, context=s.context)
        assert status in (202, 503), f"{status}: {text}"
        return status == 202
    wait_for(once, what=f"a 202 from {path}")


def region_stats(s):
    """The regions of GET /api/v1/checkpoints ([] while the server goes down)."""
    try:
        return s.get_json("/api/v1/checkpoints")["regions"]
    except Exception:
        return []


def committed(s):
    """Checkpoints committed so far, summed over the regions."""
    return sum(r["committed"] for r in region_stats(s))


class Server:
    """A kayak server on a config; stderr is collected in the background."""

    def __init__(self, workdir, config, server_config="listen: 127.0.0.1:0\n", state_dir=None,
                 stdout=subprocess.DEVNULL, extra_args=None, wait=True, capture_stdout=False,
                 env=None, context=None):
        self.workdir = workdir
        self.context = context  # the ssl context for a listener that serves https
        self.config_path = os.path.join(workdir, "pipelines.yaml")
        with open(self.config_path, "w") as f:
            f.write(config)
        self.server_config_path = os.path.join(workdir, "server.yaml")
        with open(self.server_config_path, "w") as f:
            f.write(server_config)
        args = [KAYAK, "--config", self.config_path, "--server-config", self.server_config_path]
        if state_dir:
            args += ["--state-dir", state_dir]
        args += extra_args or []
        self.stderr_lines = []
        if capture_stdout:
            stdout = subprocess.PIPE
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(args, cwd=workdir, stdout=stdout, stderr=subprocess.PIPE,
                                     text=True, env=full_env)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        # Lines the server printed, read continuously so the pipe never fills.
        self.stdout_lines = []
        self._out_reader = None
        if capture_stdout:
            self._out_reader = threading.Thread(target=self._read_stdout, daemon=True)
            self._out_reader.start()
        self.url = None
        if wait:
            self.url = wait_for(self._find_url, what="the API address in the log")

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.stdout_lines.append(line.rstrip("\n"))

    def stderr(self):
        return "".join(self.stderr_lines)

    def _find_url(self):
        m = re.search(r"API listening on (https?://127\.0\.0\.1:\d+)", self.stderr())
        if m:
            return m.group(1)
        if self.proc.poll() is not None:
            raise AssertionError(f"kayak exited with {self.proc.returncode}:\n{self.stderr()}")
        return None

    def get(self, path):
        status, _, body = http("GET", self.url + path, context=self.context)
        return status, body

    def get_json(self, path):
        status, body = self.get(path)
        assert status == 200, f"GET {path} -> {status}: {body}"
        return json.loads(body)

    def card(self, pipeline, name):
        p = self.get_json(f"/api/v1/pipelines/{pipeline}")
        for c in p["components"]:
            if c["name"] == name:
                return c
        raise AssertionError(f"no card {name} in {p}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends sig once and returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        if self._out_reader is not None:
            self._out_reader.join(timeout=5)
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def tls_block(tls_dir, *names, **kw):
    """A connector's `tls` block of tls_ca.py's files in `tls_dir`: "ca",
    "other_ca", "cert" (the client's certificate and key), and any other key
    as given."""
    keys = {"ca": "ca_file: {}/ca.crt", "other_ca": "ca_file: {}/other-ca.crt",
            "cert": "cert_file: {0}/client.crt, key_file: {0}/client.key"}
    parts = [keys[n].format(tls_dir) for n in names] + [f"{k}: {v}" for k, v in kw.items()]
    return "tls: {" + ", ".join(parts) + "}"


class Endpoint:
    """A local HTTP server that records requests and answers from a script:
    `plan` is a list of statuses for the first requests, then `default`."""

    def __init__(self, plan=None, default=200, answer=b'{"ok":true}', tls=None):
        """`tls`: (directory of tls_ca.py's files, certificate name, whether a
        client certificate is required): https with that certificate."""
        import http.server
        outer = self
        self.requests, self.plan, self.default, self.answer = [], list(plan or []), default, answer
        self.lock = threading.Lock()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                with outer.lock:
                    status = outer.plan.pop(0) if outer.plan else outer.default
                    outer.requests.append((self.command, dict(self.headers), body, status))
                    answer = outer.answer
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_POST = do_GET = do_PUT = do

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        if tls:
            import ssl
            d, cert, client = tls
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(os.path.join(d, cert + ".crt"), os.path.join(d, cert + ".key"))
            if client:
                ctx.load_verify_locations(os.path.join(d, "ca.crt"))
                ctx.verify_mode = ssl.CERT_REQUIRED
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.url = "https" + self.url[4:]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def accepted(self):
        with self.lock:
            return [r for r in self.requests if 200 <= r[3] < 300]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class KayakTest(unittest.TestCase):
    """A test with its own work directory and server cleanup."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kayak-e2e-")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.kill()
        if os.environ.get("KAYAK_KEEP_DIRS"):
            # What a failure left (the servers' logs, state, a private
            # broker's logs), for reading afterwards.
            print(f"\nkept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, config, **kw):
        s = Server(self.dir, config, **kw)
        self.servers.append(s)
        return s

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def assert_refused(self, config, wants, card="input", timeout=30, **start):
        """Runs pipeline p of `config` until its `card` says one of `wants` in
        last_error (a refused handshake, a login): nothing may reach the file
        output `out`, and the server must stop cleanly (nothing left
        reporting to a card). Returns the stopped server."""
        s = self.start(config, **start)
        try:
            wait_for(lambda: any(w in s.card("p", card)["last_error"] for w in wants),
                     timeout=timeout, what=f"{wants} on the card")
        except AssertionError:
            raise AssertionError(f"the card says {s.card('p', card)}") from None
        self.assertEqual(self.read_output("out"), [])
        self.assertEqual(s.stop(), 0, s.stderr()[-2000:])
        return s

    def write_ndjson(self, name, rows):
        with open(self.path(name), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        return self.path(name)

    def read_output(self, dirname):
        """Every whole line of every part in an output directory, in part order.

        A line the server is writing right now (no newline yet) is not one:
        a read while a batch is half written saw it cut (a CI run)."""
        d = self.path(dirname)
        if not os.path.isdir(d):
            return []
        lines = []
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name)) as f:
                text = f.read()
            lines.extend(l for l in text[:text.rfind("\n") + 1].split("\n") if l)
        return lines
