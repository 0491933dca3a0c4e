"""The conformance kit's config case (docs/connectors.md), against every
connector (test_conformance.py describes the connectors):

  config_change_after_crash
      kill -9, then every tuning option and address changed at once (the
      second credential, another way to the same server, other sizes and
      timeouts): inputs' state exact (rewindable, replayable) or equal to the
      output, outputs' messages all in the sink, nothing started empty; then
      one identity option changed: the input starts empty, as documented.

  schema_change
      (database connectors) a column added and one dropped while running: an
      input reading every column (SELECT *) gives every row, as valid JSON of
      the columns it has when read, its bucket exact; an output has every
      message in its table.

Which options are tuning is read from docs/components.md (generated from the
property tables): a connector that leaves one unchanged without a reason in
`tuning_exempt` fails the case, so a new option cannot slip past it.
"""
import json
import os
import re
import unittest

import yaml

import test_conformance as kit
from test_conformance import HERE, INPUTS, OUTPUTS, SERVER, report
from harness import committed, wait_for  # noqa: E402 (tests/e2e, on the path test_conformance set)

STARTS_EMPTY = re.compile(r"\(p\.p\.input\): its config changed since checkpoint \d+; "
                          r"it starts empty")
# Options every output has, changed by the kit itself.
GENERIC = {"retry": {"base_ms": 50, "max_ms": 2000, "max_attempts": 6}}


def roles(side, type_):
    """{option: role} of a component, from docs/components.md."""
    section = {"input": "Inputs", "output": "Outputs"}[side]
    kind, name, out = None, None, {}
    with open(os.path.join(HERE, "..", "..", "docs", "components.md")) as f:
        for line in f:
            if line.startswith("## "):
                kind = line[3:].strip()
            m = re.match(r"### `(\w+)`", line)
            if m:
                name = m.group(1)
            m = re.match(r"\| `(\w+)` \|[^|]*\|[^|]*\|[^|]*\| (\w+) \|", line)
            if m and kind == section and name == type_:
                out[m.group(1)] = m.group(2)
    return out


def parse(component_yaml):
    """(type, options) of a component's yaml."""
    (type_, opts), = yaml.safe_load(component_yaml).items()
    return type_, dict(opts or {})


class ConfigKitTest(kit.KitCase):
    def changed_yaml(self, c, side, base_yaml):
        """The yaml with every tuning option and address changed; fails naming
        those the connector leaves unchanged without a reason."""
        type_, base = parse(base_yaml)
        if c.credentials:
            c.use_credential(1)
        _, now = parse(c.input_yaml() if side == "input" else c.output_yaml())
        now.update(c.tuning(side))
        table = roles(side, type_)
        self.assertTrue(table, f"{type_} {side}: not in docs/components.md")
        for option, value in GENERIC.items():
            if option in table:
                now[option] = value
        changed = {o for o in set(base) | set(now) if base.get(o) != now.get(o)}
        exempt = c.tuning_exempt.get(side, {})
        missing = sorted(o for o, r in table.items()
                         if r in ("tuning", "address") and o not in changed and o not in exempt)
        self.assertEqual(missing, [], f"{c.name} {side}: tuning options the kit does not change "
                                      "(give a value in tuning() or a reason in tuning_exempt)")
        wrong = sorted(o for o in changed if table.get(o) not in ("tuning", "address"))
        self.assertEqual(wrong, [], f"{c.name} {side}: changed options that are not tuning")
        return json.dumps({type_: now}), len(changed)

    def test_config_change_after_crash(self):
        for cls in INPUTS:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-config")
                c = self.connector(cls)
                if c.credentials:
                    c.use_credential(0)
                state = self.path("state")
                shape = c.transforms()
                changed = {}

                def change():
                    changed["yaml"], changed["n"] = self.changed_yaml(c, "input", c.input_yaml())
                    return self.graph(changed["yaml"], with_bucket=True, shape=shape)
                s, want = self.kill_and_change(
                    c, self.graph(c.input_yaml(), with_bucket=True, shape=shape), change)
                tuned, n = changed["yaml"], changed["n"]
                what = f"kill -9, {n} tuning options changed: {len(want)} messages, state kept"
                identity = c.identity_change() if c.delivery != "none" else None
                if identity is not None:
                    c0 = committed(s)
                    wait_for(lambda: committed(s) >= c0 + 1, timeout=30, what="a checkpoint")
                    s.kill()
                    type_, opts = parse(tuned)
                    opts.update(identity)
                    s = self.start(self.graph(json.dumps({type_: opts}), with_bucket=True,
                                              shape=shape), server_config=SERVER, state_dir=state)
                    wait_for(lambda: STARTS_EMPTY.search(s.stderr()), timeout=30,
                             what=f"{cls.name}: the input starting empty")
                    what += f"; {', '.join(identity)} changed: the input started empty"
                s.stop()
                report(cls.name, "config_change_after_crash", what)
        for cls in OUTPUTS:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-config-out")
                c = self.connector(cls)
                if c.credentials:
                    c.use_credential(0)
                d = kit.DummyConnector(self, count=self.N)
                slow = d.input_yaml().replace("rate_per_sec: 400", "rate_per_sec: 100")
                state = self.path("state")
                base = c.output_yaml()
                s = self.start(self.graph(slow, base), server_config=SERVER, state_dir=state)
                wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= self.N // 4,
                         timeout=60, what=f"{cls.name}: a quarter out")
                c0 = committed(s)
                wait_for(lambda: committed(s) >= c0 + 1, timeout=30, what="a checkpoint")
                s.kill()
                tuned, n = self.changed_yaml(c, "output", base)
                s = self.start(self.graph(slow, tuned), server_config=SERVER, state_dir=state)
                self.finish_fed_output(s, c, d, "after the change")
                self.assertNotIn("starts empty", s.stderr())
                report(cls.name, "config_change_after_crash (output)",
                       f"kill -9, {n} tuning options changed: all {self.N} messages in the sink")


    def test_schema_change(self):
        for cls in [c for c in INPUTS if c.schema]:
            with self.subTest(connector=cls.name):
                self.dir_for(cls.name + "-schema")
                c = self.connector(cls)
                c.alter("src", "prepare")
                cfg = self.graph(c.schema_input_yaml(), with_bucket=True, shape=c.transforms())
                s = self.start(cfg, server_config=SERVER, state_dir=self.path("state"))
                want = self.expected(c)
                rows = lambda: [json.loads(l) for l in self.read_output("out")]  # noqa: E731
                third = len(want) // 3
                for step, part in [(None, want[:third]), ("add", want[third:2 * third]),
                                   ("drop", want[2 * third:])]:
                    if step:
                        c.alter("src", step)
                    c.write(s, part)
                    wait_for(lambda: {m["seq"] for m in part} <= {r["seq"] for r in rows()},
                             timeout=60, what=f"{cls.name}: the rows after {step or 'start'}")
                self.assert_bucket_exact(s, want, cls.name)
                last = rows()[-1]
                self.assertIn("added", last, f"the last row: {last}")
                self.assertNotIn("extra", last)
                self.assertIsNone(s.proc.poll(), "the server stopped")
                self.assertEqual(s.card("p", "input")["errors"], 0)
                s.stop()
                report(cls.name, "schema_change", f"a column added and one dropped: {len(want)} "
                                                  "rows of their columns, bucket exact")
        for cls in [c for c in OUTPUTS if c.schema]:
            with self.subTest(connector=cls.name + " output"):
                self.dir_for(cls.name + "-schema-out")
                c = self.connector(cls)
                c.alter("dst", "prepare")
                s, d = self.start_fed_output(c)
                for step, share in [("add", 4), ("drop", 2)]:
                    wait_for(lambda: s.card("p", "outputs[0]")["messages_out"] >= self.N // share,
                             timeout=60, what=f"{cls.name}: messages out before {step}")
                    c.alter("dst", step)
                self.finish_fed_output(s, c, d, "after the table changed")
                report(cls.name, "schema_change (output)",
                       f"a column added and one dropped: all {self.N} messages in the table")


if __name__ == "__main__":
    unittest.main()
