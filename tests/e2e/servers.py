"""The real servers the tests use (started once per run by the CTest fixtures in
tests/CMakeLists.txt, tests/servers/servers.sh), and a TCP proxy in front of
one that a test can cut and restore to make the server "go away"."""
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


def env(server):
    """The KEY=VALUE lines servers.sh wrote for `server`, as a dict."""
    base = os.environ.get("KAYAK_SERVERS")
    if not base:
        raise RuntimeError("KAYAK_SERVERS is not set: run this test through ctest, which "
                           "starts the servers (tests/CMakeLists.txt)")
    with open(os.path.join(base, server, "env")) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line)


def pg_url():
    return env("postgres")["PG_URL"]


def psql(sql, url=None, timeout=60):
    """Runs `sql` with psql (stops at the first error) and returns its rows,
    unaligned, one string per row."""
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                        url or pg_url()], input=sql, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"psql failed: {r.stderr.strip()}\n{sql[:500]}")
    return [l for l in r.stdout.splitlines() if l]


def pg_json_rows(table, order="1", url=None):
    """Every row of `table` as a dict (row_to_json)."""
    return [json.loads(l) for l in psql(
        f"SELECT row_to_json(t) FROM (SELECT * FROM {table} ORDER BY {order}) t", url)]


def ch_url():
    return env("clickhouse")["CLICKHOUSE_URL"]


def ch_refuse_kit0(on, db):
    """Takes user kit0's access to every database but `system` away (on) or
    gives it back (users.xml, which the server reads again within seconds),
    and waits until the server answers kit0 that way about `db`."""
    import re
    path = os.path.join(os.environ["KAYAK_SERVERS"], "clickhouse", "users.xml")
    with open(path) as f:
        text = f.read()
    rights = "<allow_databases><database>system</database></allow_databases>" if on else ""
    text = re.sub(r"<!--kit0-rights-->.*?<!--/kit0-rights-->",
                  f"<!--kit0-rights-->{rights}<!--/kit0-rights-->", text, flags=re.S)
    before = os.stat(path).st_mtime
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)
    # The server notices a change by the file's modification time in whole
    # seconds: two rewrites within one second would look like none.
    stamp = int(max(time.time(), before)) + 1
    os.utime(path, (stamp, stamp))
    deadline = time.monotonic() + 30
    while True:
        try:
            ch(f"SELECT count() FROM {db}.src", params="user=kit0&password=pw0")
            refused = False
        except RuntimeError:
            refused = True
        if refused == on:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"clickhouse did not {'refuse' if on else 'serve'} kit0 in 30 s")
        time.sleep(0.2)


def ch(sql, data=None, url=None, timeout=60, params=""):
    """Runs one ClickHouse statement over HTTP and returns the answer's text;
    with `data`, `sql` (an INSERT ... FORMAT) goes in the URL and `data` is the
    body."""
    base = (url or ch_url()) + "/?" + params
    if data is None:
        req = urllib.request.Request(base, data=sql.encode(), method="POST")
    else:
        req = urllib.request.Request(base + ("&" if params else "") + "query=" +
                                     urllib.parse.quote(sql),
                                     data=data.encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"clickhouse: {e.read().decode().strip()}\n{sql[:300]}") from None


def ch_rows(sql):
    """The rows of a SELECT as dicts (JSONEachRow, 64-bit integers as numbers)."""
    out = ch(sql + " FORMAT JSONEachRow", params="output_format_json_quote_64bit_integers=0")
    return [json.loads(l) for l in out.splitlines() if l]


class Proxy:
    """Forwards 127.0.0.1:<port> to a server. cut() closes every connection and
    stops listening (the server is gone); restore() listens again on the same
    port. hold_replies() drops what the server sends until the next cut (what
    is in flight when a link dies: requests arrive, their replies are lost).
    While hold_new is set, the connections made then carry nothing either
    way, for as long as they last (a server hung for one client, such as a
    connector's second connection)."""

    def __init__(self, host, port):
        self.target = (host, port)
        self.held = False
        self.hold_new = False
        self.lock = threading.Lock()
        self.conns = []
        self.listener = None
        self.port = 0
        self.restore()

    def restore(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.port = self.listener.getsockname()[1]
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, s]
            hung = self.hold_new
            for a, b, replies in ((c, s, False), (s, c, True)):
                threading.Thread(target=self._pipe, args=(a, b, replies, hung),
                                 daemon=True).start()

    def hold_replies(self):
        self.held = True

    def _pipe(self, a, b, replies, hung=False):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if not ((replies and self.held) or hung):
                    b.sendall(data)
        except OSError:
            pass
        self.hang_up(a, b)

    @staticmethod
    def hang_up(*socks):
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.held = False
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() to end its thread
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def close(self):
        self.cut()


# ---- message brokers (nats, redis, mosquitto) ----

def nats_url():
    return env("nats")["NATS_URL"]


def nats_monitor():
    return env("nats")["NATS_MONITOR_URL"]


def redis_url():
    return env("redis")["REDIS_URL"]


def mqtt_url():
    return env("mosquitto")["MQTT_URL"]


def port_of(url):
    return urllib.parse.urlsplit(url).port


def brokertool(*args, timeout=120):
    """Runs tests/brokers/brokertool (KAYAK_BROKERTOOL) and returns its stdout."""
    tool = os.environ.get("KAYAK_BROKERTOOL")
    if not tool:
        raise RuntimeError("KAYAK_BROKERTOOL is not set: run this test through ctest")
    r = subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"brokertool {' '.join(map(str, args))}: {r.stderr.strip()}")
    return r.stdout


def brokertool_reader(*args):
    """Starts a brokertool reader (nats-sub, redis-sub, mqtt-sub) and returns
    the process once it says it is subscribed."""
    tool = os.environ.get("KAYAK_BROKERTOOL")
    p = subprocess.Popen([tool, *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line.strip() != "ready":
        p.kill()
        raise RuntimeError(f"brokertool {args[0]}: {p.stderr.read().strip()}")
    return p


def redis_cli(*args, url=None):
    """One redis-cli command; its output, stripped."""
    r = subprocess.run(["redis-cli", "-u", url or redis_url(), *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"redis-cli {args}: {r.stderr.strip()}")
    return r.stdout.strip()


def nats_consumer(stream, durable):
    """The durable's info from the monitoring endpoint (None when it does not exist)."""
    url = f"{nats_monitor()}/jsz?consumers=true"
    with urllib.request.urlopen(url, timeout=10) as r:
        info = json.loads(r.read())
    for acc in info.get("account_details", []):
        for st in acc.get("stream_detail", []):
            if st["name"] != stream:
                continue
            for c in st.get("consumer_detail", []) or []:
                if c["name"] == durable:
                    return c
    return None


def nats_consumers(stream):
    """The names of the stream's consumers (the monitoring endpoint)."""
    with urllib.request.urlopen(f"{nats_monitor()}/jsz?consumers=true", timeout=10) as r:
        info = json.loads(r.read())
    return [c["name"] for acc in info.get("account_details", [])
            for st in acc.get("stream_detail", []) if st["name"] == stream
            for c in st.get("consumer_detail", []) or []]


def nats_stream_msgs(stream):
    url = f"{nats_monitor()}/jsz?streams=true"
    with urllib.request.urlopen(url, timeout=10) as r:
        info = json.loads(r.read())
    for acc in info.get("account_details", []):
        for st in acc.get("stream_detail", []):
            if st["name"] == stream:
                return st["state"]["messages"]
    return None


def redis_commands(commands, url=None):
    """Sends `commands` (lists of str) pipelined over one connection (RESP)
    and returns the replies: str, int, None, list, or RuntimeError for an error."""
    u = urllib.parse.urlsplit(url or redis_url())
    out = bytearray()
    for cmd in commands:
        out += f"*{len(cmd)}\r\n".encode()
        for a in cmd:
            b = a if isinstance(a, bytes) else str(a).encode()
            out += f"${len(b)}\r\n".encode() + b + b"\r\n"
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(out)
        f = s.makefile("rb")

        def reply():
            line = f.readline().rstrip(b"\r\n")
            kind, rest = line[:1], line[1:]
            if kind == b"+":
                return rest.decode()
            if kind == b"-":
                return RuntimeError(rest.decode())
            if kind == b":":
                return int(rest)
            if kind == b"$":
                n = int(rest)
                if n < 0:
                    return None
                data = f.read(n + 2)[:-2]
                return data.decode(errors="replace")
            if kind == b"*":
                n = int(rest)
                return None if n < 0 else [reply() for _ in range(n)]
            raise RuntimeError(f"redis: unexpected reply {line!r}")
        return [reply() for _ in commands]


def redis_stream_payloads(key, field="payload"):
    """The `field` of every entry of stream `key`, in order."""
    entries = redis_commands([["XRANGE", key, "-", "+"]])[0] or []
    out = []
    for _, fields in entries:
        for i in range(0, len(fields), 2):
            if fields[i] == field:
                out.append(fields[i + 1])
    return out


def nats_subscribed(subject):
    """Whether some client of the NATS server subscribes to exactly `subject`."""
    with urllib.request.urlopen(f"{nats_monitor()}/connz?subs=1", timeout=10) as r:
        info = json.loads(r.read())
    return any(subject in (c.get("subscriptions_list") or []) for c in info.get("connections", []))


# ---- S3 (moto) ----

def s3_env(server="s3"):
    """`s3`: moto with S3's rules but a part minimum of one byte; `s3strict`:
    every rule, parts of at least 5 MiB but the last (tests/servers/servers.sh)."""
    return env(server)


def s3_objects(prefix, server="s3", tls=False):
    """{key: bytes} of every object under `prefix` in bucket kayak (moto
    answers a list and a GET without a signature); with `tls`, of the moto
    that speaks https beside `s3`."""
    import re
    import ssl
    from urllib.parse import quote
    e = s3_env(server)
    base = e["S3_TLS_ENDPOINT" if tls else "S3_ENDPOINT"] + "/kayak"
    ctx = ssl.create_default_context(cafile=os.path.join(e["S3_TLS_DIR"], "ca.crt")) if tls else None
    with urllib.request.urlopen(f"{base}?list-type=2&max-keys=1000&prefix={quote(prefix)}",
                                timeout=30, context=ctx) as r:
        keys = re.findall(r"<Key>([^<]*)</Key>", r.read().decode())
    out = {}
    for k in keys:
        with urllib.request.urlopen(f"{base}/{quote(k)}", timeout=30, context=ctx) as r:
            out[k] = r.read()
    return out


def s3_boto3(server, body, *args, stdin=None):
    """Runs `body` (Python, with `c` a boto3 S3 client of the server, and
    `sys.argv[1:]` = `args`) in the venv moto runs in: moto refuses an
    unsigned PUT, and an unsigned GET of an object a signed PUT made. Its
    stdout."""
    e = s3_env(server)
    py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "servers", "python",
                      "venv", "bin", "python")
    code = ("import base64, json, sys, boto3\n"
            "c = boto3.client('s3', endpoint_url=sys.argv.pop(1), "
            "aws_access_key_id=sys.argv.pop(1), aws_secret_access_key=sys.argv.pop(1), "
            "region_name='us-east-1')\n" + body)
    r = subprocess.run([py, "-c", code, e["S3_ENDPOINT"], e["S3_ACCESS_KEY_ID"],
                        e["S3_SECRET_ACCESS_KEY"], *args], input=stdin, check=True, timeout=60,
                       capture_output=True)
    return r.stdout


def s3_objects_signed(prefix, server="s3"):
    """{key: bytes} of every object under `prefix` in bucket kayak, read with
    signed requests (s3_boto3)."""
    import base64
    out = s3_boto3(server,
                   "out = {}\n"
                   "for page in c.get_paginator('list_objects_v2').paginate(Bucket='kayak', "
                   "Prefix=sys.argv[1]):\n"
                   "    for o in page.get('Contents', []):\n"
                   "        body = c.get_object(Bucket='kayak', Key=o['Key'])['Body'].read()\n"
                   "        out[o['Key']] = base64.b64encode(body).decode()\n"
                   "print(json.dumps(out))\n", prefix)
    return {k: base64.b64decode(v) for k, v in json.loads(out).items()}


def s3_put(key, body, server="s3"):
    """Puts an object into bucket kayak, signed (s3_boto3)."""
    s3_boto3(server, "c.put_object(Bucket='kayak', Key=sys.argv[1], "
             "Body=sys.stdin.buffer.read(), ACL='public-read')\n", key, stdin=body)


def s3_uploads(prefix, server="s3"):
    """The multipart uploads still open under `prefix` (ListMultipartUploads),
    as a list of keys."""
    import re
    from urllib.parse import quote
    base = s3_env(server)["S3_ENDPOINT"] + "/kayak"
    with urllib.request.urlopen(f"{base}?uploads&prefix={quote(prefix)}", timeout=30) as r:
        body = r.read().decode()
    return re.findall(r"<Upload>.*?<Key>([^<]*)</Key>", body, re.S)
