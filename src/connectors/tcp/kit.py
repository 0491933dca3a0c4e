"""The tcp connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import socket
import time

from test_conformance import Connector, free_port


class TcpConnector(Connector):
    name = "tcp"
    delivery = "none"

    def __init__(self, t):
        super().__init__(t)
        self.port = free_port()

    def input_yaml(self):
        return f"{{tcp: {{listen: '127.0.0.1:{self.port}', batch_size: 16}}}}"

    def send(self, data):
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as c:
                    c.sendall(data)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # the server is starting or restarting

    def write(self, s, msgs):
        self.send("".join(json.dumps(m) + "\n" for m in msgs).encode())

    def tuning(self, side):
        return {"batch_size": 12, "max_line_bytes": 65536, "max_connections": 64,
                "buffer_bytes": 4 << 20}

    def write_bad(self, s):
        self.send(b"not json\n")

    def bad_input_option(self):
        return f"{{tcp: {{listen: '127.0.0.1:{self.port}', max_connections: 0}}}}", "0"


INPUTS = [TcpConnector]
OUTPUTS = []
