"""The s3 output against moto's S3 server (started once per run by the CTest
fixtures `s3` and `s3strict`): objects cut at row boundaries and
byte-identical to the input, kill -9 at random instants and at the crash
points between an upload and the checkpoint that names it, no multipart
upload left open, compressed objects under S3's 5 MiB part minimum, a bad
bucket, and options that do not fit."""
import gzip
import json
import os
import random
import socket
import subprocess
import time
import unittest

from harness import KAYAK, Endpoint, KayakTest, committed, tls_block, wait_for
from servers import s3_env, s3_objects, s3_put, s3_uploads

def decompress(body, compression):
    """An object's rows: gzip members or zstd frames read through."""
    if compression == "gzip":
        return gzip.decompress(body)
    if compression == "zstd":
        return subprocess.run(["zstd", "-dcq"], input=body, capture_output=True, check=True,
                              timeout=30).stdout
    return body


SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def send_lines(port, seqs):
    """{"seq": N, "pad": ...} lines to the tcp input, retried while it starts."""
    data = "".join(json.dumps({"seq": i, "pad": "y" * 30}) + "\n" for i in seqs).encode()
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.sendall(data)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the server is starting


class S3Base(KayakTest):
    def setUp(self):
        super().setUp()
        self.prefix = f"t{os.getpid()}-{self.id().split('.')[-1][5:30]}"

    server = "s3"

    def s3(self, extra="", bucket="kayak", compression="none", key="{{seq}}.ndjson",
           endpoint=None):
        e = s3_env(self.server)
        return (f"{{s3: {{endpoint: '{endpoint or e['S3_ENDPOINT']}', bucket: {bucket}, path_style: true, "
                f"access_key_id: {e['S3_ACCESS_KEY_ID']}, secret_access_key: "
                f"{e['S3_SECRET_ACCESS_KEY']}, key: '{self.prefix}/{key}', "
                f"compression: {compression}{', ' + extra if extra else ''}}}}}")

    def input_file(self, n):
        path = self.path("in.ndjson")
        with open(path, "w") as f:
            for i in range(n):
                f.write(json.dumps({"seq": i, "pad": "x" * (i % 61)}, separators=(",", ":")) + "\n")
        with open(path, "rb") as f:
            return f.read()

    def objects(self, compression="none"):
        objs = s3_objects(self.prefix + "/", self.server)
        return b"".join(decompress(objs[k], compression) for k in sorted(objs)), sorted(objs)



class S3Test(S3Base):
    def test_objects_cut_at_row_boundaries_hold_every_row_once(self):
        data = self.input_file(3000)
        s = self.start(f"pipelines:\n  p:\n    input: {{file: {{path: {self.path('in.ndjson')}}}}}\n"
                       f"    outputs: [{self.s3('part_bytes: 10000, max_object_bytes: 50000')}]\n")
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == 3000, what="every row out")
        self.assertEqual(s.stop(), 0)  # the stop completes the last object
        got, keys = self.objects()
        self.assertEqual(got, data)
        self.assertGreater(len(keys), 3)
        for k in keys[:-1]:  # every object but the last ends at the first row past 50000 bytes
            body = s3_objects(k)[k]
            self.assertTrue(body.endswith(b"\n"))
            self.assertLess(len(body) - len(body[:-1].rsplit(b"\n", 1)[-1]) - 1, 50000)
            self.assertGreaterEqual(len(body), 50000)

    def test_compressed_objects_are_whole_gzip_and_zstd_files(self):
        data = self.input_file(3000)
        for comp in ["gzip", "zstd"]:
            with self.subTest(compression=comp):
                self.prefix += comp[0]
                s = self.start(f"pipelines:\n  p:\n    input: {{file: {{path: "
                               f"{self.path('in.ndjson')}}}}}\n    outputs: ["
                               f"{self.s3('part_bytes: 10000, max_object_bytes: 50000', compression=comp)}]\n")
                wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == 3000,
                         what="every row out")
                self.assertEqual(s.stop(), 0)
                objs = s3_objects(self.prefix + "/")
                self.assertGreater(len(objs), 3)
                raw = sum(len(decompress(b, comp)) for b in objs.values())
                self.assertLess(sum(len(b) for b in objs.values()), raw / 3)
                self.assertEqual(self.objects(comp)[0], data)
                for k, body in objs.items():  # each object is one file of several parts
                    self.assertGreaterEqual(len(decompress(body, comp)), 50000 if k != max(objs) else 1)

    def test_kill_9_anywhere_leaves_objects_byte_identical(self):
        self.kill_run("none", ["random", "s3_after_upload_part:3", "random", "s3_after_complete:1",
                               "random", "s3_after_upload_part:7", "random"])

    def test_kill_9_leaves_compressed_objects_byte_identical(self):
        # s3_after_complete: the restore reads the completed object through to
        # learn how many rows it holds.
        self.kill_run("gzip", ["s3_after_complete:1", "random", "s3_after_upload_part:4",
                               "s3_after_complete:2", "random"])

    def kill_run(self, comp, kills):
        data = self.input_file(6000)
        # compressed, a part is cut at 3000 compressed bytes: several an object
        opts = f"part_bytes: {8000 if comp == 'none' else 3000}, max_object_bytes: 60000"
        cfg = (f"pipelines:\n  p:\n    input: {{file: {{path: {self.path('in.ndjson')}, "
               f"batch_size: 50}}}}\n"
               "    transforms: [{lua: {script: 'function process(m) for i=1,400000 do end "
               "return m end'}}]\n"
               f"    outputs: [{self.s3(opts, compression=comp)}]\n")
        state = self.path("state")
        rng = random.Random()
        killed, logs = 0, ""
        for k in kills:
            env = {} if k == "random" else {"KAYAK_CRASH_POINT": k}
            s = self.start(cfg, server_config=SERVER, state_dir=state, env=env)

            def done(s=s):
                try:
                    return s.card("p", "input")["state"] == "finished"
                except OSError:  # it killed itself while answering
                    return False
            if k == "random":
                wait_for(lambda: done() or s.card("p", "outputs[0]")["messages_out"] > 0,
                         timeout=60, what="rows out")
                time.sleep(rng.uniform(0.2, 1.5))
            else:  # it kills itself at the crash point (unless the input ends first)
                wait_for(lambda: s.proc.poll() is not None or done(), timeout=120,
                         what=f"the crash point {k}")
            killed += s.proc.poll() is not None or not done()
            s.kill()
            logs += s.stderr()
        self.assertGreaterEqual(killed, min(5, len(kills)),
                                "too few kills landed before the input ended")
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: s.card("p", "input")["state"] == "finished", timeout=300,
                 what="the input to end")
        self.assertEqual(s.stop(), 0)
        if any(k.startswith("s3_after_complete") for k in kills):
            self.assertIn("was completed after the checkpoint", logs + s.stderr())
        got, keys = self.objects(comp)
        self.assertEqual(len(got), len(data), f"{len(keys)} objects")
        self.assertEqual(got, data)
        # Every upload a killed run left open was completed or aborted.
        self.assertEqual(s3_uploads(self.prefix + "/"), [], "multipart uploads left open")
        if comp != "none":  # and the same bytes as an uninterrupted run
            old, self.prefix = self.prefix, self.prefix + "-clean"
            s = self.start(cfg.replace(old + "/", self.prefix + "/"), server_config=SERVER,
                           state_dir=self.path("state2"))
            wait_for(lambda: s.card("p", "input")["state"] == "finished", timeout=300,
                     what="the input to end")
            self.assertEqual(s.stop(), 0)
            clean = s3_objects(self.prefix + "/")
            self.assertEqual([clean[k] for k in sorted(clean)],
                             [s3_objects(k)[k] for k in keys])

    def test_new_rows_after_an_object_completed_past_the_checkpoint_are_kept(self):
        # tcp does not replay: after a kill -9 right after an object was
        # completed (past the checkpoint that shows it open), the rows that
        # come are new, not the object's rows again, and none is passed over
        port = free_port()
        cfg = (f"pipelines:\n  p:\n    input: {{tcp: {{listen: '127.0.0.1:{port}', "
               f"batch_size: 10}}}}\n"
               f"    outputs: [{self.s3('part_bytes: 300, max_object_bytes: 3000')}]\n")
        state = self.path("state")
        s = self.start(cfg, server_config=SERVER, state_dir=state,
                       env={"KAYAK_CRASH_POINT": "s3_after_complete:1"})
        send_lines(port, range(0, 20))
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= 20, what="20 rows out")
        c0 = committed(s)
        wait_for(lambda: committed(s) >= c0 + 1, what="a checkpoint with the object open")
        send_lines(port, range(20, 100))
        wait_for(lambda: s.proc.poll() is not None, timeout=30, what="the crash point")
        s.kill()
        s = self.start(cfg, server_config=SERVER, state_dir=state)
        send_lines(port, range(1000, 1050))
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= 50, what="50 new rows out")
        self.assertEqual(s.stop(), 0)
        self.assertIn("was completed after the checkpoint", s.stderr())
        got, _ = self.objects()
        seqs = [json.loads(l)["seq"] for l in got.decode().splitlines()]
        self.assertEqual(sorted(q for q in seqs if q >= 1000), list(range(1000, 1050)))
        self.assertEqual(len(seqs), len(set(seqs)), "a row twice")

    def test_a_run_without_a_state_dir_starts_past_every_earlier_object(self):
        # an earlier run's objects, in this hour and in another: the new run's
        # numbers start past the highest of them, so no later hour reuses one
        now = time.gmtime().tm_hour
        other = (now + 5) % 24
        s3_put(f"{self.prefix}/{other:02d}/0000000007.ndjson", b'{"old":7}\n')
        s3_put(f"{self.prefix}/{now:02d}/0000000002.ndjson", b'{"old":2}\n')
        s = self.start("pipelines:\n  p:\n    input: {dummy: {count: 50}}\n"
                       f"    outputs: [{self.s3('max_object_bytes: 300', key='{{hour}}/{{seq}}.ndjson')}]\n")
        wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == 50, what="every row out")
        self.assertEqual(s.stop(), 0)
        objs = s3_objects(self.prefix + "/")
        new = sorted(int(k.rsplit("/", 1)[1].split(".")[0]) for k, v in objs.items()
                     if b"old" not in v)
        self.assertGreater(len(new), 1)
        self.assertEqual(new, list(range(8, 8 + len(new))))
        self.assertEqual(objs[f"{self.prefix}/{other:02d}/0000000007.ndjson"], b'{"old":7}\n')

    def test_a_bad_bucket_is_an_error_on_the_card(self):
        self.input_file(10)
        s = self.start(f"pipelines:\n  p:\n    input: {{file: {{path: {self.path('in.ndjson')}}}}}\n"
                       f"    outputs: [{self.s3('part_bytes: 10', bucket='no-such-bucket')}]\n",
                       server_config=SERVER, state_dir=self.path("state"))
        wait_for(lambda: "NoSuchBucket" in s.card("p", "outputs[0]")["last_error"], timeout=30,
                 what="the error on the card")
        wait_for(lambda: s.card("p", "outputs[0]")["state"] == "retrying", timeout=30,
                 what="the card retrying")

    def test_options_that_do_not_fit(self):
        path = self.path("bad.yaml")
        for extra, want in [("key: 'a/b.ndjson'", "{{seq}}"), ("endpoint: 'ftp://x'", "http://")]:
            with self.subTest(extra=extra):
                with open(path, "w") as f:
                    f.write("pipelines:\n  p:\n    input: {dummy: {count: 1}}\n"
                            f"    outputs: [{{s3: {{bucket: b, access_key_id: a, "
                            f"secret_access_key: s, {extra}}}}}]\n")
                r = subprocess.run([KAYAK, "check", "--config", path], capture_output=True,
                                   text=True, timeout=30)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(want, r.stdout + r.stderr)


class S3RulesTest(S3Base):
    """Against moto with every rule of S3's multipart uploads (`s3strict`):
    a part under 5 MiB but the last makes CompleteMultipartUpload fail with
    EntityTooSmall."""
    server = "s3strict"

    def big_input(self, mib):
        """Rows of about 100 bytes, `mib` MiB in all, compressible about 4 to 1."""
        rng = random.Random(7)
        path = self.path("in.ndjson")
        with open(path, "w") as f:
            i = 0
            while f.tell() < mib << 20:
                f.write(json.dumps({"seq": i, "device": f"d{rng.randrange(500)}",
                                    "value": rng.random(), "tag": rng.choice("abcdefgh") * 20},
                                   separators=(",", ":")) + "\n")
                i += 1
        with open(path, "rb") as f:
            return f.read(), i

    def test_compressed_objects_complete_with_parts_of_at_least_5_mib(self):
        data, rows = self.big_input(24)
        for comp in ["gzip", "zstd"]:
            with self.subTest(compression=comp):
                self.prefix += comp[0]
                s = self.start(f"pipelines:\n  p:\n    input: {{file: {{path: "
                               f"{self.path('in.ndjson')}}}}}\n    outputs: ["
                               f"{self.s3(compression=comp)}]\n",
                               server_config=SERVER, state_dir=self.path(f"state-{comp}"))
                wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] == rows, timeout=120,
                         what="every row out")
                self.assertEqual(s.stop(), 0)  # completes the object
                self.assertNotIn("EntityTooSmall", s.stderr())
                got, keys = self.objects(comp)
                self.assertEqual(len(keys), 1, keys)
                self.assertEqual(got, data)
                self.assertEqual(s3_uploads(self.prefix + "/", self.server), [])


class S3TlsTest(S3Base):
    """The s3 output over https with the tls block: against the moto that
    speaks https beside `s3` (server.sh, a throwaway CA), and against local
    https endpoints for an expired certificate and one that requires a client
    certificate."""

    def tls(self, *names):
        return tls_block(s3_env()["S3_TLS_DIR"], *names)

    def graph(self, output):
        return (f"pipelines:\n  p:\n    input: {{file: {{path: {self.path('in.ndjson')}}}}}\n"
                f"    outputs: [{output}]\n")

    def test_objects_over_https_with_the_ca(self):
        data = self.input_file(500)
        s = self.start(self.graph(self.s3(self.tls("ca") + ", part_bytes: 4096, "
                                          "max_object_bytes: 16384, max_object_secs: 1",
                                          endpoint=s3_env()["S3_TLS_ENDPOINT"])),
                       server_config=SERVER, state_dir=self.path("state"))

        def whole():
            objs = s3_objects(self.prefix + "/", tls=True)
            return b"".join(objs[k] for k in sorted(objs)) == data and len(objs)
        n = wait_for(whole, timeout=60, what="every row in objects over https")
        self.assertGreater(n, 1)
        self.assertEqual(s.card("p", "outputs[0]")["last_error"], "")
        self.assertEqual(s.stop(), 0)

    def refused(self, endpoint, tls, wants):
        self.input_file(20)
        self.assert_refused(self.graph(self.s3(tls, endpoint=endpoint)), wants, card="outputs[0]")

    def test_a_wrong_ca_an_expired_certificate_and_no_client_certificate(self):
        d = s3_env()["S3_TLS_DIR"]
        self.refused(s3_env()["S3_TLS_ENDPOINT"], self.tls("other_ca"),
                     ("unable to get local issuer certificate", "self-signed certificate"))
        expired = Endpoint(tls=(d, "expired", False))
        self.addCleanup(expired.close)
        self.refused(expired.url.replace("127.0.0.1", "localhost"), self.tls("ca"),
                     ("certificate has expired",))
        self.assertEqual(expired.requests, [])
        mutual = Endpoint(tls=(d, "server", True), default=500)
        self.addCleanup(mutual.close)
        # (under TLS 1.3 the refusal comes after the handshake: an alert, or
        # a write or read that fails, which the card explains)
        self.refused(mutual.url, self.tls("ca"), ("certificate required", "tls.cert_file"))
        self.assertEqual(mutual.requests, [])
        # With the client certificate the requests arrive (the endpoint is not
        # S3: it answers 500, which the output retries).
        self.input_file(20)
        s = self.start(self.graph(self.s3(self.tls("ca", "cert"), endpoint=mutual.url)))
        wait_for(lambda: len(mutual.requests) >= 1, timeout=30, what="a request with the client "
                 "certificate")
        self.assertEqual(s.stop(), 0)

    def test_tls_options_that_do_not_fit(self):
        d = s3_env()["S3_TLS_DIR"]
        for endpoint, tls, want in [
                (s3_env()["S3_ENDPOINT"], self.tls("ca"), "name it https://"),
                (s3_env()["S3_TLS_ENDPOINT"], "tls: {server_name: other}", "server_name"),
                (s3_env()["S3_TLS_ENDPOINT"], f"tls: {{cert_file: {d}/client.crt}}", "key_file")]:
            with self.subTest(tls=tls):
                with open(self.path("check.yaml"), "w") as f:
                    f.write(self.graph(self.s3(tls, endpoint=endpoint)))
                r = subprocess.run([KAYAK, "check", "--config", self.path("check.yaml")],
                                   capture_output=True, text=True, timeout=30)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(want, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
