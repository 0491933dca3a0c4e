"""The command line: flags, check, exit codes, the state directory lock."""
import json
import os
import re
import signal

from harness import EXAMPLES, KayakTest, Server, committed, run, wait_for

BAD = """\
buckets:
  totals: {idle_timeout_secs: soon}
pipelines:
  UPPER:
    input:
      file: {path: x.ndjson, speed: 3}
    transforms:
      - filter: 'value >'
      - frobnicate: {}
  down:
    input:
      pipeline: [nowhere]
    transforms:
      - bucket: {name: missing, key: k, op: add, field: v}
    outputs:
      - file: {max_part_bytes: lots}
"""



def pos(line, token, offset=0):
    """'line:column' (1-based) of token on a line of BAD, plus offset."""
    return f"{line}:{BAD.split(chr(10))[line - 1].index(token) + 1 + offset}"


EXPECTED = [
    (pos(2, "soon"), "idle_timeout_secs must be"),
    (pos(4, "UPPER"), "bad pipeline id 'UPPER'"),
    (pos(6, "speed"), "unknown option 'speed'"),
    (pos(8, "'value >'", 1 + len("value >")), "expression error: unexpected end"),
    (pos(9, "frobnicate"), "unknown transform type 'frobnicate'"),
    (pos(12, "pipeline"), "unknown pipeline 'nowhere'"),
    (pos(14, "missing"), "unknown bucket 'missing'"),
    (pos(16, "file"), "missing required option 'path'"),
    (pos(16, "lots"), "must be a whole number"),
]


class CliTest(KayakTest):
    def test_version(self):
        r = run(["--version"])
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^kayak \d+\.\d+\.\d+")

    def test_bad_command_lines_exit_2(self):
        for args in ([], ["--bogus"], ["--config"], ["check"], ["--state-dir", "/tmp/x"]):
            r = run(args)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn("usage:", r.stderr)

    def test_check_accepts_the_quickstart(self):
        r = run(["check", os.path.join(EXAMPLES, "quickstart.yaml")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ok", r.stdout)

    def test_check_reports_every_error_with_line_and_column(self):
        path = self.path("bad.yaml")
        with open(path, "w") as f:
            f.write(BAD)
        r = run(["check", path])
        self.assertEqual(r.returncode, 2)
        for pos, text in EXPECTED:
            self.assertRegex(r.stderr, re.escape(f"{path}:{pos}: ") + ".*" + re.escape(text),
                             r.stderr)
        self.assertIn(f"{len(EXPECTED)} errors", r.stderr)

    def test_server_refuses_a_bad_config_with_the_same_errors(self):
        path = self.path("bad.yaml")
        with open(path, "w") as f:
            f.write(BAD)
        check = run(["check", path])
        serve = run(["--config", path])
        self.assertEqual(serve.returncode, 2)
        self.assertEqual(serve.stderr, check.stderr)

    def test_missing_env_var_is_a_config_error(self):
        path = self.path("env.yaml")
        with open(path, "w") as f:
            f.write("pipelines:\n  p:\n    input: {file: {path: '${KAYAK_NOT_SET_ANYWHERE}'}}\n")
        env = dict(os.environ)
        env.pop("KAYAK_NOT_SET_ANYWHERE", None)
        r = run(["check", path], env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn(":3:26: environment variable 'KAYAK_NOT_SET_ANYWHERE' is not set", r.stderr)
        env["KAYAK_NOT_SET_ANYWHERE"] = "in.ndjson"
        self.assertEqual(run(["check", path], env=env).returncode, 0)

    def test_a_repartition_step_without_a_state_dir_is_refused_at_its_place(self):
        # Its writer's transactions commit with checkpoints (exactly_once is
        # its default); the error is at the step, which the file shows.
        path = self.path("repartition.yaml")
        with open(path, "w") as f:
            f.write("pipelines:\n  p:\n"
                    "    input: {kafka: {brokers: '127.0.0.1:9', topics: [in], group: g}}\n"
                    "    transforms:\n"
                    "      - repartition: {key: dev, topic: by-dev}\n"
                    "    outputs: [{stdout: {}}]\n")
        serve = run(["--config", path])
        self.assertEqual(serve.returncode, 2)
        self.assertIn(":5:9: kafka output: exactly_once needs a state directory", serve.stderr)

    def test_bad_server_config_exits_2(self):
        cfg = self.path("p.yaml")
        with open(cfg, "w") as f:
            f.write("pipelines:\n  p:\n    input: {dummy: {count: 1}}\n")
        srv = self.path("s.yaml")
        with open(srv, "w") as f:
            f.write("listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 0}\nbogus: 1\n")
        r = run(["--config", cfg, "--server-config", srv])
        self.assertEqual(r.returncode, 2)
        self.assertIn("s.yaml:2:29: checkpoint.interval_secs must be", r.stderr)
        self.assertIn("s.yaml:3:1: unknown key 'bogus'", r.stderr)

    def test_state_dir_is_locked_for_a_second_server(self):
        config = "pipelines:\n  p:\n    input: {dummy: {rate_per_sec: 10}}\n"
        state = self.path("state")
        first = self.start(config, state_dir=state)
        self.assertTrue(os.path.isdir(state))
        second = Server(self.dir, config, state_dir=state, wait=False)
        self.servers.append(second)
        code = second.proc.wait(timeout=30)
        second._reader.join(timeout=5)
        self.assertEqual(code, 3)
        self.assertIn(f"pid {first.proc.pid}", second.stderr())
        self.assertEqual(first.stop(), 0)
        # Once the first is gone, the directory is free again.
        third = self.start(config, state_dir=state)
        self.assertEqual(third.stop(), 0)

    def test_state_dir_that_is_a_file_is_refused(self):
        with open(self.path("afile"), "w") as f:
            f.write("x")
        cfg = self.path("p.yaml")
        with open(cfg, "w") as f:
            f.write("pipelines:\n  p:\n    input: {dummy: {count: 1}}\n")
        r = run(["--config", cfg, "--state-dir", self.path("afile")])
        self.assertEqual(r.returncode, 2)
        self.assertIn("state directory", r.stderr)

    def test_unsafe_state_dirs_are_refused(self):
        cfg = self.path("p.yaml")
        with open(cfg, "w") as f:
            f.write("pipelines:\n  p:\n    input: {dummy: {count: 1}}\n")
        open_dir = self.path("open")
        os.makedirs(open_dir)
        os.chmod(open_dir, 0o777)
        r = run(["--config", cfg, "--state-dir", open_dir])
        self.assertEqual(r.returncode, 2)
        self.assertIn("writable by group or others", r.stderr)
        # LOCK must not be a symlink to somewhere else
        linked = self.path("linked")
        os.makedirs(linked, mode=0o700)
        sentinel = self.path("sentinel")
        with open(sentinel, "w") as f:
            f.write("keep")
        os.symlink(sentinel, os.path.join(linked, "LOCK"))
        r = run(["--config", cfg, "--state-dir", linked])
        self.assertEqual(r.returncode, 2)
        with open(sentinel) as f:
            self.assertEqual(f.read(), "keep")
        # a new one is created private
        fresh = self.path("fresh", "state")
        s = self.start("pipelines:\n  p:\n    input: {dummy: {rate_per_sec: 1}}\n", state_dir=fresh)
        self.assertEqual(os.stat(fresh).st_mode & 0o777, 0o700)
        self.assertEqual(s.stop(), 0)

    def test_busy_listen_address_is_a_runtime_failure(self):
        config = "pipelines:\n  p:\n    input: {dummy: {rate_per_sec: 1}}\n"
        first = self.start(config)
        port = first.url.rsplit(":", 1)[1]
        second = Server(self.dir, config, server_config=f"listen: 127.0.0.1:{port}\n", wait=False)
        self.servers.append(second)
        self.assertEqual(second.proc.wait(timeout=30), 1)
        second._reader.join(timeout=5)
        self.assertIn("cannot listen", second.stderr())

    def test_second_signal_exits_at_once(self):
        # An output that can never drain (stdout to a pipe nobody reads) holds a
        # graceful stop; a second signal ends the process anyway.
        import subprocess
        s = self.start("pipelines:\n  p:\n    input: {dummy: {}}\n    outputs: [{stdout: {}}]\n",
                       stdout=subprocess.PIPE)
        wait_for(lambda: s.card("p", "input")["messages_out"] > 1000, what="input running")
        s.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping gracefully" in s.stderr(), what="graceful stop begins")
        s.proc.send_signal(signal.SIGTERM)
        self.assertEqual(s.proc.wait(timeout=10), 1)


if __name__ == "__main__":
    import unittest
    unittest.main()


class StateCommandTest(KayakTest):
    """`kayak state DIR ls|verify|show|export`: a real state directory listed
    and checked offline; refused while a server runs on it unless
    --force-read; a chunk and a manifest corrupted byte by byte found with
    their files; a bucket's entries read back equal to what the output
    holds."""
    CONFIG = """\
buckets:
  totals: {}
pipelines:
  p:
    input: {dummy: {rate_per_sec: 400, template: '{"seq":{{seq}}}'}}
    transforms:
      - map: {k: 'seq % 3000'}
      - bucket: {name: totals, key: k, op: count}
    outputs: [{file: {path: out}}]
"""
    SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"

    def state_after_checkpoints(self):
        state = self.path("state")
        s = self.start(self.CONFIG, state_dir=state, server_config=self.SERVER)
        wait_for(lambda: committed(s) >= 3, timeout=30, what="three checkpoints")
        return s, state

    def test_ls_and_verify_a_directory_and_refuse_a_running_server(self):
        import json
        s, state = self.state_after_checkpoints()
        r = run(["state", state])
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"a server is running on {state} (pid {s.proc.pid})", r.stderr)
        self.assertIn("--force-read", r.stderr)
        r = run(["state", state, "ls", "--force-read"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("region p", r.stdout)
        self.assertEqual(s.stop(), 0)
        r = run(["state", state, "ls"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^\S+: 1 regions, 2 checkpoints, 0 unreferenced files\n")
        self.assertRegex(r.stdout, r"\n  checkpoint \d+  \d+ s ago  3 units  ")
        for unit in ("b.totals", "p.p.input", "p.p.o0"):
            self.assertRegex(r.stdout, rf"\n    {re.escape(unit)} +\d+")
        j = json.loads(run(["state", state, "ls", "--json"]).stdout)
        self.assertEqual([c["region"] for c in j["checkpoints"]], ["p", "p"])
        newest, before = j["checkpoints"]
        self.assertGreater(newest["id"], before["id"])
        self.assertEqual(sorted(u["unit"] for u in newest["units"]),
                         ["b.totals", "p.p.input", "p.p.o0"])
        for u in newest["units"]:
            self.assertTrue(os.path.exists(os.path.join(state, u["chunk"]["file"])))
        r = run(["state", state, "verify"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        m = re.search(r": 2 checkpoints and (\d+) chunks verified: every checksum matches", r.stdout)
        self.assertTrue(m, r.stdout)
        # Three units in each, some shared, and a bucket's deltas counted too.
        chunks = {u["chunk"]["file"] for c in j["checkpoints"] for u in c["units"]} | {
            d["file"] for c in j["checkpoints"] for u in c["units"] for d in u["deltas"]}
        self.assertGreaterEqual(int(m.group(1)), len(chunks))
        # Reading changed nothing: the server starts on it and goes on.
        before_files = sorted(os.listdir(state))
        run(["state", state, "verify", "--json"])
        self.assertEqual(sorted(os.listdir(state)), before_files)
        s = self.start(self.CONFIG, state_dir=state, server_config=self.SERVER)
        self.assertEqual(s.stop(), 0)

    def test_verify_names_each_corrupt_file_and_where(self):
        import json
        s, state = self.state_after_checkpoints()
        self.assertEqual(s.stop(), 0)
        j = json.loads(run(["state", state, "ls", "--json"]).stdout)
        newest = j["checkpoints"][0]
        bucket = next(u for u in newest["units"] if u["unit"] == "b.totals")["chunk"]["file"]
        # One byte of the bucket's chunk's payload flipped.
        path = os.path.join(state, bucket)
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 1)
            b = f.read(1)
            f.seek(os.path.getsize(path) - 1)
            f.write(bytes([b[0] ^ 0x40]))
        # The older manifest cut short.
        older = os.path.join(state, j["checkpoints"][1]["manifest"])
        with open(older, "r+b") as f:
            f.truncate(os.path.getsize(older) - 3)
        r = run(["state", state, "verify"])
        self.assertEqual(r.returncode, 1, r.stdout)
        size = os.path.getsize(path)
        self.assertIn(f"fault: {bucket}: payload checksum mismatch (in the payload, bytes 32-"
                      f"{size - 1}), named by {newest['manifest']} for unit b.totals", r.stdout)
        self.assertIn(f"fault: {j['checkpoints'][1]['manifest']}: truncated or padded payload "
                      f"(the file ends at byte {os.path.getsize(older)})", r.stdout)
        self.assertRegex(r.stdout, r": 2 faults in 1 checkpoints and \d+ chunks\n$")
        v = json.loads(run(["state", state, "verify", "--json"]).stdout)
        self.assertFalse(v["ok"])
        self.assertEqual(len(v["faults"]), 2)
        # What verify found is what a start refuses.
        r = Server(self.dir, self.CONFIG, server_config=self.SERVER, state_dir=state, wait=False)
        self.servers.append(r)
        self.assertNotEqual(r.proc.wait(timeout=30), 0)

    def test_show_and_export_give_the_bucket_the_output_agrees_with(self):
        import json
        s, state = self.state_after_checkpoints()
        self.assertEqual(s.stop(), 0)  # a savepoint: the bucket counts every message out
        out = self.read_output("out")
        r = run(["state", state, "export", "totals"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        want = {}
        for line in out:
            k = str(json.loads(line)["k"])
            want[k] = want.get(k, 0) + 1
        self.assertEqual({row["key"]: row["value"] for row in rows}, want)
        self.assertEqual([row["key"] for row in rows], sorted(want))  # key order
        self.assertGreater(rows[0]["last_write_ms"], 1_700_000_000_000)
        key = rows[len(rows) // 2]["key"]
        r = run(["state", state, "show", "totals", key])
        self.assertEqual((r.returncode, json.loads(r.stdout)), (0, rows[len(rows) // 2]))
        r = run(["state", state, "show", "totals"])
        self.assertRegex(r.stdout, rf"^bucket totals: {len(want)} keys \(checkpoint \d+ of region p\)\n")
        self.assertEqual(len(r.stdout.splitlines()), 1 + min(20, len(want)) +
                         (1 if len(want) > 20 else 0))
        j = json.loads(run(["state", state, "show", "totals", "--json"]).stdout)
        self.assertEqual((j["keys"], j["first"]), (len(want), rows[:20]))
        for args, want_text in [(["show", "totals", "no-such-key"], "has no key 'no-such-key'"),
                                (["show", "nope"], "no checkpoint holds bucket 'nope' "
                                                   "(buckets: totals)")]:
            r = run(["state", state, *args])
            self.assertEqual(r.returncode, 1)
            self.assertIn(want_text, r.stderr)

    def test_drop_asks_for_the_regions_name_and_the_region_starts_empty(self):
        import json
        s, state = self.state_after_checkpoints()
        r = run(["state", state, "drop", "p", "--yes"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"a server is running on {state} (pid {s.proc.pid})", r.stderr)
        self.assertEqual(s.stop(), 0)
        r = run(["state", state, "drop", "q"], input="q\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("holds no checkpoint of region 'q' (regions: p)", r.stderr)
        r = run(["state", state, "drop", "p"], input="P\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("Type the region's name to drop it", r.stdout)
        self.assertIn("b.totals, p.p.input, p.p.o0", r.stdout)
        self.assertIn("not confirmed; nothing dropped", r.stderr)
        self.assertEqual(len(json.loads(run(["state", state, "ls", "--json"]).stdout)
                             ["checkpoints"]), 2)
        r = run(["state", state, "drop", "p"], input="p\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("dropped region p (2 checkpoints)", r.stdout)
        listing = json.loads(run(["state", state, "ls", "--json"]).stdout)
        self.assertEqual(listing["checkpoints"], [])
        self.assertTrue(listing["unreferenced"])
        # The next start: the region is empty (the dummy input counts from 1
        # again, the bucket from nothing) and the left chunks are gone.
        s = self.start(self.CONFIG, state_dir=state, server_config=self.SERVER)
        wait_for(lambda: committed(s) >= 1, timeout=30, what="a checkpoint")
        self.assertEqual(s.stop(), 0)
        listing = json.loads(run(["state", state, "ls", "--json"]).stdout)
        self.assertEqual(listing["unreferenced"], [])
        rows = [json.loads(l) for l in run(["state", state, "export", "totals"]).stdout.split()]
        total = sum(r["value"] for r in rows)
        out = self.read_output("out")
        first_run = len(out) - total  # what the file got before the drop
        self.assertGreater(first_run, 0)
        self.assertEqual([json.loads(l)["seq"] for l in out[first_run:first_run + 3]], [1, 2, 3])

    def test_bad_command_lines(self):
        for args, code, want in [
            (["state"], 2, "give the state directory"),
            (["state", self.path("none")], 1, "is not a directory"),
            (["state", self.dir, "fix"], 2, "no command 'fix'"),
            (["state", self.dir, "show"], 2, "show needs a bucket's name"),
            (["state", self.dir, "drop"], 2, "drop needs a region's name"),
            (["state", self.dir, "export", "a", "b"], 2, "unexpected 'b'"),
            (["state", self.dir, "ls", "--bogus"], 2, "unknown option '--bogus'"),
        ]:
            with self.subTest(args=args):
                r = run(args)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertIn(want, r.stderr)


class PlanCommandTest(KayakTest):
    """`kayak plan NEW.yaml --state-dir DIR`: a change judged against a real
    state directory offline. The same graph keeps everything (exit 0); a
    changed window, a window moved by an inserted transform and a bucket left
    out are named with why (exit 3); a start on the planned config does what
    the plan said."""
    CONFIG = """\
buckets:
  totals: {}
pipelines:
  p:
    input: {dummy: {rate_per_sec: 400, template: '{"seq":{{seq}}}'}}
    transforms:
      - map: {k: 'seq % 5'}
      - rolling_window: {key: k, field: seq, window_messages: 50, aggregates: [count]}
      - bucket: {name: totals, key: k, op: count}
    outputs: [{file: {path: out}}]
"""
    SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n"

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def plan(self, state, text, *extra):
        import json
        cfg = self.write("new.yaml", text)
        r = run(["plan", cfg, "--state-dir", state, *extra])
        j = None
        if "--json" in extra and r.stdout.strip():
            j = json.loads(r.stdout)
        return r, j

    def test_a_plan_names_what_a_change_keeps_and_drops_and_a_start_agrees(self):
        state = self.path("state")
        s = self.start(self.CONFIG, state_dir=state, server_config=self.SERVER)
        wait_for(lambda: committed(s) >= 2, timeout=30, what="two checkpoints")
        r, _ = self.plan(state, self.CONFIG)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"a server is running on {state} (pid {s.proc.pid})", r.stderr)
        self.assertIn("dry_run=1", r.stderr)
        r, _ = self.plan(state, self.CONFIG, "--force-read")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(s.stop(), 0)
        before = sorted(os.listdir(state))

        r, j = self.plan(state, self.CONFIG, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(j["drops_state"])
        states = {c["component"]: c["state"] for c in j["components"]}
        self.assertEqual(states["pipeline p transforms[1] (rolling_window)"], "kept")
        self.assertEqual(states["bucket totals"], "kept")
        self.assertEqual(states["pipeline p input (dummy)"], "kept")
        self.assertEqual(states["pipeline p transforms[0] (map)"], "none")
        self.assertEqual([r["action"] for r in j["regions"]], ["starts"])

        # The window's identity changes: it starts empty, by name.
        changed = self.CONFIG.replace("window_messages: 50", "window_messages: 20")
        r, _ = self.plan(state, changed)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertRegex(r.stdout, r"STARTS EMPTY +pipeline p transforms\[1\] \(rolling_window\) +"
                                   r"identity option .window_messages. changed; loses [\d.]+ (B|KiB)")
        self.assertIn("this change drops state: 1 component(s) lose", r.stdout)
        # A tuning option only: everything kept.
        r, _ = self.plan(state, self.CONFIG.replace("rate_per_sec: 400", "rate_per_sec: 300"))
        self.assertEqual(r.returncode, 0, r.stdout)
        # A filter inserted before the window moves it; the bucket left out goes.
        moved = self.CONFIG.replace("      - rolling_window", "      - filter: 'seq >= 0'\n"
                                    "      - rolling_window")
        moved = moved.replace("      - bucket: {name: totals, key: k, op: count}\n", "")
        moved = moved.replace("buckets:\n  totals: {}\n", "")
        r, j = self.plan(state, moved, "--json")
        self.assertEqual(r.returncode, 3, r.stderr)
        lost = {c["component"]: c for c in j["components"] if c["loses_state"]}
        self.assertEqual(sorted(lost), ["bucket totals", "pipeline p transforms[1] (rolling_window)"])
        self.assertIn("moved to transforms[2]", lost["pipeline p transforms[1] (rolling_window)"]["why"])
        self.assertEqual(lost["bucket totals"]["state"], "dropped")
        self.assertEqual(j["losing_components"], 2)
        # Planning changed nothing in the directory.
        self.assertEqual(sorted(os.listdir(state)), before)

        # A start on the changed window does what the plan said: the window
        # starts empty, the bucket is restored.
        s = self.start(changed, state_dir=state, server_config=self.SERVER)
        self.assertIn("its config changed since checkpoint", s.stderr())
        self.assertIn("bucket totals (b.totals) restored from checkpoint", s.stderr())

    def test_bad_invocations_and_configs(self):
        state = self.path("state")
        os.makedirs(state)
        good = self.write("good.yaml", self.CONFIG)
        bad = self.write("bad.yaml", self.CONFIG.replace("rolling_window:", "rolling_windw:"))
        for args, code, want in [
            (["plan"], 2, "give the new config file"),
            (["plan", good], 2, "--state-dir"),
            (["plan", good, "--state-dir", state, "--bogus"], 2, "unknown option '--bogus'"),
            (["plan", bad, "--state-dir", state], 2, "unknown transform type 'rolling_windw'"),
            (["plan", good, "--state-dir", self.path("nowhere")], 1, "is not a directory"),
        ]:
            with self.subTest(args=args):
                r = run(args)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertIn(want, r.stderr)
        # An empty directory: nothing committed, nothing to lose.
        r = run(["plan", good, "--state-dir", state])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("starts with nothing committed", r.stdout)


class CrashtestCommandTest(KayakTest):
    """`kayak crashtest`: the user's graph on a recorded input, once straight
    and once with kill -9s, compared. A deterministic graph agrees (exit 0);
    a graph whose output depends on the wall clock is caught (exit 1, the
    differing lines shown)."""
    CONFIG = """\
buckets:
  totals: {}
pipelines:
  p:
    input: {kafka: {brokers: 127.0.0.1:1, topics: [t], group: g}}
    transforms:
      - map: {k: 'seq % 50'}
      - bucket: {name: totals, key: k, op: add, field: seq}
    outputs: [{kafka: {brokers: 127.0.0.1:1, topic: out}}]
    dead_letter: {kafka: {brokers: 127.0.0.1:1, topic: dead}}
  q:
    input: {pipeline: p}
    transforms: [{filter: 'seq % 7 == 0'}]
    outputs: [{stdout: {}}]
"""

    def setUp(self):
        super().setUp()
        with open(self.path("recorded.ndjson"), "w") as f:
            for i in range(1, 40001):
                f.write(json.dumps({"seq": i} if i % 1000 else {"seq": "bad"}) + "\n")
        with open(self.path("graph.yaml"), "w") as f:
            f.write(self.CONFIG)

    def test_a_deterministic_graph_agrees_across_kills(self):
        r = run(["crashtest", self.path("graph.yaml"), "--input", f"p={self.path('recorded.ndjson')}",
                 "--kills", "3", "--seed", "11", "--feed-secs", "3", "--dir", self.path("runs"), "--json"], timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        report = json.loads(r.stdout)
        self.assertTrue(report["same"], report)
        self.assertEqual((report["seed"], report["kills"]), (11, 3))
        self.assertEqual(len(report["kill_after_ms"]), 3)
        # Each start killed at a commit step died there (it commits within 10 s).
        self.assertEqual(report["killed_at_commit_steps"],
                         ["after_chunks", "before_rename", "before_dir_fsync", "after_dir_fsync"])
        # 39,960 good messages to p's output, the 40 bad ones (seq not a
        # number: the bucket's add fails) to its dead letters, every 7th to q's.
        outs = {n: len(os.listdir(self.path("runs", "killed", "out", n)))
                for n in os.listdir(self.path("runs", "killed", "out"))}
        self.assertEqual(sorted(outs), ["p.dead", "p.o0", "q.o0"])
        def lines(n):
            count = 0
            for part in os.listdir(self.path("runs", "killed", "out", n)):
                with open(self.path("runs", "killed", "out", n, part)) as f:
                    count += sum(1 for _ in f)
            return count
        self.assertEqual(lines("p.o0"), 39960)
        self.assertEqual(lines("p.dead"), 40)
        self.assertEqual(lines("q.o0"), len([i for i in range(1, 40001) if i % 1000 and i % 7 == 0]))
        # The human report says the same.
        r = run(["crashtest", self.path("graph.yaml"), "--input", f"p={self.path('recorded.ndjson')}",
                 "--kills", "1", "--seed", "5", "--feed-secs", "2", "--dir", self.path("runs2")], timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("seed 5 (run again with --seed 5)", r.stdout)
        self.assertIn("same: every output line and every bucket entry agree", r.stdout)

    def test_a_broken_promise_is_caught(self):
        # A file output that keeps what it wrote after the checkpoint (the
        # mutation file_keep_tail) doubles lines across a kill: the report
        # names the output and the extra lines. The source is a paced dummy,
        # kept as it is (finite and rewindable), so the kills land mid-stream.
        paced = ("pipelines:\n  p:\n    input: {dummy: {count: 20000, rate_per_sec: 8000, "
                 "template: '{\"seq\":{{seq}}}'}}\n    outputs: [{file: {path: /dev/null/x}}]\n")
        with open(self.path("paced.yaml"), "w") as f:
            f.write(paced)
        args = ["crashtest", self.path("paced.yaml"), "--kills", "2", "--seed", "4", "--json"]
        r = run(args + ["--dir", self.path("good")], timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(json.loads(r.stdout)["messages"], 20000)
        r = run(args + ["--dir", self.path("broken")], timeout=600,
                env=dict(os.environ, KAYAK_MUTATION="file_keep_tail"))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        report = json.loads(r.stdout)
        self.assertFalse(report["same"])
        [d] = report["differences"]
        self.assertEqual((d["output"], d["missing_after_kills"]), ("p.o0", 0), d)
        self.assertGreater(d["extra_after_kills"], 0, d)

    def test_a_graph_that_reads_the_clock_is_caught_and_bad_invocations_refused(self):
        clocked = self.CONFIG.replace("      - map: {k: 'seq % 50'}\n",
                                      "      - map: {k: 'seq % 50', at: 'now()'}\n")
        with open(self.path("clocked.yaml"), "w") as f:
            f.write(clocked)
        r = run(["crashtest", self.path("clocked.yaml"), "--input", f"p={self.path('recorded.ndjson')}",
                 "--kills", "1", "--seed", "3", "--feed-secs", "2", "--dir", self.path("runs")], timeout=600)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("DIFFERS output p.o0", r.stdout)
        self.assertIn("the runs differ", r.stdout)
        for args, want in [
            (["crashtest"], "give the config file"),
            (["crashtest", self.path("graph.yaml")], "pipeline p reads kafka: give its recorded input"),
            (["crashtest", self.path("graph.yaml"), "--input", "p=" + self.path("recorded.ndjson"),
              "--input", "x=" + self.path("recorded.ndjson")], "no source pipeline 'x'"),
            (["crashtest", self.path("graph.yaml"), "--input", "nofile"], "--input takes PIPELINE=FILE"),
        ]:
            with self.subTest(args=args):
                r = run(args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(want, r.stderr)
