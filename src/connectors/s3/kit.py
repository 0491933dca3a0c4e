"""The s3 connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import gzip
import json
import os

from test_conformance import CANARY, Connector, servers


class S3Connector(Connector):
    """The s3 output against moto's S3 server: small parts and objects, closed
    after a second, read back through its list and GET."""
    name = "s3"
    has_input = False
    has_output = True
    has_server = True
    made = 0

    def __init__(self, t):
        super().__init__(t)
        S3Connector.made += 1
        self.prefix = f"kit{os.getpid()}s{S3Connector.made}"

    credentials = True
    secret = None  # the server's own secret key
    token = ""

    def use_credential(self, which):
        # moto takes any key pair: the rotation is of the secret key and the
        # session token (an STS token expires), as after an outage.
        if which == CANARY:
            self.secret, self.token = CANARY, CANARY
        else:
            self.secret, self.token = f"kit-secret-{which}", f"kit-session-{which}"

    outage = "output"
    proxy = None  # for_outage: the store behind a proxy the case cuts

    @classmethod
    def for_outage(cls, t):
        c = cls(t)
        c.proxy = servers.Proxy("127.0.0.1", servers.port_of(servers.s3_env()["S3_ENDPOINT"]))
        return c

    def close(self):
        if self.proxy is not None:
            self.proxy.close()

    def yaml(self, part_bytes=500):
        e = servers.s3_env()
        endpoint = (f"http://127.0.0.1:{self.proxy.port}" if self.proxy is not None
                    else e["S3_ENDPOINT"])
        token = f", session_token: {self.token}" if self.token else ""
        return (f"{{s3: {{endpoint: '{endpoint}', bucket: {e['S3_BUCKET']}, "
                f"path_style: true, access_key_id: {e['S3_ACCESS_KEY_ID']}, secret_access_key: "
                f"{self.secret or e['S3_SECRET_ACCESS_KEY']}{token}, key: '{self.prefix}/{{{{seq}}}}', "
                f"part_bytes: {part_bytes}, max_object_bytes: 2000, max_object_secs: 1, "
                f"compression: {self.compression}}}}}")

    compression = "none"

    def output_yaml(self):
        return self.yaml()

    def body(self, raw):
        return raw

    def read_sink(self):
        objs = servers.s3_objects(self.prefix + "/")
        return [json.loads(l) for k in sorted(objs)
                for l in self.body(objs[k]).decode().splitlines() if l]

    def bad_output_option(self):
        return self.yaml(part_bytes=0), "part_bytes: 0"

    no_tls = ("the suite's moto over https is another server, without the kit's objects "
              "(test_s3.py, S3TlsTest)")
    tuning_exempt = {"output": {
        "region": "moto keeps the bucket in us-east-1: another region is another store",
        "path_style": "the test store answers path-style requests only",
        "tls": "the suite's moto over https is another server, without the kit's objects "
               "(test_s3.py, S3TlsTest)"}}

    def tuning(self, side):
        e = servers.s3_env()
        # moto takes any key pair, in one account
        return {"endpoint": e["S3_ENDPOINT"].replace("127.0.0.1", "localhost"),
                "access_key_id": "kitkey2", "max_object_secs": 2}

    sessions = "output"  # multipart uploads

    def open_sessions(self):
        return [f"upload of {k} open" for k in servers.s3_uploads(self.prefix + "/")]


class S3GzipConnector(S3Connector):
    """The s3 output with `compression: gzip`: every part one gzip member."""
    name = "s3_gzip"
    compression = "gzip"

    def body(self, raw):
        return gzip.decompress(raw)


INPUTS = []
OUTPUTS = [S3Connector, S3GzipConnector]
