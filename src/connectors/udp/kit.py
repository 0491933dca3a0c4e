"""The udp input in the conformance kit (tests/connectors/test_conformance.py
finds this file by its place: src/connectors/<name>/kit.py, its INPUTS and
OUTPUTS). Each message is a datagram of its own to the input's port; nothing
is kept for a socket that is not bound yet, so write() waits for the card to
say it listens."""
import json
import socket

import test_conformance as kit


class UdpConnector(kit.Subscribed, kit.Connector):
    name = "udp"
    delivery = "none"

    def __init__(self, t):
        super().__init__(t)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def input_yaml(self):
        return f"{{udp: {{listen: '127.0.0.1:{self.port}', batch_size: 16}}}}"

    def subscribed(self, s):
        return s.card("p", "input")["position"].startswith("listening")

    def send(self, datagrams):
        for d in datagrams:
            self.sock.sendto(d, ("127.0.0.1", self.port))

    def write(self, s, msgs):
        self.ensure_subscribed(s)
        self.send([json.dumps(m).encode() for m in msgs])

    def write_bad(self, s):
        self.ensure_subscribed(s)
        self.send([b"not json"])

    def bad_input_option(self):
        return f"{{udp: {{listen: '127.0.0.1:{self.port}', max_datagram_bytes: 8}}}}", "8"

    def tuning(self, side):
        return {"batch_size": 12, "max_datagram_bytes": 9000, "buffer_bytes": 1 << 20}

    def close(self):
        self.sock.close()


INPUTS = [UdpConnector]
OUTPUTS = []
