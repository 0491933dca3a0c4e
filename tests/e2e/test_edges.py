"""The edges of durability (issue 15): each test reproduces one defect a
review or a black-box run found, over the real binary."""
import json
import os
import signal
import socket
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crash"))
import crashstate  # noqa: E402
from harness import KayakTest, committed, http, post_until_taken, wait_for

SHIM = os.environ.get("KAYAK_FAULTSHIM", "")
SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"


def shim_env(roots, rules):
    if not SHIM:
        raise AssertionError("KAYAK_FAULTSHIM is not set")
    return {"LD_PRELOAD": SHIM, "FAULTSHIM_ROOTS": ":".join(roots), "FAULTSHIM_RULES": rules,
            "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                                   "verify_asan_link_order=0"]))}


def state_files(state):
    """The checkpoint files in a state directory and their bytes."""
    out = {}
    for name in os.listdir(state):
        if name.startswith(("chunk-", "MANIFEST-")):
            with open(os.path.join(state, name), "rb") as f:
                out[name] = f.read()
    return out


def bucket_value(s, bucket, key):
    """The entry's value, or None while there is none."""
    status, body = s.get(f"/api/v1/buckets/{bucket}?key={key}")
    return json.loads(body)["value"] if status == 200 else None


class ShortWriteTest(KayakTest):
    """A write to the file output that stops part way (a disk filling up) is
    cut back before the retry: the part holds whole lines of whole batches,
    each once, also across a kill -9 after the disk came back."""

    def test_short_write_is_cut_back(self):
        n = 3000
        rows = [{"seq": i, "pad": "x" * 40} for i in range(n)]
        src = self.write_ndjson("in.ndjson", rows)
        out = self.path("out")
        os.makedirs(out)
        rules = self.path("rules")
        with open(rules, "w") as f:
            f.write(f"short {out} ENOSPC\n")
        cfg = f"""
pipelines:
  p:
    input: {{file: {{path: {src}, batch_size: 50}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,300000 do end return m end'}}
    outputs: [{{file: {{path: {out}}}}}]
"""
        env = shim_env([out], rules)
        s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"), env=env)
        wait_for(lambda: s.card("p", "outputs[0]")["errors"] >= 3, timeout=60,
                 what="the output to fail on short writes")
        os.remove(rules)
        # killed once a checkpoint taken after the fault covers part of the output
        c0 = committed(s)
        wait_for(lambda: committed(s) >= c0 + 2 and len(self.read_output("out")) > 0,
                 timeout=120, what="checkpoints after the fault")
        self.assertLess(len(self.read_output("out")), n, "the run ended before the kill")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
        wait_for(lambda: s.card("p", "input")["state"] == "finished"
                 and len(self.read_output("out")) >= n, timeout=120, what="every row")
        self.assertEqual(s.stop(), 0)
        lines = self.read_output("out")
        self.assertEqual([json.loads(l) for l in lines], rows)


class HttpBacklogAfterKillTest(KayakTest):
    """After a kill -9 the http input's backlog is the payloads still to be
    replayed, not whole segments: once the replay is read, posts are taken."""

    def test_backlog_empties_after_replay(self):
        out = self.path("out")
        cfg = f"""
pipelines:
  h:
    input: {{http: {{path: /ingest/h, max_backlog_bytes: 4096}}}}
    outputs: [{{file: {{path: {out}}}}}]
"""
        # Only the checkpoint taken at start: a restart replays every post.
        server = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 3600}\n"
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        n = 400  # 400 record headers are more than the 4096-byte bound
        for i in range(n):
            post_until_taken(s, "/ingest/h", json.dumps({"i": i}).encode())
        wait_for(lambda: len(self.read_output("out")) >= n, what="every post in the output")
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        s = self.start(cfg, server_config=server, state_dir=self.path("state"))
        wait_for(lambda: s.card("h", "input")["messages_out"] >= n, timeout=60,
                 what="the replay to be read")

        def taken():
            status, _, _ = http("POST", s.url + "/ingest/h", b'{"i": -1}')
            return status == 202
        wait_for(taken, timeout=20, what="a post to be taken after the replay")


class LookupPerMessageTest(KayakTest):
    """A message sees exactly the state the messages before it left, whatever
    the batch size: a bucket written and read in one pipeline."""

    def test_lookup_sees_only_earlier_messages(self):
        rows = [{"k": "a", "v": v} for v in (5, 7, 3, 9)]
        src = self.write_ndjson("in.ndjson", rows)
        for batch_size in (1, 1000):
            with self.subTest(batch_size=batch_size):
                out = f"out-{batch_size}"
                cfg = f"""
buckets:
  m: {{}}
  s: {{}}
pipelines:
  p:
    input: {{file: {{path: {src}, batch_size: {batch_size}}}}}
    transforms:
      - lookup: {{bucket: s, key: k, as: before}}
      - bucket: {{name: s, key: k, op: add, field: v}}
      - bucket: {{name: m, key: k, op: max, field: v}}
      - lookup: {{bucket: m, key: k, as: maxv}}
    outputs: [{{file: {{path: {self.path(out)}}}}}]
"""
                s = self.start(cfg)
                wait_for(lambda: len(self.read_output(out)) >= 4, what="four rows")
                got = [json.loads(l) for l in self.read_output(out)]
                self.assertEqual([r["maxv"] for r in got], [5, 7, 7, 9])
                self.assertEqual([r["before"] for r in got], [None, 5, 12, 15])
                self.assertEqual(s.stop(), 0)


class FinishedDummyTest(KayakTest):
    """A finished finite input stays finished: `count: 10` into a count
    bucket is 10 after any number of graceful restarts and kills."""

    def test_count_stays_ten_across_restarts(self):
        cfg = """
buckets:
  c: {}
pipelines:
  d:
    input: {dummy: {count: 10, template: '{"k":"a","seq":{{seq}}}'}}
    transforms:
      - bucket: {name: c, key: k, op: count}
"""
        state = self.path("state")
        for i in range(3):
            s = self.start(cfg, server_config=SERVER, state_dir=state)
            wait_for(lambda: s.card("d", "input")["state"] == "finished", what="the dummy to finish")
            wait_for(lambda: bucket_value(s, "c", "a") == 10,
                     what="a count of 10")
            if i == 1:
                c0 = committed(s)
                wait_for(lambda: committed(s) > c0, what="a checkpoint")
                s.proc.send_signal(signal.SIGKILL)
                s.proc.wait(timeout=30)
            else:
                self.assertEqual(s.stop(), 0)
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: s.card("d", "input")["state"] == "finished", what="the dummy to finish")
        self.assertEqual(s.get_json("/api/v1/buckets/c?key=a")["value"], 10)
        # a change through the API to another pipeline does not run it again
        status, _, b = http("PUT", s.url + "/api/v1/pipelines/other",
                            b"input: {dummy: {count: 1}}\noutputs: [{stdout: {}}]\n")
        self.assertIn(status, (200, 201, 202), b)
        wait_for(lambda: s.card("other", "input")["state"] == "finished", what="the new pipeline")
        wait_for(lambda: s.card("d", "input")["state"] == "finished", what="the dummy to finish")
        self.assertEqual(s.get_json("/api/v1/buckets/c?key=a")["value"], 10)


class UnreadableStateTest(KayakTest):
    """A checkpoint that cannot be read is never a reason to start empty: the
    server exits 1 naming the file and keeps every file; --discard-state is
    the operator's explicit way to start the region empty."""

    CFG = """
buckets:
  c: {}
pipelines:
  d:
    input: {dummy: {count: 50, batch_size: 5, template: '{"k":"a"}'}}
    transforms:
      - bucket: {name: c, key: k, op: count}
"""

    def run_once(self, state):
        s = self.start(self.CFG, server_config=SERVER, state_dir=state)
        wait_for(lambda: bucket_value(s, "c", "a") == 50, what="50 counted")
        c0 = committed(s)
        wait_for(lambda: committed(s) > c0, what="a checkpoint")
        self.assertEqual(s.stop(), 0)

    def refused(self, state, env=None):
        before = state_files(state)
        s = self.start(self.CFG, server_config=SERVER, state_dir=state, wait=False, env=env)
        code = s.proc.wait(timeout=30)
        s._reader.join(timeout=5)
        self.assertEqual(code, 1, s.stderr())
        after = state_files(state)
        self.assertEqual(after, before, "a refused start must keep every file as it was")
        return s.stderr()

    def test_a_corrupt_chunk_stops_the_start_until_discarded(self):
        state = self.path("state")
        self.run_once(state)
        chunk = sorted(f for f in os.listdir(state) if f.startswith("chunk-") and "b.c" in f)[-1]
        with open(os.path.join(state, chunk), "r+b") as f:
            f.seek(-1, os.SEEK_END)
            b = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x5A]))
        err = self.refused(state)
        self.assertIn(chunk, err)
        self.assertIn("--discard-state d", err)
        s = self.start(self.CFG, server_config=SERVER, state_dir=state,
                       extra_args=["--discard-state", "d"])
        self.assertIn("--discard-state d: discarded", s.stderr())
        wait_for(lambda: bucket_value(s, "c", "a") == 50,
                 what="the region starting empty and counting again")

    def test_an_io_error_reading_state_stops_the_start(self):
        state = self.path("state")
        self.run_once(state)
        rules = self.path("rules")
        with open(rules, "w") as f:
            f.write(f"read {state} EIO\n")
        err = self.refused(state, env=shim_env([state], rules))
        self.assertIn("Input/output error", err)
        os.remove(rules)
        s = self.start(self.CFG, server_config=SERVER, state_dir=state)
        self.assertEqual(s.get_json("/api/v1/buckets/c?key=a")["value"], 50)


class StuckOutputTest(KayakTest):
    """Pipeline `stuck`: five lines into an http output nothing answers."""

    def start_stuck(self, stop_timeout_secs):
        src = self.write_ndjson("in.ndjson", [{"i": i} for i in range(5)])
        # port 9 on loopback: nothing listens, every write fails
        self.stuck_cfg = f"""
pipelines:
  stuck:
    input: {{file: {{path: {src}}}}}
    outputs: [{{http: {{url: 'http://127.0.0.1:9/x', timeout_ms: 200}}}}]
"""
        self.stuck_server = SERVER + f"stop_timeout_secs: {stop_timeout_secs}\n"
        s = self.start(self.stuck_cfg, server_config=self.stuck_server,
                       state_dir=self.path("state"))
        wait_for(lambda: s.card("stuck", "outputs[0]")["state"] == "retrying",
                 what="the output to retry")
        return s


class StuckStopTest(StuckOutputTest):
    """A graceful stop waits at most stop_timeout_secs for its savepoint, then
    exits 1 naming the region and the checkpoint the next start replays from;
    nothing accepted is lost."""

    def test_stop_with_a_stuck_output_ends_and_replays(self):
        s = self.start_stuck(2)
        code = s.stop(timeout=20)
        self.assertEqual(code, 1, s.stderr())
        err = s.stderr()
        self.assertRegex(err, r"region stuck did not reach its savepoint .*replays from "
                              r"checkpoint \d+")
        self.assertNotIn("savepoint committed", err)
        # the next start reads the five lines again: none was lost
        s = self.start(self.stuck_cfg, server_config=self.stuck_server,
                       state_dir=self.path("state"))
        wait_for(lambda: s.card("stuck", "input")["messages_out"] >= 5, what="the replay")


class ReadyTest(KayakTest):
    """/health is liveness; /ready is 200 only when every pipeline runs and
    every region checkpoints on time, else 503 with the reasons."""

    def test_ready_names_a_retrying_output_and_recovers(self):
        src = self.write_ndjson("in.ndjson", [{"i": i} for i in range(3)])
        # an http output to a port nothing listens on yet
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        cfg = f"""
pipelines:
  p:
    input: {{file: {{path: {src}}}}}
    outputs: [{{http: {{url: 'http://127.0.0.1:{port}/x', timeout_ms: 200}}}}]
"""
        s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
        def output_retrying():
            status, body = s.get("/ready")
            return status == 503 and any(
                r.get("component") == "outputs[0]" and r["reason"] == "output retrying"
                and r["since_ms"] > 0 for r in json.loads(body)["reasons"])
        wait_for(output_retrying, timeout=30, what="/ready naming the retrying output")
        self.assertEqual(s.get("/health")[0], 200)
        status, metrics = s.get("/metrics")
        self.assertIn("kayak_ready 0", metrics)
        # a listener comes up: the output delivers, checkpoints commit, ready
        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass
        sock.close()
        srv = HTTPServer(("127.0.0.1", port), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        wait_for(lambda: s.get("/ready")[0] == 200, timeout=30, what="ready")
        self.assertIn("kayak_ready 1", s.get("/metrics")[1])

    def test_a_failed_pipeline_is_not_ready(self):
        cfg = """
pipelines:
  p:
    input: {file: {path: /nonexistent/dir/in.ndjson}}
    outputs: [{stdout: {}}]
"""
        s = self.start(cfg)
        wait_for(lambda: s.get("/ready")[0] == 503, what="not ready")
        self.assertEqual(s.get("/health")[0], 200)


class TuningChangeTest(KayakTest):
    """Changing a tuning option (batch_size) keeps the input's position: a
    count bucket does not count the file twice. An identity option (the
    path) makes the input start from its beginning."""

    def cfg(self, src, batch_size):
        return f"""
buckets:
  c: {{}}
pipelines:
  p:
    input: {{file: {{path: {src}, batch_size: {batch_size}}}}}
    transforms:
      - bucket: {{name: c, key: k, op: count}}
    outputs: [{{file: {{path: {self.path('out')}, max_part_bytes: {batch_size * 1000}}}}}]
"""

    def test_batch_size_change_keeps_the_position(self):
        src = self.write_ndjson("in.ndjson", [{"k": "a", "i": i} for i in range(500)])
        state = self.path("state")
        for batch_size in (50, 100, 7):
            s = self.start(self.cfg(src, batch_size), server_config=SERVER, state_dir=state)
            wait_for(lambda: s.card("p", "input")["state"] == "finished", what="the input to end")
            self.assertEqual(s.get_json("/api/v1/buckets/c?key=a")["value"], 500, batch_size)
            self.assertEqual(s.stop(), 0)
        self.assertEqual(len(self.read_output("out")), 500)
        # an identity change: another file is read from its start
        src2 = self.write_ndjson("in2.ndjson", [{"k": "a", "i": i} for i in range(20)])
        s = self.start(self.cfg(src2, 7), server_config=SERVER, state_dir=state)
        wait_for(lambda: s.card("p", "input")["state"] == "finished", what="the input to end")
        self.assertEqual(s.get_json("/api/v1/buckets/c?key=a")["value"], 520)


class ChangeWhileStuckTest(StuckOutputTest):
    """A graph change while an output is failing runs off the listener's
    thread: /health and every read keep answering. A change to the stuck
    region answers within the stop timeout, naming the region that missed its
    savepoint; a change anywhere else does not stop that region at all."""

    def put_while_polling(self, s, pipeline, body):
        answer = {}

        def put():
            answer["r"] = http("PUT", s.url + "/api/v1/pipelines/" + pipeline, body)
        t = threading.Thread(target=put)
        started = time.monotonic()
        t.start()
        # the listener answers while the change waits for the stuck region
        while t.is_alive() and time.monotonic() - started < 3:
            status, _ = s.get("/health")
            self.assertEqual(status, 200)
            self.assertIn(s.get("/ready")[0], (200, 503))
            time.sleep(0.2)
        t.join(timeout=30)
        self.assertFalse(t.is_alive(), "the change did not answer")
        status, _, body = answer["r"]
        return status, json.loads(body), time.monotonic() - started

    def test_change_to_the_stuck_region_answers_naming_it(self):
        s = self.start_stuck(4)
        body = self.stuck_cfg.split("stuck:\n", 1)[1].replace("timeout_ms: 200", "timeout_ms: 300")
        status, answer, _ = self.put_while_polling(s, "stuck", textwrap.dedent(body).encode())
        self.assertEqual(status, 200, answer)
        self.assertEqual([m["region"] for m in answer["savepoint_missed"]], ["stuck"])
        # rebuilt from its last checkpoint: the five lines are read again
        wait_for(lambda: s.card("stuck", "input")["messages_out"] == 5, what="the replay")

    def test_change_elsewhere_leaves_the_stuck_region_running(self):
        s = self.start_stuck(20)
        before = s.card("stuck", "outputs[0]")
        status, answer, took = self.put_while_polling(
            s, "other", b"input: {dummy: {count: 3}}\noutputs: [{stdout: {}}]\n")
        self.assertEqual(status, 201, answer)
        self.assertNotIn("savepoint_missed", answer)
        self.assertLess(took, 20, "the change waited for the stuck region's savepoint")
        wait_for(lambda: s.card("other", "input")["state"] == "finished", what="the new pipeline")
        # restarting `other` does not touch `stuck` either
        status, _, body = http("POST", s.url + "/api/v1/pipelines/other/restart", b"")
        self.assertEqual(status, 200, body)
        # not rebuilt: the same output, still retrying since before, its
        # error count never reset
        after = s.card("stuck", "outputs[0]")
        self.assertEqual(after["state"], "retrying")
        self.assertEqual(after["state_since_ms"], before["state_since_ms"])
        self.assertGreaterEqual(after["errors"], before["errors"])
        self.assertEqual(s.card("stuck", "input")["messages_out"], 5)


class HttpLogCutTest(KayakTest):
    """A post whose log write fails is answered 503, and what reached the
    segment is cut off durably (ftruncate, then fdatasync) before the next
    segment takes posts: a power loss cannot bring the refused post back."""

    def test_a_failed_log_write_is_cut_off_durably(self):
        state = self.path("state")
        rules, log = self.path("rules"), self.path("shim.log")
        env = shim_env([os.path.join(state, "http")], rules)
        env["FAULTSHIM_LOG"] = log
        cfg = f"""
pipelines:
  p:
    input: {{http: {{path: /in}}}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""
        s = self.start(cfg, server_config=SERVER, state_dir=state, env=env)
        post_until_taken(s, "/in", b'{"n": 1}')
        with open(rules, "w") as f:
            f.write(f"write {os.path.join(state, 'http')} EIO\n")
        status, _, body = http("POST", s.url + "/in", b'{"n": 2}')
        self.assertEqual(status, 503, body)
        os.remove(rules)
        post_until_taken(s, "/in", b'{"n": 3}')
        s.kill()
        ops = crashstate.parse(log)
        failed = next(i for i, (op, args, _) in enumerate(ops) if op == "F" and args[0] == "write")
        seg = ops[failed][1][1]
        later = ops[failed + 1:]
        cut = next(i for i, (op, args, _) in enumerate(later) if op == "T" and args[0] == seg)
        synced = [i for i, (op, args, _) in enumerate(later) if op == "S" and args[0] == seg]
        nxt = next(i for i, (op, args, _) in enumerate(later)
                   if op in ("O", "W") and args[0] != seg)
        self.assertTrue(any(cut < i < nxt for i in synced),
                        f"the cut of {seg} was not fsynced before the next segment: "
                        f"{[(op, args) for op, args, _ in later[:nxt + 1]]}")


TEMPLATE = '{"k":"x","seq":{{seq}}}'


class RegionChangeTest(KayakTest):
    """Changes to one region while another runs and checkpoints: the other is
    never stopped, both stay exactly once, also across a kill -9."""

    def b_body(self, batch_size):
        return (f"input: {{dummy: {{count: 500, batch_size: {batch_size}, template: '{TEMPLATE}'}}}}\n"
                f"transforms: [{{bucket: {{name: cb, key: k, op: count}}}}]\n"
                f"outputs: [{{file: {{path: {self.path('out_b')}}}}}]\n").encode()

    def test_changes_to_one_region_leave_the_other_exact(self):
        cfg = f"""
buckets:
  ca: {{}}
  cb: {{}}
pipelines:
  a:
    input: {{dummy: {{count: 6000, rate_per_sec: 1000, batch_size: 50, template: '{TEMPLATE}'}}}}
    transforms: [{{bucket: {{name: ca, key: k, op: count}}}}]
    outputs: [{{file: {{path: {self.path('out_a')}}}}}]
  b:
    input: {{dummy: {{count: 500, batch_size: 100, template: '{TEMPLATE}'}}}}
    transforms: [{{bucket: {{name: cb, key: k, op: count}}}}]
    outputs: [{{file: {{path: {self.path('out_b')}}}}}]
"""
        state = self.path("state")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: s.card("a", "input")["messages_out"] > 0, what="a to run")
        since = s.card("a", "input")["state_since_ms"]
        seen = 0
        for batch_size in (50, 20, 7):  # tuning changes: b keeps its state
            status, _, body = http("PUT", s.url + "/api/v1/pipelines/b", self.b_body(batch_size))
            self.assertEqual(status, 200, body)
            self.assertNotIn("savepoint_missed", json.loads(body))
            a = s.card("a", "input")
            self.assertGreaterEqual(a["messages_out"], seen, "pipeline a was restarted")
            seen = a["messages_out"]
            if a["state"] == "running":  # not yet finished (a slow machine)
                self.assertEqual(a["state_since_ms"], since, "pipeline a was restarted")
            wait_for(lambda: s.card("b", "input")["state"] == "finished", what="b to finish")
            self.assertEqual(s.get_json("/api/v1/buckets/cb?key=x")["value"], 500)
        # a committed checkpoints all along, in its own region
        regions = {r["region"]: r for r in s.get_json("/api/v1/checkpoints")["regions"]}
        self.assertEqual(set(regions), {"a", "b"})
        s.kill()
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: s.card("a", "input")["state"] == "finished", timeout=30,
                 what="a to finish after the restart")
        self.assertEqual(s.get_json("/api/v1/buckets/ca?key=x")["value"], 6000)
        self.assertEqual(s.get_json("/api/v1/buckets/cb?key=x")["value"], 500)
        self.assertEqual(s.card("b", "input")["state"], "finished")
        self.assertGreaterEqual(len(self.read_output("out_a")), 6000)


class FileInputEdgesTest(KayakTest):
    def test_a_bad_line_is_reported_at_its_own_byte(self):
        good = json.dumps({"i": 0}) + "\n"
        text = good * 100 + "not json\n" + good
        with open(self.path("in.ndjson"), "w") as f:
            f.write(text)
        cfg = f"""
pipelines:
  p:
    input: {{file: {{path: {self.path('in.ndjson')}}}}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""
        s = self.start(cfg)
        wait_for(lambda: s.card("p", "input")["errors"] == 1, what="the bad line counted")
        self.assertIn(f"at byte {len(good) * 100}:", s.card("p", "input")["last_error"])

    def test_a_replaced_longer_file_is_read_from_its_start(self):
        src = self.path("in.ndjson")
        self.write_ndjson("in.ndjson", [{"v": "old", "i": i} for i in range(50)])
        cfg = f"""
pipelines:
  p:
    input: {{file: {{path: {src}}}}}
    outputs: [{{file: {{path: {self.path('out')}}}}}]
"""
        state = self.path("state")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: s.card("p", "input")["state"] == "finished", what="the first file")
        self.assertEqual(s.stop(), 0)
        # another file under the same name, longer, with other bytes
        os.remove(src)
        self.write_ndjson("in.ndjson", [{"v": "new", "i": i, "pad": "x" * 20} for i in range(80)])
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: len(self.read_output("out")) >= 130, what="the new file from its start")
        rows = [json.loads(l) for l in self.read_output("out")]
        self.assertEqual([r["i"] for r in rows if r["v"] == "new"], list(range(80)))
        self.assertIn("reading it from the start", s.stderr())
