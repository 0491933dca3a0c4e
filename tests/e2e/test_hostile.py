"""Hostile input: no request, post or config crashes, wedges or exhausts the server.

Each test starts the real binary, sends what a hostile (or careless) client would, and then
checks that the server still answers and that what it refused is named. The ones whose input
was accepted once (a logged post) restart the server and check it stays up.
"""
import json
import os
import re
import socket
import threading
import time

from harness import KayakTest, http, post_until_taken, run, wait_for


def alive(s):
    try:
        status, _, _ = http("GET", s.url + "/health")
    except OSError:  # refused (the listener full) is not an answer
        return False
    return status == 200 and s.proc.poll() is None


PIPELINE = """
buckets:
  kept: {}
pipelines:
  web:
    input: {http: {path: /ingest/web}}
    transforms:
      - bucket: {name: kept, key: k, op: set, field: v}
    outputs: [{file: {path: out}}]
"""


class NonUtf8Test(KayakTest):
    def test_ids_keys_and_bodies_that_are_not_utf8_get_answers_not_a_crash(self):
        state = self.path("state")
        s = self.start(PIPELINE, state_dir=state)
        for method, path, body, want in [
            ("DELETE", "/api/v1/pipelines/%FF", None, 404),
            ("POST", "/api/v1/pipelines/%FF/restart", None, 404),
            ("POST", "/api/v1/pipelines/%FF/revert", None, 404),
            ("PUT", "/api/v1/buckets/%C0", b"{}", 400),
            ("PUT", "/api/v1/pipelines/%FF", b"input: {dummy: {}}\n", 400),
            ("GET", "/api/v1/pipelines/%FF", None, 404),
            ("GET", "/api/v1/buckets/%FF", None, 404),
            ("GET", "/api/v1/buckets/kept?key=%FF", None, 404),
        ]:
            status, _, text = http(method, s.url + path, body)
            self.assertEqual(status, want, f"{method} {path}: {text}")
            json.loads(text)  # valid JSON, the bytes replaced
            self.assertTrue(alive(s), f"{method} {path} took the server down")
        # A body with a byte that is not UTF-8, in a key and in a comment.
        for body in (b"input: {dummy: {}}\n\xff: 1\n", b"# caf\xe9\ninput: {dummy: {}}\n"):
            status, _, text = http("PUT", s.url + "/api/v1/pipelines/odd", body)
            self.assertEqual(status, 400, text)
            self.assertIn("UTF-8", json.loads(text)["error"])
        # The graph manager still makes changes, whole.
        status, _, text = http("PUT", s.url + "/api/v1/pipelines/later",
                               b"input: {dummy: {count: 1}}\noutputs: [{file: {path: later}}]\n")
        self.assertEqual(status, 201, text)
        status, _, text = http("DELETE", s.url + "/api/v1/pipelines/later")
        self.assertEqual(status, 200, text)
        self.assertEqual(http("GET", s.url + "/api/v1/pipelines/later")[0], 404)
        self.assertEqual(s.stop(), 0)
        # ...and the graph file it wrote starts again.
        s2 = self.start(PIPELINE, state_dir=state)
        self.assertTrue(alive(s2))
        self.assertEqual(http("GET", s2.url + "/api/v1/pipelines/later")[0], 404)

    def test_a_config_file_that_is_not_utf8_is_a_config_error(self):
        with open(self.path("bad.yaml"), "wb") as f:
            f.write(b"pipelines:\n  p:\n    input: {dummy: {}}\n    # \xff\n")
        r = run(["check", self.path("bad.yaml")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("UTF-8", r.stdout + r.stderr)


def nested(depth, inner="1"):
    return "[" * depth + inner + "]" * depth


class DepthTest(KayakTest):
    def test_ingest_refuses_nesting_past_the_limit_and_takes_it_at_the_limit(self):
        state = self.path("state")
        s = self.start(PIPELINE, state_dir=state)
        post_until_taken(s, "/ingest/web", b'{"k":"warm","v":1}')
        for depth in (129, 1000, 200000):
            body = nested(depth).encode()
            status, _, text = http("POST", s.url + "/ingest/web", body)
            self.assertEqual(status, 400, f"depth {depth}: {text}")
            self.assertIn("128", json.loads(text)["error"])
            self.assertTrue(alive(s), f"depth {depth}")
        # An object value 100,000 deep for the bucket: refused before it is logged.
        deep = '{"k":"x","v":' + '{"a":' * 100000 + "1" + "}" * 100000 + "}"
        status, _, text = http("POST", s.url + "/ingest/web", deep.encode())
        self.assertEqual(status, 400, text)
        # At the limit: taken, kept in the bucket, written out.
        ok = '{"k":"deep","v":' + nested(127) + "}"
        status, _, text = http("POST", s.url + "/ingest/web", ok.encode())
        self.assertEqual(status, 202, text)
        wait_for(lambda: http("GET", s.url + "/api/v1/buckets/kept?key=deep")[0] == 200,
                 what="the deep value in the bucket")
        self.assertEqual(s.stop(), 0)
        s2 = self.start(PIPELINE, state_dir=state)
        self.assertTrue(alive(s2))
        status, _, text = http("GET", s2.url + "/api/v1/buckets/kept?key=deep")
        self.assertEqual(status, 200, text)

    def test_a_file_input_counts_a_line_nested_too_deep(self):
        src = self.path("in.ndjson")
        with open(src, "w") as f:
            f.write('{"k":"a","v":1}\n' + '{"k":"b","v":' + nested(5000) + "}\n" + '{"k":"c","v":3}\n')
        s = self.start(f"""
pipelines:
  p:
    input: {{file: {{path: {src}}}}}
    outputs: [{{file: {{path: out}}}}]
""")
        wait_for(lambda: len(self.read_output("out")) == 2, what="the two good lines")
        card = s.card("p", "input")
        self.assertEqual(card["errors"], 1, card)
        self.assertTrue(alive(s))

    def test_a_config_nested_too_deep_is_refused(self):
        body = ("input: {dummy: {}}\nx: " + nested(300) + "\n").encode()
        s = self.start(PIPELINE)
        status, _, text = http("PUT", s.url + "/api/v1/pipelines/deep", body)
        self.assertEqual(status, 400, text)
        self.assertIn("nested", text)
        # Deeper than yaml-cpp's own guard, in block style.
        block = "input: {dummy: {}}\nx:\n" + "".join("  " * i + "- \n" for i in range(1, 3000))
        status, _, text = http("PUT", s.url + "/api/v1/pipelines/deep", block.encode())
        self.assertEqual(status, 400, text)
        self.assertTrue(alive(s))


class AliasBombTest(KayakTest):
    def test_a_yaml_alias_bomb_is_refused_at_once(self):
        s = self.start(PIPELINE)
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        for i in range(1, 10):
            prev = f"*a{i - 1}"
            lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
        body = ("input: {dummy: {}}\n" + "\n".join(lines) + "\n").encode()
        # (A bomb that ran would hold the change thread for minutes: http() gives up at 10 s.)
        status, _, text = http("PUT", s.url + "/api/v1/pipelines/bomb", body)
        self.assertEqual(status, 400, text)
        self.assertIn("nodes", json.loads(text)["error"])
        status, _, text = http("PUT", s.url + "/api/v1/pipelines/after",
                               b"input: {dummy: {count: 1}}\n")
        self.assertEqual(status, 201, text)


LUA = """
pipelines:
  web:
    input: {{http: {{path: /ingest/lua}}}}
    transforms:
      - lua: {{script: {script}, max_memory_bytes: {memory}{extra}}}
    outputs: [{{file: {{path: out}}}}]
"""


class LuaLimitsTest(KayakTest):
    def lua(self, script, memory=1048576, extra="", state_dir=None):
        return self.start(LUA.format(script=json.dumps(script), memory=memory, extra=extra),
                          state_dir=state_dir)

    def test_a_message_larger_than_the_memory_limit_is_a_transform_error(self):
        s = self.lua("function process(m) m.seen = true return m end")
        post_until_taken(s, "/ingest/lua", b'{"a":1}')
        big = json.dumps({"blob": "x" * 2000000, "more": ["y" * 1000] * 400}).encode()
        status, _, text = http("POST", s.url + "/ingest/lua", big)
        self.assertEqual(status, 202, text)
        wait_for(lambda: s.card("web", "transforms[0]")["errors"] >= 1, what="the transform error")
        self.assertIn("memory", s.card("web", "transforms[0]")["last_error"])
        self.assertTrue(alive(s))
        status, _, _ = http("POST", s.url + "/ingest/lua", b'{"a":2}')
        self.assertEqual(status, 202)
        wait_for(lambda: len(self.read_output("out")) == 2, what="the small messages")

    def test_a_result_with_shared_tables_is_bounded_by_the_memory_limit(self):
        script = ("function process(m) local t = {string.rep('z', 1000)} "
                  "for i = 1, 20 do t = {t, t} end m.out = t return m end")
        s = self.lua(script)
        post_until_taken(s, "/ingest/lua", b'{"a":1}')
        wait_for(lambda: s.card("web", "transforms[0]")["errors"] >= 1, what="the transform error")
        self.assertIn("larger than max_memory_bytes", s.card("web", "transforms[0]")["last_error"])
        self.assertTrue(alive(s))

    def test_a_backtracking_pattern_stops_at_the_time_limit_and_a_stop_is_not_held(self):
        script = ("function process(m) local s = string.rep('a', 4000) "
                  "m.found = string.find(s, string.rep('a*', 12) .. 'b') return m end")
        s = self.lua(script, memory=67108864, extra=", max_time_ms: 300")
        post_until_taken(s, "/ingest/lua", b'{"a":1}')
        wait_for(lambda: s.card("web", "transforms[0]")["errors"] >= 1, timeout=60,
                 what="the time limit")
        self.assertIn("time limit of 300 ms", s.card("web", "transforms[0]")["last_error"])
        # The state is built again: the next message runs the script afresh.
        http("POST", s.url + "/ingest/lua", b'{"a":2}')
        wait_for(lambda: s.card("web", "transforms[0]")["errors"] >= 2, timeout=60,
                 what="the second time limit")
        self.assertTrue(alive(s))
        # A stop with a post in the pattern (or about to reach it: the stop drains it into
        # the pattern) is not held by the script: well within the 30 s stop timeout.
        http("POST", s.url + "/ingest/lua", b'{"a":3}')
        self.assertEqual(s.stop(timeout=15), 0)

    def test_gsub_and_gmatch_are_bounded_and_still_work(self):
        script = ("function process(m) "
                  "m.g = string.gsub('a-b-c', '%-', function(x) return '+' end) "
                  "local n = 0 for w in string.gmatch('one two three', '%a+') do n = n + 1 end "
                  "m.n = n m.t = ('x1y2'):gsub('%d', {['1'] = 'one'}) "
                  "if m.slow then m.s = string.gsub(string.rep('a', 3000), string.rep('a*', 10) .. 'b', 'c') end "
                  "return m end")
        s = self.lua(script, memory=67108864, extra=", max_time_ms: 300")
        post_until_taken(s, "/ingest/lua", b'{"a":1}')
        wait_for(lambda: len(self.read_output("out")) == 1, what="the output")
        got = json.loads(self.read_output("out")[0])
        self.assertEqual((got["g"], got["n"], got["t"]), ("a+b+c", 3, "xoney2"))
        http("POST", s.url + "/ingest/lua", b'{"slow":true}')
        wait_for(lambda: s.card("web", "transforms[0]")["errors"] >= 1, timeout=60,
                 what="the time limit in gsub")
        self.assertIn("time limit", s.card("web", "transforms[0]")["last_error"])
        http("POST", s.url + "/ingest/lua", b'{"a":2}')
        wait_for(lambda: len(self.read_output("out")) == 2, what="the next message")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class ListenerExhaustionTest(KayakTest):
    SERVER = ("listen: 127.0.0.1:0\nlimits: {max_body_bytes_in_flight: 8388608, "
              "max_connections: 64, max_connections_per_client: 32, header_timeout_secs: 2, "
              "read_timeout_secs: 30}\n")

    def addr(self, s):
        host, port = s.url.replace("http://", "").split(":")
        return host, int(port)

    def test_bodies_are_not_reserved_and_share_a_budget(self):
        s = self.start(PIPELINE, server_config=self.SERVER)
        post_until_taken(s, "/ingest/web", b'{"k":"a","v":1}')
        before = rss_bytes(s.proc.pid)
        # Declared large, sent small: nothing is reserved for what has not arrived.
        socks = []
        for _ in range(40):
            c = socket.create_connection(self.addr(s), timeout=10)
            c.sendall(b"POST /ingest/web HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10485759\r\n\r\n{")
            socks.append(c)
        self.assertTrue(alive(s))
        self.assertLess(rss_bytes(s.proc.pid) - before, 64 << 20)
        for c in socks:
            c.close()
        # Once the server has let those go (a request outside the probes' places answers)...
        wait_for(lambda: http("GET", s.url + "/api/v1/pipelines")[0] == 200,
                 what="the listener to let the closed connections go")
        # ...sent for real: past the 8 MiB held at once, 503 with Retry-After.
        socks, answers = [], []
        for _ in range(6):
            c = socket.create_connection(self.addr(s), timeout=10)
            c.sendall(b"POST /ingest/web HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4194304\r\n\r\n"
                      + b" " * (2 << 20))
            socks.append(c)
        for c in socks:
            c.settimeout(2)
            try:
                answers.append(c.recv(4096))
            except socket.timeout:
                answers.append(b"")
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        self.assertGreaterEqual(len(refused), 2, answers)
        self.assertIn(b"max_body_bytes_in_flight", b"".join(refused))
        self.assertIn(b"Retry-After", refused[0])
        self.assertTrue(alive(s))
        for c in socks:
            c.close()
        # The budget comes back once those connections are gone.
        wait_for(lambda: http("POST", s.url + "/ingest/web", b'{"k":"b","v":2}')[0] == 202,
                 what="a post once the bodies were let go")

    def test_slow_headers_are_cut_and_probes_answer_meanwhile(self):
        s = self.start(PIPELINE, server_config=self.SERVER)
        slow = []
        for _ in range(120):
            try:
                c = socket.create_connection(self.addr(s), timeout=10)
                c.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
                slow.append(c)
            except OSError:
                pass
        # Probes answer while the listener is full of half-open connections.
        wait_for(lambda: alive(s), timeout=10, what="/health while the listener is full")
        status, _, _ = http("GET", s.url + "/ready")
        self.assertIn(status, (200, 503))
        # The slow ones are let go at the header timeout (2 s), not the read timeout (30 s).
        # (recv raises socket.timeout past 10 s.)
        slow[0].settimeout(10)
        self.assertEqual(slow[0].recv(4096), b"")
        status, _, _ = http("GET", s.url + "/api/v1/pipelines")
        self.assertEqual(status, 200)
        # Refusals are one line per interval, not one each.
        refused = [l for l in s.stderr_lines if "connections refused" in l]
        self.assertLessEqual(len(refused), 2, refused)
        for c in slow:
            c.close()


class LogCorruptionTest(KayakTest):
    def test_a_flipped_bit_mid_log_refuses_the_start_and_keeps_the_file(self):
        state = self.path("state")
        cfg = ("pipelines:\n  web:\n    input: {http: {path: /ingest/web}}\n"
               "    outputs: [{file: {path: out}}]\n")
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\nstop_timeout_secs: 2\n"
        s = self.start(cfg, state_dir=state, server_config=server)
        for i in range(3):
            post_until_taken(s, "/ingest/web", json.dumps({"i": i, "pad": "p" * 50}).encode())
        s.kill()
        logdir = os.path.join(state, "http", "web")
        seg = os.path.join(logdir, sorted(os.listdir(logdir))[-1])
        with open(seg, "r+b") as f:
            data = bytearray(f.read())
            at = data.index(b'"i": 1') + 2  # inside the second post's payload
            data[at] ^= 0x01
            f.seek(0)
            f.write(data)
        size = os.path.getsize(seg)
        # The input does not start (its pipeline is failed, /ready says why, its region
        # commits no checkpoint past the posts), and nothing of the file is cut.
        s2 = self.start(cfg, state_dir=state, server_config=server)
        wait_for(lambda: s2.card("web", "input")["state"] == "failed", what="the input refused")
        self.assertIn("damaged", s2.card("web", "input")["last_error"])
        status, _, text = http("GET", s2.url + "/ready")
        self.assertEqual(status, 503, text)
        self.assertEqual(os.path.getsize(seg), size)
        # Its region cannot take the stop's savepoint: exit 1, the file still whole.
        self.assertEqual(s2.stop(timeout=60), 1)
        self.assertEqual(os.path.getsize(seg), size)


class OpenDefaultTest(KayakTest):
    def test_a_foreign_host_or_origin_is_refused(self):
        s = self.start(PIPELINE)
        post_until_taken(s, "/ingest/web", b'{"k":"a","v":1}')
        # A DNS-rebinding page: its own name in Host, on 127.0.0.1.
        for host in ("evil.example", "127.evil.example", "localhost.evil.example:7070"):
            status, _, text = http("GET", s.url + "/api/v1/pipelines", headers={"Host": host})
            self.assertEqual(status, 403, f"{host}: {text}")
            self.assertIn("Host", json.loads(text)["error"])
        # A cross-origin form post (text/plain) to ingest, restart or a checkpoint.
        for method, path in (("POST", "/ingest/web"), ("POST", "/api/v1/pipelines/web/restart"),
                             ("POST", "/api/v1/checkpoints"), ("DELETE", "/api/v1/pipelines/web")):
            status, _, text = http(method, s.url + path, b'{"k":"x","v":1}',
                                   headers={"Origin": "http://evil.example",
                                            "Content-Type": "text/plain"})
            self.assertEqual(status, 403, f"{method} {path}: {text}")
        status, _, _ = http("POST", s.url + "/ingest/web", b'{"k":"y","v":1}',
                            headers={"Origin": "null"})
        self.assertEqual(status, 403)
        # The dashboard's own origin, and a plain client with no Origin, are served.
        status, _, text = http("POST", s.url + "/ingest/web", b'{"k":"z","v":1}',
                               headers={"Origin": s.url})
        self.assertEqual(status, 202, text)
        self.assertEqual(http("GET", s.url + "/api/v1/pipelines/web")[0], 200)
        # A name the server config allows.
        s2 = self.start(PIPELINE.replace("/ingest/web", "/ingest/two"),
                        server_config="listen: 127.0.0.1:0\nallowed_hosts: [kayak.internal]\n")
        status, _, _ = http("GET", s2.url + "/api/v1/pipelines", headers={"Host": "kayak.internal:80"})
        self.assertEqual(status, 200)

    def test_a_listener_off_loopback_needs_a_token_or_auth_none(self):
        with open(self.path("p.yaml"), "w") as f:
            f.write("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n")
        with open(self.path("s.yaml"), "w") as f:
            f.write("listen: 0.0.0.0:0\n")
        r = run(["--config", self.path("p.yaml"), "--server-config", self.path("s.yaml")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("auth: none", r.stderr)

    def test_a_token_file_others_can_read_is_refused(self):
        with open(self.path("token"), "w") as f:
            f.write("s3cret\n")
        os.chmod(self.path("token"), 0o644)
        with open(self.path("p.yaml"), "w") as f:
            f.write("pipelines:\n  p:\n    input: {dummy: {count: 0}}\n")
        with open(self.path("s.yaml"), "w") as f:
            f.write(f"listen: 127.0.0.1:0\nauth: {{token_file: {self.path('token')}}}\n")
        r = run(["--config", self.path("p.yaml"), "--server-config", self.path("s.yaml")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("chmod 600", r.stderr)
        self.assertNotIn("s3cret", r.stderr)


class ReservedPathTest(KayakTest):
    def test_an_http_input_cannot_take_a_path_the_dashboard_serves(self):
        for path in ("/ui/app.js", "/index.html", "/ui"):
            with open(self.path("p.yaml"), "w") as f:
                f.write(f"pipelines:\n  web:\n    input: {{http: {{path: {path}}}}}\n")
            r = run(["check", self.path("p.yaml")])
            self.assertEqual(r.returncode, 2, path)
            self.assertIn("dashboard", r.stdout + r.stderr)


class BucketKeyLimitTest(KayakTest):
    CFG = """
buckets:
  kept: {{max_keys: 100, on_full: {policy}}}
pipelines:
  web:
    input: {{http: {{path: /ingest/keys}}}}
    transforms:
      - bucket: {{name: kept, key: k, op: add, field: v}}
    outputs: [{{file: {{path: out}}}}]
"""

    def flood(self, s, first, n):
        body = "\n".join(json.dumps({"k": f"key{i}", "v": 1}) for i in range(first, first + n))
        post_until_taken(s, "/ingest/keys", body.encode())

    def test_new_keys_past_max_keys_are_refused_and_counted(self):
        state = self.path("state")
        s = self.start(self.CFG.format(policy="refuse"), state_dir=state)
        self.flood(s, 0, 300)
        wait_for(lambda: len(self.read_output("out")) == 300, what="every message passed on")
        b = s.get_json("/api/v1/buckets/kept")
        self.assertEqual((b["size"], b["max_keys"], b["on_full"], b["refused_keys"]),
                         (100, 100, "refuse", 200))
        line = [l for l in s.get("/metrics")[1].splitlines()
                if l.startswith('kayak_bucket_refused_keys_total{bucket="kept"} ')]
        self.assertEqual([float(l.split()[-1]) for l in line], [200.0])
        # Keys it holds are still written.
        self.flood(s, 0, 10)
        wait_for(lambda: s.get_json("/api/v1/buckets/kept?key=key0")["value"] == 2,
                 what="a held key written again")
        # After kill -9 the bucket is what it was: the refused keys were never in it.
        self.assertEqual(http("POST", s.url + "/api/v1/checkpoints", b"")[0], 200)
        s.kill()
        s2 = self.start(self.CFG.format(policy="refuse"), state_dir=state)
        b = s2.get_json("/api/v1/buckets/kept")
        self.assertEqual(b["size"], 100)
        self.assertEqual(http("GET", s2.url + "/api/v1/buckets/kept?key=key250")[0], 404)
        # The limit is tuning: raised through the API, the entries stay and new keys go in.
        status, _, text = http("PUT", s2.url + "/api/v1/buckets/kept",
                               b"{max_keys: 150, on_full: refuse}")
        self.assertEqual(status, 200, text)
        self.assertEqual(s2.get_json("/api/v1/buckets/kept")["size"], 100)
        self.flood(s2, 1000, 80)
        wait_for(lambda: s2.get_json("/api/v1/buckets/kept")["size"] == 150,
                 what="new keys up to the raised limit")

    def test_evict_oldest_keeps_the_newest_keys(self):
        s = self.start(self.CFG.format(policy="evict_oldest"))
        self.flood(s, 0, 300)
        wait_for(lambda: s.get_json("/api/v1/buckets/kept")["evicted_keys"] == 200,
                 what="the evictions")
        self.assertEqual(s.get_json("/api/v1/buckets/kept")["size"], 100)
        self.assertEqual(http("GET", s.url + "/api/v1/buckets/kept?key=key0")[0], 404)
        self.assertEqual(http("GET", s.url + "/api/v1/buckets/kept?key=key299")[0], 200)


class LogForgeryTest(KayakTest):
    def test_outside_text_cannot_start_a_log_line(self):
        script = ('function process(m) error("boom\\n2030-01-01T00:00:00.000 info forged line '
                  '\\27[31m") end')
        s = self.start(LUA.format(script=json.dumps(script), memory=1048576, extra=""))
        post_until_taken(s, "/ingest/lua", b'{"a":1}')
        wait_for(lambda: "forged line" in s.stderr(), what="the error in the log")
        forged = [l for l in s.stderr_lines if l.startswith("2030-01-01")]
        self.assertEqual(forged, [])
        self.assertIn("boom\\n2030-01-01", s.stderr())
        self.assertIn("\\x1b[31m", s.stderr())


class LongStartTest(KayakTest):
    def test_a_stop_during_a_long_start_is_honoured_at_once(self):
        # Thousands of pipelines take a while to build; a stop does not wait for it.
        cfg = "pipelines:\n" + "".join(
            f"  p{i}:\n    input: {{dummy: {{count: 1}}}}\n    outputs: [{{file: {{path: out/p{i}}}}}]\n"
            for i in range(3000))
        state = self.path("state")
        s = self.start(cfg, state_dir=state, wait=False)
        wait_for(lambda: os.path.exists(os.path.join(state, "LOCK")) or s.proc.poll() is not None,
                 timeout=60, what="the state directory locked (the config read)")
        self.assertEqual(s.stop(timeout=15), 0, s.stderr())
        self.assertIn("while starting", s.stderr())


def raw_request(s, head, timeout=5):
    """Sends `head` (the request line and headers, no body) and returns what comes back
    within `timeout` seconds, without sending the body the headers declare."""
    host, port = s.url.replace("http://", "").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as c:
        c.sendall(head)
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                chunk = c.recv(4096)
                if not chunk:
                    break
                got += chunk
        except socket.timeout:
            pass
        return got


class HeaderFirstTest(KayakTest):
    """What the header alone decides is answered before the body is read."""

    def test_refusals_on_the_header_come_before_the_body(self):
        token = self.path("token")
        with open(token, "w") as f:
            f.write("s3cret\n")
        os.chmod(token, 0o600)
        cfg = PIPELINE.replace("{http: {path: /ingest/web}}",
                               "{http: {path: /ingest/web, token: in-token}}")
        s = self.start(cfg, server_config=f"listen: 127.0.0.1:0\nauth: {{token_file: {token}}}\n")
        big = b"Content-Length: 9000000\r\n\r\n"
        for head, want in [
            (b"PUT /api/v1/pipelines/x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + big, b" 401 "),
            (b"PUT /api/v1/pipelines/x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Authorization: Bearer wrong\r\n" + big, b" 403 "),
            (b"POST /ingest/web HTTP/1.1\r\nHost: 127.0.0.1\r\n" + big, b" 401 "),
            (b"POST /ingest/web HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Authorization: Bearer s3cret\r\n" + big, b" 403 "),
            (b"PUT /ingest/web HTTP/1.1\r\nHost: 127.0.0.1\r\n" + big, b" 405 "),
            (b"POST /api/v1/checkpoints HTTP/1.1\r\nHost: evil.example\r\n" + big, b" 403 "),
        ]:
            got = raw_request(s, head)
            self.assertIn(want, got.split(b"\r\n")[0], (head, got))
            self.assertIn(b"Connection: close", got, got)
        # A small body sent with a refused header still gets its answer (not a reset).
        status, _, text = http("PUT", s.url + "/api/v1/pipelines/x", b"input: {dummy: {}}\n" * 2000)
        self.assertEqual(status, 401, text)
        # The right tokens still get in.
        status, _, text = http("POST", s.url + "/ingest/web", b'{"k":"a","v":1}',
                               headers={"Authorization": "Bearer in-token"})
        self.assertIn(status, (202, 503), text)
        self.assertTrue(alive(s))


class StartAndOverviewTest(KayakTest):
    PIPELINES = 3000

    def config(self):
        return "pipelines:\n" + "".join(
            f"  p{i}:\n    input: {{dummy: {{count: 1}}}}\n    outputs: [{{file: {{path: out/p{i}}}}}]\n"
            for i in range(self.PIPELINES))

    def test_a_stop_while_regions_start_leaves_the_rest_unstarted(self):
        state = self.path("state")
        s = self.start(self.config(), state_dir=state)  # returns once the graph is built
        wait_for(lambda: "engine started" in s.stderr(), what="the first region started")
        self.assertEqual(s.stop(timeout=60), 0, s.stderr()[-3000:])
        started = s.stderr().count("engine started")
        self.assertLess(started, self.PIPELINES, "every region started before the stop was seen")
        self.assertIn("stopped cleanly", s.stderr())

    def test_probes_answer_while_large_reads_are_built(self):
        s = self.start(self.config())
        wait_for(lambda: s.get("/api/v1/overview")[0] == 200, what="the overview")
        host, port = s.url.replace("http://", "").split(":")
        first_bytes, lock = {}, threading.Lock()

        def answer(c, name):
            # When the answer starts to arrive: the server has built it by then.
            head = c.recv(64)
            with lock:
                first_bytes[name] = (time.monotonic(), head.split(b"\r\n")[0])
            while c.recv(1 << 20):
                pass
            c.close()

        names = [f"/api/v1/overview#{i}" for i in range(3)] + ["/metrics#3", "/health"]
        conns = [socket.create_connection((host, int(port)), timeout=60) for _ in names]
        readers = [threading.Thread(target=answer, args=(c, n)) for c, n in zip(conns, names)]
        for t in readers:
            t.start()
        # Four large reads in, then a probe: the probe is not held behind them.
        for c, name in zip(conns, names):
            path = name.split("#")[0]
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                      .encode())
        for t in readers:
            t.join(timeout=120)
        self.assertEqual(len(first_bytes), 5, first_bytes)
        self.assertTrue(all(b" 200 " in line for _, line in first_bytes.values()), first_bytes)
        last_read = max(t for name, (t, _) in first_bytes.items() if name != "/health")
        self.assertLess(first_bytes["/health"][0], last_read,
                        sorted(first_bytes.items(), key=lambda kv: kv[1][0]))


class PoisonMessageTest(KayakTest):
    """A message the process dies on is set aside after three deaths in a row."""

    CONFIG = """
buckets:
  kept: {}
pipelines:
  p:
    input: {file: {path: in.ndjson, batch_size: 4}}
    transforms:
      - bucket: {name: kept, key: k, op: set, field: v}
    outputs: [{file: {path: out}}]
    dead_letter: {file: {path: dead}}
"""

    def out_keys(self):
        keys = []
        d = self.path("out")
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            with open(os.path.join(d, name)) as f:
                keys += [json.loads(line)["k"] for line in f if line.endswith("\n")]
        return keys

    def test_the_poison_is_set_aside_and_the_rest_goes_on(self):
        wanted = [f"k{i}" for i in range(12) if i != 6]
        with open(self.path("in.ndjson"), "w") as f:
            for i in range(12):
                f.write(json.dumps({"k": "POISON" if i == 6 else f"k{i}", "v": i}) + "\n")
        state = self.path("state")
        env = {"KAYAK_CRASH_ON_PAYLOAD": "POISON"}
        deaths = 0
        s = None
        for _ in range(6):
            s = self.start(self.CONFIG, state_dir=state, wait=False, env=env)
            wait_for(lambda: s.proc.poll() is not None or set(wanted) <= set(self.out_keys()),
                     timeout=60, what="a death or every other message written")
            if s.proc.poll() is None:
                break
            deaths += 1
        self.assertEqual(deaths, 3, s.stderr())
        self.assertIsNone(s.proc.poll())
        self.assertIn("set aside a message", s.stderr())
        self.assertNotIn("POISON", self.out_keys())
        s.url = wait_for(s._find_url, what="the API address")
        card = s.card("p", "transforms[0]")
        self.assertEqual(card["set_aside"], 1, card)
        self.assertEqual(card["dead_letters"], 1, card)
        self.assertIn("set aside", card["last_error"])
        # The state saw every other message once: the bucket holds each key with its value.
        for i in range(12):
            status, body = s.get(f"/api/v1/buckets/kept?key={'POISON' if i == 6 else f'k{i}'}")
            self.assertEqual(status, 404 if i == 6 else 200, body)
        self.assertEqual(s.stop(), 0, s.stderr())
        # The poison went to the dead letters, once, with why.
        dead = [json.loads(l) for l in self.read_output("dead")]
        self.assertEqual([d["message"]["k"] for d in dead], ["POISON"], dead)
        self.assertEqual(dead[0]["reason"], "the process died on it 3 times in a row")
        self.assertEqual((dead[0]["component"], dead[0]["type"]), ("transforms[0]", "bucket"))
        # A restart does not die on it again: it is behind the committed position.
        s = self.start(self.CONFIG, state_dir=state, env=env)
        self.assertTrue(alive(s))
        self.assertEqual(s.stop(), 0)
