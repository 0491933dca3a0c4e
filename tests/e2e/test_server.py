"""A running server: data through transforms to outputs, the status API, graceful stop."""
from http.client import HTTPSConnection
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error

from harness import (EXAMPLES, KayakTest, Server, committed, http, post_until_taken, region_stats,
                     run, wait_for)


class ServerTest(KayakTest):
    def test_file_through_transforms_to_file(self):
        rows = [{"id": i, "sensor": f"s{i % 3}", "value": i * 10} for i in range(1, 101)]
        src = self.write_ndjson("in.ndjson", rows)
        s = self.start(f"""
pipelines:
  p:
    input:
      file: {{path: {src}}}
    transforms:
      - filter: 'value >= 500 && sensor != "s0"'
      - map: {{celsius: '(value - 32) * 5 / 9', tag: 'upper(sensor)'}}
      - remove: [value]
      - rename: {{id: n}}
    outputs:
      - file: {{path: out}}
""")
        expected = []
        for r in rows:
            if r["value"] >= 500 and r["sensor"] != "s0":
                expected.append({"n": r["id"], "sensor": r["sensor"],
                                 "celsius": (r["value"] - 32) * 5 / 9,
                                 "tag": r["sensor"].upper()})
        wait_for(lambda: len(self.read_output("out")) == len(expected), what="all output")
        got = [json.loads(l) for l in self.read_output("out")]
        # field order: the input's, new fields in the order set, a renamed field last
        self.assertEqual([list(g.keys()) for g in got[:1]], [["sensor", "celsius", "tag", "n"]])
        self.assertEqual(got, expected)
        card = s.card("p", "transforms[0]")
        self.assertEqual(card["messages_in"], 100)
        self.assertEqual(card["messages_out"], len(expected))
        self.assertEqual(s.card("p", "input")["state"], "finished")
        self.assertEqual(s.stop(), 0)

    def test_status_api(self):
        src = self.write_ndjson("in.ndjson", [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}])
        s = self.start(f"""
buckets:
  sums: {{}}
pipelines:
  p:
    input: {{file: {{path: {src}}}}}
    transforms:
      - bucket: {{name: sums, key: k, op: add, field: v}}
    outputs: [{{file: {{path: out}}}}]
  q:
    input: {{pipeline: p}}
""")
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == 3, what="output")
        status, headers, body = http("GET", s.url + "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        listing = s.get_json("/api/v1/pipelines")
        self.assertEqual(sorted(p["id"] for p in listing["pipelines"]), ["p", "q"])
        p = s.get_json("/api/v1/pipelines/p")
        self.assertEqual(p["id"], "p")
        self.assertEqual([c["type"] for c in p["components"]], ["file", "bucket", "file"])
        for c in p["components"]:
            for field in ("name", "type", "state", "messages_in", "messages_out", "errors", "last_error"):
                self.assertIn(field, c)
        self.assertEqual(p["config"]["transforms"][0]["bucket"]["op"], "add")
        self.assertEqual(s.get_json("/api/v1/pipelines/q")["upstreams"], ["p"])
        # buckets: one entry, and the paged listing
        entry = s.get_json("/api/v1/buckets/sums?key=a")
        self.assertEqual((entry["key"], entry["value"]), ("a", 4))
        self.assertGreater(entry["last_write_ms"], 0)
        self.assertEqual(s.get("/api/v1/buckets/sums?key=zzz")[0], 404)
        page = s.get_json("/api/v1/buckets/sums")
        self.assertEqual([(e["key"], e["value"]) for e in page["entries"]], [("a", 4), ("b", 2)])
        # errors: JSON bodies, 404 and 405
        status, body = s.get("/api/v1/pipelines/nope")
        self.assertEqual(status, 404)
        self.assertIn("error", json.loads(body))
        status, body = s.get("/no/such/route")
        self.assertEqual(status, 404)
        self.assertIn("error", json.loads(body))
        status, headers, body = http("POST", s.url + "/health", body=b"{}")
        self.assertEqual(status, 405)
        self.assertIn("GET", headers.get("Allow", ""))
        self.assertIn("error", json.loads(body))
        status, headers, body = http("DELETE", s.url + "/api/v1/pipelines")
        self.assertEqual(status, 405)
        # metrics
        status, metrics = s.get("/metrics")
        self.assertEqual(status, 200)
        self.assertIn('kayak_messages_in_total{pipeline="p",component="transforms[0]",type="bucket"} 3', metrics)
        self.assertIn('kayak_messages_out_total{pipeline="p",component="outputs[0]",type="file"} 3', metrics)
        self.assertIn('kayak_errors_total{pipeline="p",component="input",type="file"} 0', metrics)
        self.assertIn('kayak_queue_depth{pipeline="p",queue="outputs[0]"} 0', metrics)
        self.assertIn('kayak_queue_depth{pipeline="q",queue="edge:p"}', metrics)
        self.assertIn('kayak_bucket_entries{bucket="sums"} 2', metrics)
        status, headers, html = http("GET", s.url + "/")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("X-Content-Type-Options"), "nosniff")
        self.assertIn("frame-ancestors 'none'", headers.get("Content-Security-Policy", ""))
        self.assertIn("<html", html)
        self.assertEqual(s.stop(), 0)

    def test_admin_api_demands_the_token_when_one_is_set(self):
        token = "s3cret-Token_42"
        with open(self.path("token"), "w") as f:
            f.write(token + "\n")
        os.chmod(self.path("token"), 0o600)
        s = self.start("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n",
                       server_config=f"listen: 127.0.0.1:0\nauth: {{token_file: {self.path('token')}}}\n")
        for route in ("/api/v1/pipelines", "/api/v1/pipelines/p", "/api/v1/checkpoints",
                      "/api/v1/buckets/none", "/api/nothing-here"):
            status, headers, body = http("GET", s.url + route)
            self.assertEqual(status, 401, route)
            self.assertIn("Bearer", headers.get("WWW-Authenticate", ""))
            self.assertIn("Authorization: Bearer", json.loads(body)["error"])
            # a wrong token is 403; no token (an empty one, another scheme) is 401
            for wrong, want in (("Bearer " + token[:-1], 403), ("Bearer " + token + "x", 403),
                                ("Bearer x" + token[1:], 403), ("Bearer ", 401),
                                ("Basic " + token, 401)):
                status, _, _ = http("GET", s.url + route, headers={"Authorization": wrong})
                self.assertEqual(status, want, (route, wrong))
        status, _, body = http("GET", s.url + "/api/v1/pipelines",
                               headers={"Authorization": "Bearer " + token})
        self.assertEqual(status, 200, body)
        self.assertEqual([p["id"] for p in json.loads(body)["pipelines"]], ["p"])
        # the scheme is case-insensitive; POST routes are covered too
        status, _, _ = http("GET", s.url + "/api/v1/pipelines/p",
                            headers={"Authorization": "bearer " + token})
        self.assertEqual(status, 200)
        self.assertEqual(http("POST", s.url + "/api/v1/checkpoints", body=b"")[0], 401)
        # health, metrics and the dashboard's page stay open
        self.assertEqual(http("GET", s.url + "/health")[0], 200)
        self.assertEqual(http("GET", s.url + "/metrics")[0], 200)
        self.assertEqual(http("GET", s.url + "/")[0], 200)
        self.assertEqual(s.stop(), 0)
        self.assertNotIn(token, s.stderr())

    def test_an_empty_or_missing_token_file_is_refused_at_start(self):
        open(self.path("empty"), "w").close()
        for path, says in ((self.path("empty"), "holds nothing"),
                           (self.path("absent"), "auth.token_file")):
            with open(self.path("server.yaml"), "w") as f:
                f.write(f"listen: 127.0.0.1:0\nauth: {{token_file: {path}}}\n")
            with open(self.path("p.yaml"), "w") as f:
                f.write("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n")
            r = run(["--config", self.path("p.yaml"), "--server-config", self.path("server.yaml")])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(says, r.stderr)

    def test_transform_error_drops_the_batch_and_shows_on_the_card(self):
        src = self.write_ndjson("in.ndjson", [{"v": 1}])
        s = self.start(f"""
pipelines:
  p:
    input: {{file: {{path: {src}, follow: true, poll_ms: 20}}}}
    transforms:
      - map: {{w: 'v * 2'}}
    outputs: [{{file: {{path: out}}}}]
""")
        wait_for(lambda: len(self.read_output("out")) == 1, what="first message")
        with open(src, "a") as f:
            f.write(json.dumps({"v": "text"}) + "\n")
        card = wait_for(lambda: (c := s.card("p", "transforms[0]"))["errors"] == 1 and c,
                        what="error on the card")
        self.assertIn("type error", card["last_error"])
        self.assertIn("type error", s.stderr())
        with open(src, "a") as f:
            f.write(json.dumps({"v": 5}) + "\n")
        wait_for(lambda: len(self.read_output("out")) == 2, what="later messages pass")
        self.assertEqual(json.loads(self.read_output("out")[1]), {"v": 5, "w": 10})
        # a line that is not JSON is skipped and counted on the input's card
        with open(src, "a") as f:
            f.write("{not json\n")
        wait_for(lambda: s.card("p", "input")["errors"] == 1, what="input error")
        self.assertEqual(s.stop(), 0)

    def test_follow_reads_appended_lines_and_new_files(self):
        os.makedirs(self.path("in"))
        self.write_ndjson("in/a.ndjson", [{"n": 1}])
        s = self.start(f"""
pipelines:
  p:
    input: {{file: {{path: '{self.path("in")}/*.ndjson', follow: true, poll_ms: 20}}}}
    outputs: [{{file: {{path: out}}}}]
""")
        wait_for(lambda: len(self.read_output("out")) == 1, what="first file")
        with open(self.path("in/a.ndjson"), "a") as f:
            f.write('{"n": 2}\n{"n": 3')  # the last line is not complete yet
        wait_for(lambda: len(self.read_output("out")) == 2, what="appended line")
        with open(self.path("in/a.ndjson"), "a") as f:
            f.write('}\n')
        self.write_ndjson("in/b.ndjson", [{"n": 4}])
        wait_for(lambda: len(self.read_output("out")) == 4, what="completed line and new file")
        self.assertEqual([json.loads(l)["n"] for l in self.read_output("out")], [1, 2, 3, 4])
        self.assertEqual(s.stop(), 0)

    def test_sigterm_drains_in_flight_batches(self):
        rows = [{"i": i} for i in range(5000)]
        src = self.write_ndjson("in.ndjson", rows)
        s = self.start(f"""
pipelines:
  p:
    input: {{file: {{path: {src}}}}}
    transforms:
      - buffer: {{max_messages: 100000, max_secs: 3600}}
    outputs: [{{file: {{path: out}}}}]
  copy:
    input: {{pipeline: p}}
    outputs: [{{file: {{path: copy}}}}]
""")
        wait_for(lambda: s.card("p", "transforms[0]")["messages_in"] == 5000, what="all read")
        self.assertEqual(self.read_output("out"), [])
        self.assertEqual(s.stop(signal.SIGTERM), 0)
        self.assertEqual(len(self.read_output("out")), 5000)
        self.assertEqual(len(self.read_output("copy")), 5000)
        self.assertIn("stopped cleanly", s.stderr())

    def test_sigint_stops_cleanly(self):
        s = self.start("pipelines:\n  p:\n    input: {dummy: {rate_per_sec: 100}}\n"
                       "    outputs: [{file: {path: out}}]\n")
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] > 0, what="output")
        self.assertEqual(s.stop(signal.SIGINT), 0)
        seqs = [json.loads(l)["seq"] for l in self.read_output("out")]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))

    def test_dummy_count_and_file_parts_roll_by_size(self):
        s = self.start("""
pipelines:
  p:
    input: {dummy: {count: 1000, template: '{"seq":{{seq}},"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'}}
    outputs: [{file: {path: out, max_part_bytes: 10000}}]
""")
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == 1000, what="1000 written")
        self.assertEqual(s.card("p", "input")["state"], "finished")
        self.assertEqual(s.stop(), 0)
        parts = sorted(os.listdir(self.path("out")))
        self.assertGreater(len(parts), 3)
        for p in parts:
            self.assertRegex(p, r"^part-\d{10}\.ndjson$")
            self.assertLessEqual(os.path.getsize(self.path("out", p)), 10000)
        seqs = [json.loads(l)["seq"] for l in self.read_output("out")]
        self.assertEqual(seqs, list(range(1, 1001)))

    def test_file_parts_roll_by_time(self):
        s = self.start("""
pipelines:
  p:
    input: {dummy: {rate_per_sec: 50}}
    outputs: [{file: {path: out, max_part_secs: 1}}]
""")
        wait_for(lambda: len(os.listdir(self.path("out"))) >= 3 if os.path.isdir(self.path("out")) else False,
                 timeout=20, what="three parts rolled by age")
        self.assertEqual(s.stop(), 0)
        seqs = [json.loads(l)["seq"] for l in self.read_output("out")]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))  # name order is write order

    def test_quickstart_runs_and_answers(self):
        with open(os.path.join(EXAMPLES, "quickstart.yaml")) as f:
            config = f.read()
        s = self.start(config, stdout=subprocess.DEVNULL)
        wait_for(lambda: s.card("readings", "outputs[0]")["messages_out"] > 5, what="quickstart output")
        self.assertEqual(s.get("/health")[0], 200)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    import unittest
    unittest.main()


class MetricsTest(KayakTest):
    """/metrics in Prometheus's text format, linted by promtool against a live server."""

    def test_metrics_pass_promtool_and_carry_every_family(self):
        src = self.write_ndjson("in.ndjson", [{"k": f"k{i % 5}", "v": i} for i in range(200)])
        s = self.start(f"""
buckets:
  sums: {{}}
pipelines:
  files:
    input: {{file: {{path: {src}}}}}
    transforms:
      - bucket: {{name: sums, key: k, op: add, field: v}}
    outputs: [{{file: {{path: out}}}}]
  web:
    input: {{http: {{path: /ingest}}}}
    outputs: [{{file: {{path: web}}}}]
""", server_config="listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 30}\n",
                       state_dir=self.path("state"))
        post_until_taken(s, "/ingest", b'{"a":1}\n{"a":2}\n')
        self.assertEqual(http("POST", s.url + "/ingest", b"not json")[0], 400)
        wait_for(lambda: all(r["committed"] >= 2 for r in region_stats(s)), what="two checkpoints")
        status, text = s.get("/metrics")
        self.assertEqual(status, 200)
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                              text=True, timeout=30)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        for family in ["process_cpu_seconds_total", "process_resident_memory_bytes",
                       "process_open_fds", "process_start_time_seconds",
                       "kayak_component_state_since_seconds", "kayak_output_retries_total",
                       "kayak_checkpoint_written_bytes_total", "kayak_checkpoint_reused_bytes_total"]:
            self.assertRegex(text, rf"(?m)^{family}(\{{|\s)", family)
        self.assertRegex(text, r'(?m)^kayak_checkpoint_duration_seconds_bucket\{region="[^"]+",le="\+Inf"\} [1-9]')
        self.assertRegex(text, r'(?m)^kayak_checkpoint_barrier_pause_seconds_count\{region="[^"]+"\} [1-9]')
        self.assertRegex(text, r'(?m)^kayak_http_ingest_requests_total\{pipeline="web",code="202"\} 1$')
        self.assertRegex(text, r'(?m)^kayak_http_ingest_requests_total\{pipeline="web",code="400"\} 1$')
        self.assertRegex(text, r'(?m)^kayak_http_log_fsync_seconds_count\{pipeline="web"\} [1-9]')
        # the file input has read its file: nothing behind
        self.assertRegex(text, r'(?m)^kayak_input_lag_bytes\{pipeline="files",component="input",type="file"\} 0$')
        self.assertNotIn("_ms", "".join(l for l in text.splitlines() if l.startswith("# TYPE")))

    def test_overview_and_checkpoint_history(self):
        src = self.write_ndjson("in.ndjson", [{"k": "a", "v": 1}])
        s = self.start(f"""
buckets:
  sums: {{}}
pipelines:
  p:
    input: {{file: {{path: {src}}}}}
    transforms:
      - bucket: {{name: sums, key: k, op: add, field: v}}
    outputs: [{{file: {{path: out}}}}]
  q:
    input: {{pipeline: p}}
    transforms:
      - lookup: {{bucket: sums, key: k, as: total}}
    outputs: [{{file: {{path: out2}}}}]
""", server_config="listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 30}\n",
                       state_dir=self.path("state"))
        wait_for(lambda: committed(s) >= 3, what="three checkpoints")
        o = s.get_json("/api/v1/overview")
        self.assertTrue(o["ready"])
        self.assertEqual(o["reasons"], [])
        self.assertEqual([p["id"] for p in o["pipelines"]], ["p", "q"])
        self.assertEqual(o["pipelines"][0]["buckets"], [{"bucket": "sums", "writes": True}])
        self.assertEqual(o["pipelines"][1]["buckets"], [{"bucket": "sums", "writes": False}])
        self.assertEqual(o["pipelines"][1]["upstreams"], ["p"])
        self.assertEqual(o["buckets"], [{"name": "sums", "size": 1}])
        self.assertNotIn("config", o["pipelines"][0])
        (region,) = o["checkpoints"]["regions"]
        history = region["history"]
        self.assertGreaterEqual(len(history), 3)
        ids = [h["id"] for h in history]
        self.assertEqual(ids, sorted(ids, reverse=True))  # newest first
        self.assertEqual(history[0]["status"], "committed")
        self.assertGreaterEqual(region["bytes_written_total"], history[0]["bytes_written"])
        card = o["pipelines"][0]["components"][0]
        self.assertEqual(card["lag"], {"value": 0, "unit": "bytes"})
        self.assertEqual(o["pipelines"][0]["components"][-1]["retries"], 0)
        # every checkpoint so far is in the history (fewer than its bound of 50)
        self.assertEqual(len(history), region["committed"] + region["abandoned"])


class ListenerTlsTest(KayakTest):
    """The listener over TLS (the server config's `tls`), with certificates
    from a throwaway CA (tls_ca.py): https with keep-alive, plain HTTP told to
    use https, client certificates, and a certificate changed while serving."""

    def setUp(self):
        super().setUp()
        import tls_ca
        self.ca = tls_ca.make(self.path("ca"))
        self.ca_file = os.path.join(self.ca, "ca.crt")

    def context(self, client_cert=False):
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if client_cert:
            ctx.load_cert_chain(os.path.join(self.ca, "client.crt"),
                                os.path.join(self.ca, "client.key"))
        return ctx

    def server_config(self, cert="server.crt", key="server.key", client_ca=None):
        tls = f"cert_file: {self.cert(cert)}, key_file: {self.cert(key)}"
        if client_ca:
            tls += f", client_ca_file: {client_ca}"
        return f"listen: 127.0.0.1:0\ntls: {{{tls}}}\n"

    def cert(self, name):
        return name if os.path.isabs(name) else os.path.join(self.ca, name)

    def served_certificate(self, url):
        """The certificate the listener presents now (DER), unverified."""
        port = int(url.rsplit(":", 1)[1])
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                return tls.getpeercert(binary_form=True)

    def der(self, name):
        with open(os.path.join(self.ca, name)) as f:
            return ssl.PEM_cert_to_DER_cert(f.read())

    def test_https_with_keep_alive_and_logged_posts(self):
        config = ("pipelines:\n  p:\n    input: {http: {path: /in}}\n"
                  "    outputs: [{file: {path: out}}]\n")
        s = self.start(config, server_config=self.server_config() +
                       "checkpoint: {interval_secs: 1}\n", state_dir=self.path("state"),
                       context=self.context())
        self.assertTrue(s.url.startswith("https://"), s.url)
        self.assertEqual(s.get_json("/health")["status"], "ok")
        port = int(s.url.rsplit(":", 1)[1])
        post_until_taken(s, "/in", b'{"n": -1}')
        # Several connections at once, each posting in turn over one kept-alive
        # connection: answers from the log's group commit reach each.
        errors = []

        def poster(worker):
            conn = HTTPSConnection("localhost", port, context=self.context(),
                                               timeout=10)
            try:
                conn.connect()
                first = conn.sock
                for i in range(50):
                    conn.request("POST", "/in", body=json.dumps({"n": worker * 100 + i}))
                    r = conn.getresponse()
                    body = r.read()
                    if r.status != 202:
                        errors.append((r.status, body))
                    if conn.sock is not first:
                        errors.append("the connection was not kept alive")
            finally:
                conn.close()
        threads = [threading.Thread(target=poster, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        self.assertEqual(errors, [])
        want = {-1} | {w * 100 + i for w in range(4) for i in range(50)}
        wait_for(lambda: {json.loads(l)["n"] for l in self.read_output("out")} == want,
                 what="every post in the output")
        # Plain HTTP is answered in plain HTTP, saying to use https.
        status, _, body = http("GET", s.url.replace("https://", "http://") + "/health")
        self.assertEqual(status, 400)
        self.assertIn("use https://", json.loads(body)["error"])
        self.assertEqual(s.stop(), 0)
        self.assertIn("TLS handshakes failed", s.stderr())

    def test_a_client_ca_requires_a_client_certificate(self):
        s = self.start("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n",
                       server_config=self.server_config(client_ca=self.ca_file),
                       context=self.context(client_cert=True))
        self.assertEqual(s.get_json("/health")["status"], "ok")
        # Without one the handshake (or, under TLS 1.3, the first read) fails.
        with self.assertRaises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            http("GET", s.url + "/health", context=self.context())
        self.assertEqual(s.stop(), 0)
        # A client certificate that does not chain to the client CA is refused.
        other = self.start("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n",
                           server_config=self.server_config(
                               client_ca=os.path.join(self.ca, "other-ca.crt")),
                           context=self.context(client_cert=True))
        with self.assertRaises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            http("GET", other.url + "/health", context=self.context(client_cert=True))
        self.assertEqual(other.stop(), 0)

    def test_a_changed_certificate_is_served_without_a_restart(self):
        cert, key = self.path("live.crt"), self.path("live.key")
        shutil.copy(os.path.join(self.ca, "server.crt"), cert)
        shutil.copy(os.path.join(self.ca, "server.key"), key)
        s = self.start("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n",
                       server_config=self.server_config(cert, key), context=self.context())
        self.assertEqual(self.served_certificate(s.url), self.der("server.crt"))
        port = int(s.url.rsplit(":", 1)[1])
        kept = HTTPSConnection("localhost", port, context=self.context(), timeout=10)
        kept.request("GET", "/health")
        self.assertEqual(kept.getresponse().read(), b'{"status":"ok"}')
        # A certificate and a key that do not match: the last good pair serves on.
        shutil.copy(os.path.join(self.ca, "expired.crt"), cert + ".new")
        os.replace(cert + ".new", cert)
        wait_for(lambda: "was not reloaded" in s.stderr(), what="the failed reload logged")
        self.assertIn("is not the key of tls.cert_file", s.stderr())
        self.assertEqual(self.served_certificate(s.url), self.der("server.crt"))
        # The key follows: the new pair serves the next connections.
        shutil.copy(os.path.join(self.ca, "expired.key"), key + ".new")
        os.replace(key + ".new", key)
        wait_for(lambda: self.served_certificate(s.url) == self.der("expired.crt"),
                 what="the new certificate served")
        # The connection opened before it goes on with the old one.
        kept.request("GET", "/health")
        self.assertEqual(kept.getresponse().read(), b'{"status":"ok"}')
        kept.close()
        # SIGHUP loads the files again and stops nothing.
        reloads = s.stderr().count("certificate was reloaded")
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: s.stderr().count("certificate was reloaded") > reloads,
                 what="a reload on SIGHUP")
        self.assertIsNone(s.proc.poll())
        self.assertEqual(self.served_certificate(s.url), self.der("expired.crt"))
        self.assertEqual(s.stop(), 0)

    def test_a_certificate_that_does_not_load_stops_the_start(self):
        with open(self.path("p.yaml"), "w") as f:
            f.write("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n")
        cases = [
            (self.server_config(key="expired.key"), "is not the key of tls.cert_file"),
            (self.server_config(cert=self.path("absent.crt")), "tls.cert_file"),
            (self.server_config(client_ca=self.path("absent.crt")), "tls.client_ca_file"),
            ("listen: 127.0.0.1:0\ntls: {cert_file: x.crt}\n", "tls needs cert_file and key_file"),
            ("listen: 127.0.0.1:0\ntls: {cert_file: x.crt, key_file: y, ca_file: z}\n",
             "unknown key 'ca_file' in tls"),
        ]
        for server_config, says in cases:
            with open(self.path("server.yaml"), "w") as f:
                f.write(server_config)
            r = run(["--config", self.path("p.yaml"), "--server-config", self.path("server.yaml")])
            self.assertEqual(r.returncode, 2, (server_config, r.stderr))
            self.assertIn(says, r.stderr, server_config)
