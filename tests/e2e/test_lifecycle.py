"""Pipelines changed through the API while the graph carries data: create, update, revert,
restart, delete, the state each keeps, and what survives a server restart (SPEC 5.6, 6;
docs/lifecycle.md)."""
import json
import os

from harness import KayakTest, http, post_until_taken, wait_for

WINDOW = "{rolling_window: {key: k, field: v, window_messages: %d, aggregates: [count]}}"


def body(out, window=1000, path="/ingest/w"):
    return (f"input: {{http: {{path: {path}}}}}\n"
            f"transforms: [{WINDOW % window}]\n"
            f"outputs: [{{file: {{path: {out}}}}}]\n")


CONFIG = """
buckets:
  sums: {}
pipelines:
  w:
    input: {http: {path: /ingest/w}}
    transforms: [%s]
    outputs: [{file: {path: out1}}]
""" % (WINDOW % 1000)


class LifecycleTest(KayakTest):
    def put(self, s, pid, text):
        status, _, b = http("PUT", f"{s.url}/api/v1/pipelines/{pid}", text.encode())
        return status, json.loads(b)

    def accept(self, s, path, data):
        post_until_taken(s, path, data)

    def post(self, s, i, k="a"):
        self.accept(s, "/ingest/w", json.dumps({"id": i, "k": k, "v": 1}).encode())

    def rows(self, *dirs):
        out = []
        for d in dirs:
            out += [json.loads(l) for l in self.read_output(d)]
        return out

    def wait_rows(self, n, *dirs):
        wait_for(lambda: len(self.rows(*dirs)) >= n, what=f"{n} rows in {dirs}")
        return self.rows(*dirs)

    def test_update_keeps_unchanged_state_and_revert_carries_on(self):
        state = self.path("state")
        s = self.start(CONFIG, state_dir=state)
        for i in range(5):
            self.post(s, i)
        self.assertEqual([r["v_count"] for r in self.wait_rows(5, "out1")], [1, 2, 3, 4, 5])

        # Only the output changes: the window keeps its five points.
        status, a = self.put(s, "w", body(self.path("out2")))
        self.assertEqual((status, a["version"], a["change"]), (200, 2, "updated"))
        self.post(s, 5)
        self.assertEqual(self.wait_rows(1, "out2")[-1]["v_count"], 6)
        self.assertEqual(s.get_json("/api/v1/pipelines/w")["version"], 2)

        # The window itself changes: refused with the plan until the loss is
        # accepted; then it starts empty.
        status, a = self.put(s, "w?dry_run=1", body(self.path("out2"), window=999))
        self.assertEqual((status, a["dry_run"], a["change"]), (200, True, "updated"), a)
        lost = [c for c in a["plan"]["components"] if c["loses_state"]]
        self.assertEqual([(c["component"], c["state"], c["kind"]) for c in lost],
                         [("pipeline w transforms[0] (rolling_window)", "starts_empty", "state")])
        self.assertGreater(lost[0]["bytes"], 0)
        actions = [(r["region"], r["action"]) for r in a["plan"]["regions"]]
        self.assertIn(("w", "stops"), actions)
        self.assertIn(("w", "starts"), actions)
        self.assertEqual(s.get_json("/api/v1/pipelines/w")["version"], 2, "a dry run changes nothing")
        self.assertEqual(self.put(s, "w?dry_run=perhaps", "x")[0], 400)
        status, a = self.put(s, "w", body(self.path("out2"), window=999))
        self.assertEqual(status, 409, a)
        self.assertIn("pipeline w transforms[0] (rolling_window): identity option", a["error"])
        self.assertEqual([c["state"] for c in a["plan"]["components"] if c["loses_state"]],
                         ["starts_empty"])
        self.assertEqual(s.get_json("/api/v1/pipelines/w")["version"], 2)
        status, a = self.put(s, "w?accept_state_loss=1", body(self.path("out2"), window=999))
        self.assertEqual((status, a["version"]), (200, 3))
        self.post(s, 6)
        self.assertEqual(self.wait_rows(2, "out2")[-1]["v_count"], 1)

        # The same body again is no new version.
        status, a = self.put(s, "w", body(self.path("out2"), window=999))
        self.assertEqual((status, a["change"], a["version"]), (200, "unchanged", 3))

        # Revert: version 2's body as version 4; the input carries on where it stopped.
        status, _, b = http("POST", s.url + "/api/v1/pipelines/w/revert", b"")
        self.assertEqual(status, 200, b)
        self.assertEqual(json.loads(b)["version"], 4)
        for i in range(7, 10):
            self.post(s, i)
        self.wait_rows(10, "out1", "out2")
        self.assertEqual(sorted(r["id"] for r in self.rows("out1", "out2")), list(range(10)),
                         "every acknowledged post once: none replayed, none lost")
        versions = s.get_json("/api/v1/pipelines/w/versions")
        self.assertEqual([v["version"] for v in versions["versions"]], [1, 2, 3, 4])
        self.assertEqual(versions["versions"][3]["change"], "reverted to version 2")
        self.assertEqual(versions["versions"][3]["body"], versions["versions"][1]["body"])
        self.assertEqual(versions["current"], 4)
        self.assertTrue(all(v["created_ms"] > 0 for v in versions["versions"]))

        # A server restart brings back every API-made change, whatever the file says.
        self.assertEqual(s.stop(), 0)
        s = self.start(CONFIG, state_dir=state)
        again = s.get_json("/api/v1/pipelines/w/versions")
        self.assertEqual(again["versions"], versions["versions"])
        self.assertEqual(s.get_json("/api/v1/pipelines/w")["version"], 4)
        self.post(s, 10)
        wait_for(lambda: 10 in [r["id"] for r in self.rows("out2")], what="post 10 in out2")
        self.assertNotIn(10, [r["id"] for r in self.rows("out1")])
        self.assertIn("differs from version 4 made through the API", s.stderr())

    def test_create_delete_and_create_again_starts_empty(self):
        state = self.path("state")
        s = self.start(CONFIG, state_dir=state)
        status, a = self.put(s, "x", body(self.path("x1"), path="/ingest/x"))
        self.assertEqual((status, a["version"], a["change"]), (201, 1, "created"))
        for i in range(3):
            self.accept(s, "/ingest/x", json.dumps({"id": i, "k": "a", "v": 1}).encode())
        self.assertEqual([r["v_count"] for r in self.wait_rows(3, "x1")], [1, 2, 3])
        self.assertTrue(os.path.isdir(os.path.join(state, "http", "x")))

        # A pipeline that feeds another cannot go.
        self.assertEqual(self.put(s, "y", "input: {pipeline: x}\n")[0], 201)
        status, _, b = http("DELETE", s.url + "/api/v1/pipelines/x")
        self.assertEqual(status, 409, b)
        self.assertEqual(json.loads(b)["downstreams"], ["y"])
        self.assertEqual(http("DELETE", s.url + "/api/v1/pipelines/y")[0], 200)

        status, _, b = http("DELETE", s.url + "/api/v1/pipelines/x")
        self.assertEqual(status, 200, b)
        self.assertEqual(s.get("/api/v1/pipelines/x")[0], 404)
        self.assertEqual(http("POST", s.url + "/ingest/x", b'{"k":"a","v":1}')[0], 404)
        self.assertFalse(os.path.exists(os.path.join(state, "http", "x")), "its logged posts go")
        self.assertEqual(http("DELETE", s.url + "/api/v1/pipelines/x")[0], 404)

        # The same id later starts from nothing, even across a restart.
        status, a = self.put(s, "x", body(self.path("x2"), path="/ingest/x"))
        self.assertEqual((status, a["change"]), (201, "created"))
        self.accept(s, "/ingest/x", b'{"id":9,"k":"a","v":1}')
        self.assertEqual(self.wait_rows(1, "x2")[0]["v_count"], 1)
        self.assertEqual(s.stop(), 0)
        s = self.start(CONFIG, state_dir=state)
        self.accept(s, "/ingest/x", b'{"id":10,"k":"a","v":1}')
        wait_for(lambda: len(self.rows("x2")) >= 2, what="the post after the restart")
        self.assertEqual([r["id"] for r in self.rows("x2")], [9, 10], "nothing replayed")
        self.assertEqual(self.rows("x2")[-1]["v_count"], 2)
        changes = [v["change"] for v in s.get_json("/api/v1/pipelines/x/versions")["versions"]]
        self.assertEqual(changes, ["created", "deleted", "created"])

    def test_bad_bodies_are_refused_with_their_line_and_column(self):
        s = self.start(CONFIG, state_dir=self.path("state"))
        status, a = self.put(s, "z", "input:\n  dummy: {count: many}\n")
        self.assertEqual(status, 400)
        self.assertEqual((a["errors"][0]["line"], a["errors"][0]["column"]), (2, 18))
        self.assertIn("whole number", a["error"])
        status, a = self.put(s, "z", "input: {dummy: {count: 1}\n")  # unclosed
        self.assertEqual(status, 400)
        self.assertIn("line", a["error"])
        status, a = self.put(s, "z", "input: {pipeline: nowhere}\n")
        self.assertEqual(status, 400)
        self.assertIn("unknown pipeline 'nowhere'", a["error"])
        status, a = self.put(s, "z", "input: {pipeline: z}\n")
        self.assertEqual(status, 400, a)
        status, a = self.put(s, "z", "input: {http: {path: /ingest/w}}\n")
        self.assertEqual(status, 400)
        self.assertIn("pipeline 'w' already serves /ingest/w", a["error"])
        status, a = self.put(s, "Bad%20Name", "input: {dummy: {count: 1}}\n")
        self.assertEqual(status, 400)
        status, a = self.put(s, "z", "transforms:\n  - bucket: {name: nope, key: k, op: count}\n"
                                     "input: {dummy: {count: 1}}\n")
        self.assertEqual(status, 400)
        self.assertIn("nope", a["error"])
        self.assertEqual(s.get("/api/v1/pipelines/z")[0], 404)
        self.assertEqual(s.get("/api/v1/pipelines/w")[0], 200)
        # JSON bodies are YAML too
        status, a = self.put(s, "z", json.dumps({"input": {"dummy": {"count": 2}},
                                                 "outputs": [{"file": {"path": self.path("zo")}}]}))
        self.assertEqual(status, 201, a)
        self.wait_rows(2, "zo")

    def test_restart_and_bucket_declarations(self):
        state = self.path("state")
        s = self.start(CONFIG + """
  counter:
    input: {http: {path: /ingest/c}}
    transforms: [{bucket: {name: sums, key: k, op: count}}]
""", state_dir=state)
        for _ in range(3):
            self.accept(s, "/ingest/c", b'{"k":"a"}')
        wait_for(lambda: (s.get("/api/v1/buckets/sums?key=a")[0] == 200 and
                          s.get_json("/api/v1/buckets/sums?key=a")["value"] == 3) or None,
                 what="three counts")
        status, _, b = http("POST", s.url + "/api/v1/pipelines/counter/restart", b"")
        self.assertEqual(status, 200, b)
        self.assertEqual(s.get_json("/api/v1/buckets/sums?key=a")["value"], 3, "kept")
        self.assertEqual(http("POST", s.url + "/ingest/c", b'{"k":"a"}')[0], 202)
        wait_for(lambda: s.get_json("/api/v1/buckets/sums?key=a")["value"] == 4 or None,
                 what="the count after the restart")
        self.assertEqual(s.get_json("/api/v1/pipelines/counter")["status"], "running")
        self.assertEqual(http("POST", s.url + "/api/v1/pipelines/none/restart", b"")[0], 404)
        # A changed bucket declaration empties the bucket: refused (409, with
        # the plan naming the bucket and the option) until the loss is accepted.
        status, _, b = http("PUT", s.url + "/api/v1/buckets/sums", b"{idle_timeout_secs: 3600}")
        self.assertEqual(status, 409, b)
        refused = json.loads(b)
        self.assertIn("bucket sums: identity option 'idle_timeout_secs' changed", refused["error"])
        self.assertTrue(refused["plan"]["drops_state"])
        self.assertEqual(s.get_json("/api/v1/buckets/sums?key=a")["value"], 4, "nothing changed")
        status, _, b = http("PUT", s.url + "/api/v1/buckets/sums?accept_state_loss=1",
                            b"{idle_timeout_secs: 3600}")
        self.assertEqual(status, 200, b)
        self.assertEqual(s.get("/api/v1/buckets/sums?key=a")[0], 404)
        # A new bucket, then a pipeline that writes it.
        self.assertEqual(http("PUT", s.url + "/api/v1/buckets/more", b"{}")[0], 201)
        status, a = self.put(s, "m", "input: {dummy: {count: 2, template: '{\"k\":\"b\"}'}}\n"
                                     "transforms: [{bucket: {name: more, key: k, op: count}}]\n")
        self.assertEqual(status, 201, a)
        wait_for(lambda: s.get("/api/v1/buckets/more?key=b")[0] == 200 or None, what="bucket more")

    def test_the_file_decides_what_the_api_did_not_touch(self):
        state = self.path("state")
        s = self.start(CONFIG, state_dir=state)
        self.assertEqual(self.put(s, "api", "input: {dummy: {count: 1}}\n")[0], 201)
        self.assertEqual(s.stop(), 0)
        # w changed in the file: a from-file version; api stays; a new file pipeline comes in.
        changed = CONFIG.replace("out1", "out9") + "  extra:\n    input: {dummy: {count: 1}}\n"
        s = self.start(changed, state_dir=state)
        w = s.get_json("/api/v1/pipelines/w/versions")
        self.assertEqual([v["change"] for v in w["versions"]], ["from-file", "from-file"])
        self.assertIn("out9", w["versions"][1]["body"])
        self.assertEqual(s.get("/api/v1/pipelines/api")[0], 200)
        self.assertEqual(s.get("/api/v1/pipelines/extra")[0], 200)
        self.assertEqual(s.stop(), 0)
        # extra gone from the file: deleted
        s = self.start(changed.split("  extra:")[0], state_dir=state)
        self.assertEqual(s.get("/api/v1/pipelines/extra")[0], 404)
        self.assertEqual(s.get_json("/api/v1/pipelines/extra/versions")["current"], 0)

    def test_without_a_state_dir_versions_live_in_memory(self):
        s = self.start(CONFIG)
        status, a = self.put(s, "w", body(self.path("out2")))
        self.assertEqual((status, a["version"]), (200, 2))
        self.post(s, 1)
        self.wait_rows(1, "out2")
        self.assertEqual(len(s.get_json("/api/v1/pipelines/w/versions")["versions"]), 2)
        self.assertEqual(s.stop(), 0)
        s = self.start(CONFIG)
        self.assertEqual(len(s.get_json("/api/v1/pipelines/w/versions")["versions"]), 1)

    def test_restart_brings_back_a_failed_pipeline_and_its_region_commits_again(self):
        src = self.path("in.ndjson")
        s = self.start(f"""
pipelines:
  f:
    input: {{file: {{path: {src}}}}}
    outputs: [{{file: {{path: outf}}}}]
""", state_dir=self.path("state"))
        wait_for(lambda: s.get_json("/api/v1/pipelines/f")["status"] == "failed" or None,
                 what="the pipeline to fail (no input file)")

        def region():
            return s.get_json("/api/v1/checkpoints")["regions"][0]
        wait_for(lambda: region()["held_back"] or None, what="the region held back")
        held_at = region()["last_committed_id"]
        self.write_ndjson("in.ndjson", [{"i": i} for i in range(3)])
        status, _, b = http("POST", s.url + "/api/v1/pipelines/f/restart", b"")
        self.assertEqual(status, 200, b)
        self.assertEqual(len(self.wait_rows(3, "outf")), 3)
        self.assertIn(s.get_json("/api/v1/pipelines/f")["status"], ("running", "finished"))
        status, _, b = http("POST", s.url + "/api/v1/checkpoints", b"")
        self.assertEqual(status, 200, b)
        self.assertFalse(region()["held_back"])
        self.assertGreater(region()["last_committed_id"], held_at)


if __name__ == "__main__":
    import unittest
    unittest.main()


class SecretOptionsTest(KayakTest):
    """Options the property table marks secret (an http input's token, an
    http output's headers) are never shown by the API: not in the running
    config, not in the versions' bodies."""

    def test_secrets_are_shown_as_stars(self):
        cfg = "pipelines:\n  p:\n    input: {dummy: {count: 1}}\n    outputs: [{stdout: {}}]\n"
        s = self.start(cfg)
        body = ("input: {http: {path: /in, token: s3cret-token}}\n"
                "outputs: [{http: {url: 'http://127.0.0.1:9/x', headers: {Authorization: "
                "Bearer s3cret-header}}}]\n")
        status, _, b = http("PUT", f"{s.url}/api/v1/pipelines/q", body.encode())
        self.assertEqual(status, 201, b)
        for path in ("/api/v1/pipelines/q", "/api/v1/pipelines/q/versions",
                     "/api/v1/pipelines"):
            status, text = s.get(path)
            self.assertEqual(status, 200, text)
            self.assertNotIn("s3cret", text, path)
        config = s.get_json("/api/v1/pipelines/q")["config"]
        self.assertEqual(config["input"]["http"]["token"], "***")
        self.assertEqual(config["outputs"][0]["http"]["headers"], "***")
        self.assertIn("***", s.get_json("/api/v1/pipelines/q/versions")["versions"][0]["body"])
