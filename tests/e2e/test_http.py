"""The http input: answers, limits, the write-ahead log, kill -9 with concurrent posters."""
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

from harness import Endpoint, KayakTest, committed, http as request, wait_for

SHIM = os.environ.get("KAYAK_FAULTSHIM", "")


def pipeline(out, extra="", outputs=None):
    outputs = outputs or f"[{{file: {{path: {out}}}}}]"
    return f"""
pipelines:
  web:
    input: {{http: {{path: /ingest/orders{extra}}}}}
    outputs: {outputs}
"""


def post(url, body, headers=None):
    data = body if isinstance(body, bytes) else body.encode()
    return request("POST", url, data, headers)


class Poster(threading.Thread):
    """Posts small JSON bodies with unique ids over one keep-alive connection
    until told to stop, a bounded count is reached, or the server goes away."""

    def __init__(self, url, prefix, limit, acked, lock):
        super().__init__(daemon=True)
        u = urllib.parse.urlparse(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.prefix, self.limit, self.acked, self.lock = prefix, limit, acked, lock
        self.stop = threading.Event()
        self.sent = 0

    def run(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        for i in range(self.limit):
            if self.stop.is_set():
                break
            oid = f"{self.prefix}-{i}"
            body = json.dumps({"id": oid, "n": i})
            try:
                conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
            except (OSError, http.client.HTTPException):
                break  # the server was killed: this post may or may not be logged
            self.sent += 1
            if r.status == 202:
                with self.lock:
                    self.acked.add(oid)
        conn.close()


def records_end(segment):
    """Where the last whole record of a log segment ends (docs/state_format.md):
    a 24-byte header, then records (u32 length, u32 crc, u64 seq, payload)
    until zeros, the space written ahead."""
    with open(segment, "rb") as f:
        data = f.read()
    off = 24
    while off + 16 <= len(data):
        length = int.from_bytes(data[off:off + 4], "little")
        seq = int.from_bytes(data[off + 8:off + 16], "little")
        if length == 0 or seq == 0:
            break
        off += 16 + length
    return off


def ready(s):
    """Waits until the http input serves (while it starts, posts get 503)."""
    wait_for(lambda: s.card("web", "input")["state"] == "running", what="the http input to start")
    return s


class HttpInputTest(KayakTest):
    def url(self, s, path="/ingest/orders"):
        return ready(s).url + path

    def test_answers_and_what_each_body_gives(self):
        s = self.start(pipeline(self.path("out")))
        u = self.url(s)
        status, _, body = post(u, '{"a":1}')
        self.assertEqual(status, 202, body)
        self.assertEqual(json.loads(body)["accepted"], 1)
        status, _, body = post(u, '{"a":2}\n\n{"a":3}\r\n')
        self.assertEqual((status, json.loads(body)["accepted"]), (202, 2))
        # one value over several lines is one message, written on one line
        status, _, _ = post(u, '{\n  "a": 4,\n  "b": [1,\n 2]\n}')
        self.assertEqual(status, 202)
        status, _, body = post(u, '{"a":5}\nnot json\n')
        self.assertEqual(status, 400)
        self.assertIn("line 2", json.loads(body)["error"])
        self.assertEqual(post(u, "   ")[0], 400)
        status, headers, _ = request("GET", u)
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("Allow"), "POST")
        self.assertEqual(post(s.url + "/ingest/other", "{}")[0], 404)
        wait_for(lambda: len(self.read_output("out")) >= 4, what="four messages")
        self.assertEqual([json.loads(l) for l in self.read_output("out")],
                         [{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4, "b": [1, 2]}])
        card = s.card("web", "input")
        self.assertGreaterEqual(card["errors"], 2)  # the two rejected posts

    def test_body_limit_and_token(self):
        cfg = pipeline(self.path("out"), extra=", token: s3cret")
        s = self.start(cfg, server_config="listen: 127.0.0.1:0\nlimits: {max_body_bytes: 1000}\n")
        u = self.url(s)
        self.assertEqual(post(u, "{}")[0], 401)
        self.assertEqual(post(u, "{}", {"Authorization": "Bearer wrong"})[0], 403)
        self.assertEqual(post(u, "{}", {"Authorization": "Bearer s3cret"})[0], 202)
        big = json.dumps({"x": "y" * 2000})
        self.assertEqual(post(u, big, {"Authorization": "Bearer s3cret"})[0], 413)
        self.assertNotIn("s3cret", s.stderr())

    def test_a_token_from_a_secret_file_rotates_at_a_restart_and_is_never_stored(self):
        secret = self.path("token")
        with open(secret, "w") as f:
            f.write("first-file-token\n")  # the newline `echo` leaves is cut
        cfg = pipeline(self.path("out"), extra=f", token: '${{file:{secret}}}'")
        state = self.path("state")
        s = self.start(cfg, state_dir=state)
        u = self.url(s)
        self.assertEqual(post(u, "{}", {"Authorization": "Bearer first-file-token"})[0], 202)
        self.assertEqual(post(u, "{}", {"Authorization": "Bearer second-file-token"})[0], 403)
        # The API shows the option masked and the versions the reference, not the secret.
        shown = json.dumps(s.get_json("/api/v1/pipelines/web"))
        versions = json.dumps(s.get_json("/api/v1/pipelines/web/versions"))
        self.assertNotIn("first-file-token", shown + versions)
        self.assertIn("${file:" + secret + "}", versions)
        # Rotated: a restart of the pipeline reads the file again.
        with open(secret, "w") as f:
            f.write("second-file-token")
        status, _, body = request("POST", s.url + "/api/v1/pipelines/web/restart", b"")
        self.assertEqual(status, 200, body)
        wait_for(lambda: post(u, "{}", {"Authorization": "Bearer second-file-token"})[0] == 202,
                 what="the rotated token to be taken")
        self.assertEqual(post(u, "{}", {"Authorization": "Bearer first-file-token"})[0], 403)
        s.stop()
        for name in ("first-file-token", "second-file-token"):
            self.assertNotIn(name, s.stderr())
        for root, _, files in os.walk(state):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    data = fh.read()
                for name in (b"first-file-token", b"second-file-token"):
                    self.assertNotIn(name, data, os.path.join(root, f))
        # A file that cannot be read is a config error naming the path, exit 2.
        os.remove(secret)
        with open(self.path("bad.yaml"), "w") as f:
            f.write(cfg)
        r = subprocess.run([os.environ.get("KAYAK_BIN", "kayak"), "check", self.path("bad.yaml")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"secret file '{secret}' cannot be read", r.stderr)

    def test_a_path_the_api_owns_is_a_config_error(self):
        cfg = "pipelines:\n  web:\n    input: {http: {path: /api/v1/x}}\n    outputs: [{stdout: {}}]\n"
        with open(self.path("bad.yaml"), "w") as f:
            f.write(cfg)
        r = subprocess.run([os.environ.get("KAYAK_BIN", "kayak"), "check", self.path("bad.yaml")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("taken by the admin API", r.stderr)

    def test_full_backlog_gets_503_with_retry_after(self):
        # stdout is piped and never read: the pipeline blocks, the backlog fills.
        cfg = pipeline(None, extra=", max_backlog_bytes: 2048", outputs="[{stdout: {}}]")
        s = self.start(cfg, stdout=subprocess.PIPE)
        u = self.url(s)
        line = json.dumps({"pad": "x" * 500})
        statuses = []
        for _ in range(2000):  # bounded: the pipe holds at most ~64 KiB plus a few batches
            status, headers, _ = post(u, line)
            statuses.append(status)
            if status == 503:
                self.assertEqual(headers.get("Retry-After"), "1")
                break
        self.assertIn(503, statuses)

    def test_graceful_stop_without_state_dir_delivers_every_accepted_post(self):
        s = self.start(pipeline(self.path("out")))
        acked, lock = set(), threading.Lock()
        posters = [Poster(self.url(s), f"c{i}", 300, acked, lock) for i in range(4)]
        for p in posters:
            p.start()
        wait_for(lambda: len(acked) >= 200, what="200 acknowledged posts")
        self.assertEqual(s.stop(), 0)
        for p in posters:
            p.stop.set()
            p.join(timeout=20)
        got = {json.loads(l)["id"] for l in self.read_output("out")}
        self.assertEqual(acked - got, set(), "acknowledged posts missing after a graceful stop")


class HttpLogTest(KayakTest):
    server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"

    def url(self, s):
        return ready(s).url + "/ingest/orders"

    def test_kill_9_with_concurrent_posters_loses_no_acknowledged_post(self):
        seed = int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        print(f"\nseed {seed} (KAYAK_SEED={seed} replays it)", file=sys.stderr)
        state, out = self.path("state"), self.path("out")
        cfg = pipeline(out, extra=", segment_bytes: 8192")
        acked, lock = set(), threading.Lock()
        sent = 0
        for round_ in range(3):
            s = self.start(cfg, server_config=self.server, state_dir=state)
            posters = [Poster(self.url(s), f"r{round_}c{i}", 5000, acked, lock) for i in range(6)]
            for p in posters:
                p.start()
            time.sleep(rng.uniform(0.5, 1.5))  # the random instant is what is tested
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait(timeout=30)
            for p in posters:
                p.join(timeout=20)
                sent += p.sent
            s.kill()
        s = self.start(cfg, server_config=self.server, state_dir=state)

        def found():
            return {json.loads(l)["id"] for l in self.read_output("out")}
        wait_for(lambda: acked <= found(), timeout=60, what="every acknowledged post in the output")
        got = found()
        print(f"posts sent {sent}, acknowledged {len(acked)}, found {len(acked & got)}, "
              f"missing {len(acked - got)}", file=sys.stderr)
        self.assertGreater(len(acked), 100)
        self.assertEqual(acked - got, set())
        # Segments covered by a committed checkpoint go away.
        logdir = os.path.join(state, "http", "web")
        wait_for(lambda: len(os.listdir(logdir)) <= 3, timeout=30,
                 what="covered log segments to be removed")

    def test_answers_to_many_connections_at_once_each_reach_their_own(self):
        # With the log, the answers one fdatasync acknowledged are written
        # together (one io_uring call), each without waiting for room. Two
        # clients pipeline their posts and read nothing until the server's
        # sockets to them are full (`ss` says so): the answers that found no
        # room must then go out through the slow path, whole, in order, each
        # on its own connection.
        s = self.start(pipeline(self.path("out")), server_config=self.server,
                       state_dir=self.path("state"))
        u = urllib.parse.urlsplit(self.url(s))
        conns, per = 2, 40000  # the server's send buffer grows to about 4 MB
        socks = []
        for c in range(conns):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(60)
            sock.connect((u.hostname, u.port))
            socks.append(sock)
            reqs = b"".join(
                b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s"
                % (u.path.encode(), len(body), body)
                for body in (json.dumps({"c": c, "n": n}).encode() for n in range(per)))
            threading.Thread(target=sock.sendall, args=(reqs,), daemon=True).start()
        peers = {sock.getsockname()[1] for sock in socks}

        def full():
            out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{u.port} )"],
                                 capture_output=True, text=True, check=True).stdout
            found = {}
            for m in re.finditer(r":(\d+)\s+\S+:(\d+)\s.*?skmem:\(([^)]*)\)", out, re.S):
                mem = dict(re.findall(r"([a-z]+)(\d+)", m.group(3)))
                found[int(m.group(2))] = int(mem["w"]) + 2048 >= int(mem["tb"])
            return all(found.get(p) for p in peers)
        wait_for(full, timeout=60, what="the server's sockets to both clients to be full")

        answers = [None] * conns

        def read(c):
            got, buf, pos, sock = [], b"", 0, socks[c]
            while len(got) < per:
                head_end = buf.find(b"\r\n\r\n", pos)
                if head_end >= 0:
                    head = buf[pos:head_end].decode()
                    length = int(re.search(r"Content-Length: (\d+)", head).group(1))
                    if len(buf) >= head_end + 4 + length:
                        got.append((int(head.split(" ")[1]), buf[head_end + 4:head_end + 4 + length]))
                        pos = head_end + 4 + length
                        continue
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf = buf[pos:] + chunk
                pos = 0
            sock.close()
            answers[c] = got

        readers = [threading.Thread(target=read, args=(c,)) for c in range(conns)]
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout=120)
        seqs = []
        for c in range(conns):
            self.assertEqual(len(answers[c] or []), per, f"connection {c}")
            self.assertEqual({st for st, _ in answers[c]}, {202}, f"connection {c}")
            mine = [json.loads(b)["seq"] for _, b in answers[c]]
            self.assertEqual(mine, sorted(mine), f"connection {c}: answers out of order")
            seqs += mine
        self.assertEqual(sorted(seqs), list(range(1, conns * per + 1)))
        # Each post is in the output once, each connection's in its order.
        wait_for(lambda: len(self.read_output("out")) == conns * per, timeout=60,
                 what="every post in the output")
        by_conn = {}
        for line in self.read_output("out"):
            m = json.loads(line)
            by_conn.setdefault(m["c"], []).append(m["n"])
        self.assertEqual(by_conn, {c: list(range(per)) for c in range(conns)})

    def test_a_new_path_after_a_kill_keeps_the_position_in_the_log(self):
        # The log belongs to the pipeline, the path is how posts reach it: a
        # move after a kill -9 replays only what the checkpoint does not count.
        state = self.path("state")

        def cfg(path):
            return f"""
buckets:
  c: {{}}
pipelines:
  web:
    input: {{http: {{path: {path}}}}}
    transforms:
      - bucket: {{name: c, key: k, op: count}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""
        s = self.start(cfg("/ingest/orders"), server_config=self.server, state_dir=state)
        for i in range(100):
            self.assertEqual(post(self.url(s), json.dumps({"k": "a", "i": i}))[0], 202)
        wait_for(lambda: committed(s) >= 1 and
                 s.get_json("/api/v1/buckets/c?key=a")["value"] == 100, what="100 counted")
        n = committed(s)
        wait_for(lambda: committed(s) > n, what="a checkpoint after the count")
        s.kill()
        s = self.start(cfg("/ingest/moved"), server_config=self.server, state_dir=state)
        url = ready(s).url
        self.assertEqual(post(url + "/ingest/moved", json.dumps({"k": "a", "i": 100}))[0], 202)
        wait_for(lambda: s.get_json("/api/v1/buckets/c?key=a")["value"] >= 101,
                 what="the new post counted")
        wait_for(lambda: committed(s) >= 2, what="checkpoints after the move")
        self.assertEqual(s.get_json("/api/v1/buckets/c?key=a")["value"], 101)
        self.assertEqual(post(url + "/ingest/orders", "{}")[0], 404)

    def test_a_torn_last_record_is_dropped(self):
        state = self.path("state")
        s = self.start(pipeline(self.path("out")), server_config=self.server, state_dir=state)
        for i in range(5):
            self.assertEqual(post(self.url(s), json.dumps({"i": i}))[0], 202)
        wait_for(lambda: len(self.read_output("out")) == 5, what="five messages")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        s.kill()
        logdir = os.path.join(state, "http", "web")
        seg = os.path.join(logdir, sorted(os.listdir(logdir))[-1])
        size = records_end(seg)
        self.assertGreater(os.path.getsize(seg), size)  # space written ahead, zeros
        with open(seg, "r+b") as f:  # half a record: a crash in the middle of an append
            f.seek(size)
            f.write(b"\x40\x00\x00\x00\x01\x02\x03\x04\x06\x00\x00\x00\x00\x00\x00\x00{\"i\":")
        s = self.start(pipeline(self.path("out")), server_config=self.server, state_dir=state)
        wait_for(lambda: "torn record" in s.stderr(), what="the torn record to be reported")
        self.assertEqual(os.path.getsize(seg), size)
        self.assertEqual(post(self.url(s), json.dumps({"i": 5}))[0], 202)
        wait_for(lambda: len(self.read_output("out")) >= 6, what="the new post")
        self.assertEqual([json.loads(l)["i"] for l in self.read_output("out")], list(range(6)))

    def test_full_disk_gives_503_and_posts_resume_when_space_returns(self):
        self.assertTrue(SHIM, "KAYAK_FAULTSHIM must name build/tests/faultshim.so (ctest sets it)")
        state, rules = self.path("state"), self.path("rules")
        env = {"LD_PRELOAD": SHIM, "FAULTSHIM_ROOTS": state, "FAULTSHIM_RULES": rules,
               "ASAN_OPTIONS": "verify_asan_link_order=0"}
        s = self.start(pipeline(self.path("out")), server_config=self.server, state_dir=state,
                       env=env)
        u = self.url(s)
        self.assertEqual(post(u, '{"id":"before"}')[0], 202)
        for op, err in (("write", "ENOSPC"), ("fsync", "EIO")):
            with open(rules, "w") as f:
                f.write(f"{op} {state}/http {err}\n")
            status, headers, body = post(u, json.dumps({"id": f"refused-{op}"}))
            self.assertEqual(status, 503, body)
            self.assertEqual(headers.get("Retry-After"), "1")
            self.assertNotIn(state, body)  # no path of the state directory in an answer
            self.assertIn("disk is full" if err == "ENOSPC" else "I/O error", body)
            # The card and /ready say why posts fail, until one is logged again.
            wait_for(lambda: s.card("web", "input")["state"] == "retrying", what="the card")
            self.assertIn("cannot be logged", s.card("web", "input")["last_error"])
            ready_status, _, ready = request("GET", s.url + "/ready")
            self.assertEqual(ready_status, 503, ready)
            self.assertIn("cannot be logged", ready)
            os.remove(rules)
            status, _, body = post(u, json.dumps({"id": f"after-{op}"}))
            self.assertEqual(status, 202, body)
            wait_for(lambda: s.card("web", "input")["state"] == "running", what="the card again")
        wait_for(lambda: len(self.read_output("out")) >= 3, what="the accepted posts")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        s.kill()
        # A restart replays the log: a refused post never comes back.
        s = self.start(pipeline(self.path("out")), server_config=self.server, state_dir=state)
        self.assertEqual(post(self.url(s), '{"id":"last"}')[0], 202)
        wait_for(lambda: "last" in {json.loads(l)["id"] for l in self.read_output("out")},
                 what="the post after the restart")
        ids = [json.loads(l)["id"] for l in self.read_output("out")]
        self.assertEqual(sorted(set(ids)), sorted(["before", "after-write", "after-fsync", "last"]))


class HttpOutputTest(KayakTest):
    def endpoint(self, **kw):
        e = Endpoint(**kw)
        self.addCleanup(e.close)
        return e

    def config(self, src, url, extra="", slow=0):
        lua = (f"    transforms: [{{lua: {{script: 'function process(m) for i=1,{slow} do end "
               f"return m end'}}}}]\n") if slow else ""
        return (f"pipelines:\n  send:\n    input: {{file: {{path: {src}, batch_size: 10}}}}\n{lua}"
                f"    outputs: [{{http: {{url: '{url}/in', headers: {{X-Test: yes}}{extra}}}}}]\n")

    def test_batches_retried_with_the_same_key_until_taken(self):
        src = self.write_ndjson("in.ndjson", [{"seq": i} for i in range(35)])
        e = self.endpoint(plan=[503, 429])
        s = self.start(self.config(src, e.url) + "", server_config="listen: 127.0.0.1:0\n")
        wait_for(lambda: sum(len(json.loads(r[2])) for r in e.accepted()) >= 35,
                 what="every message at the endpoint")
        seqs = [m["seq"] for r in e.accepted() for m in json.loads(r[2])]
        self.assertEqual(seqs, list(range(35)))
        keys = [r[1]["Idempotency-Key"] for r in e.requests]
        self.assertEqual(keys[0], keys[1])
        self.assertEqual(keys[1], keys[2])  # the retries of the first batch
        self.assertEqual(len(set(keys)), 4)  # 35 messages in batches of 10
        self.assertEqual(e.requests[0][1]["X-Test"], "yes")
        self.assertEqual(e.requests[0][1]["Content-Type"], "application/json")
        self.assertGreaterEqual(s.card("send", "outputs[0]")["errors"], 2)

    def test_a_4xx_is_a_permanent_failure_on_the_card(self):
        src = self.write_ndjson("in.ndjson", [{"seq": i} for i in range(5)])
        e = self.endpoint(default=400)
        s = self.start(self.config(src, e.url, extra=", format: ndjson"))
        wait_for(lambda: "permanent" in s.card("send", "outputs[0]")["last_error"],
                 what="the permanent failure on the card")
        self.assertEqual(len(e.requests), 1)  # not retried without a state dir
        with open(src, "rb") as f:
            self.assertEqual(e.requests[0][2], f.read())  # NDJSON: the lines as they came

    def test_kill_9_then_a_dedup_by_key_endpoint_sees_every_message_once(self):
        seed = int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        n = 3000
        src = self.write_ndjson("in.ndjson", [{"seq": i} for i in range(n)])
        e = self.endpoint()
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"
        state = self.path("state")
        for _ in range(3):
            s = self.start(self.config(src, e.url, slow=20000), server_config=server,
                           state_dir=state)
            time.sleep(rng.uniform(0.5, 1.5))
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait(timeout=30)
            s.kill()
        s = self.start(self.config(src, e.url, slow=20000), server_config=server, state_dir=state)
        by_key = {}

        def collect():
            for _, headers, body, _ in e.accepted():
                by_key.setdefault(headers["Idempotency-Key"], body)
            return sum(len(json.loads(b)) for b in by_key.values())
        wait_for(lambda: collect() >= n, timeout=120, what=f"seed {seed}: every message")
        seqs = sorted(m["seq"] for b in by_key.values() for m in json.loads(b))
        self.assertEqual(seqs, list(range(n)), f"seed {seed}")
        self.assertGreater(len(e.accepted()), len(by_key) - 1)


class HttpPollTest(KayakTest):
    def test_polls_split_and_errors_on_the_card(self):
        e = Endpoint(answer=json.dumps({"data": {"items": [{"i": 1}, {"i": 2}]}}).encode())
        self.addCleanup(e.close)
        cfg = (f"pipelines:\n  poll:\n    input: {{http_poll: {{url: '{e.url}/items?x=1', "
               f"split: data.items, interval_ms: 50}}}}\n"
               f"    outputs: [{{file: {{path: {self.path('out')}}}}}]\n")
        s = self.start(cfg)
        wait_for(lambda: len(self.read_output("out")) >= 6, what="three polls")
        self.assertEqual([json.loads(l) for l in self.read_output("out")[:4]],
                         [{"i": 1}, {"i": 2}, {"i": 1}, {"i": 2}])
        self.assertEqual(e.requests[0][0], "GET")
        with e.lock:
            e.default = 500
        wait_for(lambda: s.card("poll", "input")["state"] == "retrying", what="the error on the card")
        self.assertIn("HTTP 500", s.card("poll", "input")["last_error"])
        with e.lock:
            e.default = 200
        n = len(self.read_output("out"))
        wait_for(lambda: len(self.read_output("out")) > n, timeout=30, what="polling to resume")


class HttpTlsTest(KayakTest):
    """https for the http output and http_poll (the tls block) against local
    https endpoints with a throwaway CA (tls_ca.py): the right CA and a client
    certificate work; a wrong CA, a wrong name, an expired certificate and a
    missing client certificate are refused with the reason on the card."""

    def setUp(self):
        super().setUp()
        import tls_ca
        self.ca_dir = tls_ca.make(self.path("ca"))

    def endpoint(self, cert="server", client=False, **kw):
        e = Endpoint(tls=(self.ca_dir, cert, client), **kw)
        self.addCleanup(e.close)
        return e

    def tls(self, ca="ca.crt", cert=False, **kw):
        parts = [f"ca_file: {os.path.join(self.ca_dir, ca)}"]
        if cert:
            parts += [f"cert_file: {self.ca_dir}/client.crt", f"key_file: {self.ca_dir}/client.key"]
        parts += [f"{k}: {v}" for k, v in kw.items()]
        return "tls: {" + ", ".join(parts) + "}"

    def test_an_output_and_a_poll_over_https_with_a_client_certificate(self):
        src = self.write_ndjson("in.ndjson", [{"seq": i} for i in range(25)])
        out = self.endpoint(client=True)
        poll = self.endpoint(answer=json.dumps({"items": [{"i": 1}]}).encode())
        cfg = f"""pipelines:
  send:
    input: {{file: {{path: {src}, batch_size: 10}}}}
    outputs: [{{http: {{url: '{out.url}/in', {self.tls(cert=True)}}}}}]
  poll:
    input: {{http_poll: {{url: '{poll.url}/items', split: items, interval_ms: 50,
                         {self.tls(server_name="localhost")}}}}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""
        self.start(cfg)
        wait_for(lambda: sum(len(json.loads(r[2])) for r in out.accepted()) >= 25,
                 what="every message at the https endpoint")
        wait_for(lambda: len(self.read_output("out")) >= 2, what="two polls over https")

    def refused(self, endpoint, tls, want):
        cfg = (f"pipelines:\n  poll:\n    input: {{http_poll: {{url: '{endpoint.url}/x', "
               f"interval_ms: 50, {tls}}}}}\n"
               f"    outputs: [{{file: {{path: {self.path('out')}}}}}]\n")
        s = self.start(cfg)
        wants = want if isinstance(want, tuple) else (want,)
        try:
            wait_for(lambda: any(w in s.card("poll", "input")["last_error"] for w in wants),
                     timeout=30, what=f"{wants} on the card")
        except AssertionError:
            raise AssertionError(f"the card says {s.card('poll', 'input')}") from None
        self.assertEqual(endpoint.requests, [])
        # A refused connection stops cleanly too (nothing left reporting to a card).
        self.assertEqual(s.stop(), 0, s.stderr()[-2000:])

    def test_a_wrong_ca_a_wrong_name_an_expired_certificate_and_no_client_certificate(self):
        self.refused(self.endpoint(), self.tls("other-ca.crt"), "certificate verify failed")
        self.refused(self.endpoint(), self.tls(server_name="wrong.example"),
                     "certificate verify failed")
        self.refused(self.endpoint("expired"), self.tls(), "certificate verify failed")
        self.refused(self.endpoint(client=True), self.tls(),
                     ("certificate required", "requires a client certificate"))


def raw_exchange(host, port, data, timeout=10):
    """Sends raw bytes on a fresh connection; returns everything the server
    sent until it closed the connection or `timeout` passed."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_until_closed(sock, timeout)


def read_until_closed(sock, timeout):
    got, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    return got


def statuses(raw):
    return [int(m.group(1)) for m in re.finditer(rb"HTTP/1\.[01] (\d{3}) ", raw)]


class ListenerTest(KayakTest):
    """The listener under requests no well-behaved client sends (issue 5, point 5)."""

    SERVER = ("listen: 127.0.0.1:0\nlimits: {read_timeout_secs: 1, idle_timeout_secs: 2, "
              "max_header_bytes: 2048, max_connections: 8, max_body_bytes: 4096}\n")

    def setUp(self):
        super().setUp()
        self.s = ready(self.start(pipeline(self.path("out")), server_config=self.SERVER))
        u = urllib.parse.urlsplit(self.s.url)
        self.host, self.port = u.hostname, u.port

    def alive(self):
        try:
            status, _, _ = request("GET", self.s.url + "/health")
        except OSError:  # refused at the cap, until the server sees the others close
            return False
        return status == 200

    def test_pipelined_and_chunked_posts_on_one_connection(self):
        body = b'{"n":1}'
        one = (b"POST /ingest/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body))
        chunked = (b"POST /ingest/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"4\r\n{\"n\"\r\n3\r\n:2}\r\n0\r\n\r\n")
        last = (b"POST /ingest/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                b"Content-Length: 7\r\n\r\n{\"n\":3}")
        raw = raw_exchange(self.host, self.port, one + chunked + last)
        self.assertEqual(statuses(raw), [202, 202, 202], raw)
        wait_for(lambda: len(self.read_output("out")) == 3, what="three messages")
        self.assertEqual([json.loads(l)["n"] for l in self.read_output("out")], [1, 2, 3])

    def test_malformed_requests_get_400_and_the_server_stays_up(self):
        bad = [
            b"NOT A REQUEST\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"POST /ingest/orders HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
            b"POST /ingest/orders HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"POST /ingest/orders HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"GET /health HTTP/1.1\r\nBad Header Name: x\r\n\r\n",
            b"\x00\xff\x16\x03\x01garbage\r\n\r\n",
        ]
        for data in bad:
            raw = raw_exchange(self.host, self.port, data, timeout=5)
            self.assertEqual(statuses(raw), [400], (data, raw))
        rng = random.Random(5)
        for _ in range(200):
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            raw_exchange(self.host, self.port, junk + b"\r\n\r\n", timeout=5)
        self.assertTrue(self.alive())

    def test_oversized_header_gets_431_and_oversized_body_413(self):
        raw = raw_exchange(self.host, self.port,
                           b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 4000 + b"\r\n\r\n")
        self.assertEqual(statuses(raw), [431], raw)
        raw = raw_exchange(self.host, self.port,
                           b"POST /ingest/orders HTTP/1.1\r\nContent-Length: 100000\r\n\r\n{")
        self.assertEqual(statuses(raw), [413], raw)
        # a chunked body over the limit too
        chunk = b"1000\r\n" + b"a" * 4096 + b"\r\n"
        raw = raw_exchange(self.host, self.port,
                           b"POST /ingest/orders HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                           + chunk * 2 + b"0\r\n\r\n")
        self.assertEqual(statuses(raw), [413], raw)
        self.assertTrue(self.alive())

    def test_a_slow_client_is_cut_off_and_an_idle_one_closed(self):
        started = time.monotonic()
        with socket.create_connection((self.host, self.port), timeout=10) as sock:
            sock.sendall(b"POST /ingest/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len")  # never ends
            self.assertEqual(read_until_closed(sock, 10), b"")
        self.assertLess(time.monotonic() - started, 8)  # the read timeout is 1 s
        # A kept-alive connection: answered, then closed once idle.
        with socket.create_connection((self.host, self.port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            started = time.monotonic()
            raw = read_until_closed(sock, 10)
            self.assertEqual(statuses(raw), [200])
            self.assertLess(time.monotonic() - started, 8)
        self.assertTrue(self.alive())

    def test_an_idle_timeout_shorter_than_the_read_timeout_applies(self):
        s = self.start(pipeline(self.path("out2")), server_config=(
            "listen: 127.0.0.1:0\nlimits: {read_timeout_secs: 30, idle_timeout_secs: 1}\n"))
        u = urllib.parse.urlsplit(s.url)
        with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            started = time.monotonic()
            self.assertEqual(statuses(read_until_closed(sock, 20)), [200])
            self.assertLess(time.monotonic() - started, 8)  # not the 30 s read timeout

    def test_connections_beyond_the_cap_get_probes_only_then_are_closed(self):
        held = [socket.create_connection((self.host, self.port), timeout=10) for _ in range(8)]
        try:
            # the listener has counted all eight once each has been answered
            for sock in held:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.settimeout(10)
                self.assertIn(b"200", sock.recv(4096))
            # Past the cap, the places kept for probes: /health and /ready answer, the rest 503.
            extra = socket.create_connection((self.host, self.port), timeout=10)
            extra.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertEqual(statuses(read_until_closed(extra, 5)), [200])
            extra.close()
            extra = socket.create_connection((self.host, self.port), timeout=10)
            extra.sendall(b"GET /api/v1/pipelines HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertEqual(statuses(read_until_closed(extra, 5)), [503])
            extra.close()
            # Past those sixteen places, closed at once.
            probes = [socket.create_connection((self.host, self.port), timeout=10)
                      for _ in range(16)]
            wait_for(lambda: "connections refused" in self.s.stderr() or
                     statuses(raw_exchange(self.host, self.port,
                                           b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                                           timeout=5)) == [],
                     what="a connection past the probes' places closed at once")
            for p in probes:
                p.close()
        finally:
            for sock in held:
                sock.close()
        wait_for(self.alive, what="the listener to serve again once connections closed")


class ListenerWithoutRingTest(ListenerTest):
    """The same edges with requests read through Asio, one `recv` each, as on a kernel that
    refuses io_uring (the listener otherwise reads in a ring: src/server/ring_read.h)."""

    def start(self, config, **kw):
        kw["env"] = dict(kw.get("env") or {}, KAYAK_NO_IO_URING_READS="1")
        return super().start(config, **kw)

    def test_requests_are_read_without_the_ring_and_posts_get_through(self):
        self.assertTrue(self.alive())
        status, _, body = request("POST", self.s.url + "/ingest/orders",
                                  b'{"id":1}\n{"id":2}\n')
        self.assertEqual(status, 202, body)
        wait_for(lambda: "read one at a time" in self.s.stderr(),
                 what="the listener to say it reads without the ring")
