"""The conformance kit's tls case (docs/connectors.md), against every
connector (test_conformance.py describes the connectors):

  tls
      the connector's way to the same data over TLS (Connector.tls: an
      address and a `tls` block with the suite's CA): first with another CA,
      which must be refused with the reason on the card, nothing delivered and
      a clean stop; then with the right one, every message delivered in order
      (an input from its source, an output fed by a `dummy` into its sink).

A connector whose options (docs/components.md) include `tls` must give that
way or say in `no_tls` why it has none, so a new connector cannot slip past.
"""
import json
import os
import unittest

import yaml

from test_conformance import INPUTS, OUTPUTS, SERVER, DummyConnector, KitCase, report
from harness import wait_for  # noqa: E402 (tests/e2e, on the path test_conformance set)
from test_kit_config import roles


def with_options(component_yaml, options):
    """The component's yaml with `options` set (as JSON, which is YAML)."""
    (type_, opts), = yaml.safe_load(component_yaml).items()
    opts = dict(opts or {})
    opts.update(options)
    return type_, json.dumps({type_: opts})


def other_ca(options):
    """`options` with the tls block's CA swapped for one that signed nothing
    the server holds (tls_ca.py's other-ca.crt beside the CA)."""
    tls = dict(options["tls"])
    tls["ca_file"] = os.path.join(os.path.dirname(tls["ca_file"]), "other-ca.crt")
    return dict(options, tls=tls)


class TlsKitTest(KitCase):
    def way(self, c, side, component_yaml):
        """The connector's TLS options, or None once it is shown why it has none."""
        options = c.tls(side)
        (type_, _), = yaml.safe_load(component_yaml).items()
        if options is None:
            if "tls" in roles(side, type_):
                self.assertTrue(c.no_tls, f"{c.name} {side}: a `tls` option, but neither "
                                          "tls() nor a reason in no_tls")
                report(c.name, "tls" + (" (output)" if side == "output" else ""),
                       f"not here: {c.no_tls}")
            return None
        self.assertIn("ca_file", options.get("tls", {}), f"{c.name}: tls() gives no tls.ca_file")
        return options

    def refused(self, s, card, what):
        """A card with the refusal on it, then a clean stop."""
        try:
            wait_for(lambda: s.card("p", card)["last_error"], timeout=60,
                     what=f"{what}: the refusal on the card")
        except AssertionError:
            raise AssertionError(f"{what}: the card says {s.card('p', card)}") from None
        why = s.card("p", card)["last_error"]
        self.assertEqual(s.stop(), 0, s.stderr()[-2000:])
        return why

    def test_tls_inputs(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-tls")
                c = self.connector(cls)
                options = self.way(c, "input", c.input_yaml())
                if options is None:
                    continue
                _, wrong = with_options(c.input_yaml(), other_ca(options))
                s = self.start(self.graph(wrong, shape=c.transforms()), server_config=SERVER)
                why = self.refused(s, "input", f"{cls.name} with another CA")
                self.assertEqual(self.read_output("out"), [])
                _, right = with_options(c.input_yaml(), options)
                s = self.start(self.graph(right, shape=c.transforms()), server_config=SERVER)
                want = self.expected(c)
                for i in range(0, len(want), 50):
                    c.write(s, want[i:i + 50])
                wait_for(lambda: len(self.read_output("out")) >= len(want), timeout=60,
                         what=f"{cls.name} over TLS: {len(want)} messages")
                self.check_order([json.loads(l) for l in self.read_output("out")], want)
                self.assertEqual(s.stop(), 0)
                report(cls.name, "tls", f"another CA refused ({why[:80]}); {len(want)} messages "
                                        "over TLS")

    def test_tls_outputs(self):
        for cls in OUTPUTS:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-tls-out")
                c = self.connector(cls)
                options = self.way(c, "output", c.output_yaml())
                if options is None:
                    continue
                d = DummyConnector(self, count=self.N)
                _, wrong = with_options(c.output_yaml(), other_ca(options))
                s = self.start(self.graph(d.input_yaml(), wrong), server_config=SERVER)
                why = self.refused(s, "outputs[0]", f"{cls.name} output with another CA")
                self.assertEqual(c.read_sink(), [])
                _, right = with_options(c.output_yaml(), options)
                s = self.start(self.graph(d.input_yaml(), right), server_config=SERVER)
                want = self.expected(d)
                wait_for(lambda: len(c.read_sink()) >= len(want), timeout=60,
                         what=f"{cls.name} output over TLS: {len(want)} messages")
                self.check_order(c.read_sink(), want)
                self.assertEqual(s.stop(), 0)
                report(cls.name, "tls (output)", f"another CA refused ({why[:80]}); "
                                                 f"{len(want)} messages over TLS")


if __name__ == "__main__":
    unittest.main()
