"""The file connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json

from test_conformance import Connector


class FileConnector(Connector):
    name = "file"
    has_output = True

    def __init__(self, t):
        super().__init__(t)
        self.src = t.path("src.ndjson")
        open(self.src, "w").close()

    def input_yaml(self):
        return f"{{file: {{path: {self.src}, follow: true, poll_ms: 20, batch_size: 7}}}}"

    def write(self, s, msgs):
        with open(self.src, "a") as f:
            for m in msgs:
                f.write(json.dumps(m) + "\n")

    def write_bad(self, s):
        with open(self.src, "a") as f:
            f.write("not json\n")

    def bad_input_option(self):
        return f"{{file: {{path: {self.src}, batch_size: 0}}}}", "0"

    def output_yaml(self):
        return f"{{file: {{path: {self.t.path('sink')}}}}}"

    def tuning(self, side):
        if side == "input":
            return {"batch_size": 5, "poll_ms": 30}
        return {"max_part_bytes": 1 << 20, "max_part_secs": 600}

    def identity_change(self):
        other = self.src + ".2"
        open(other, "a").close()
        return {"path": other}

    def read_sink(self):
        return [json.loads(l) for l in self.t.read_output("sink")]

    def bad_output_option(self):
        return f"{{file: {{path: {self.t.path('sink')}, max_part_bytes: -1}}}}", "-1"


INPUTS = [FileConnector]
OUTPUTS = [FileConnector]
