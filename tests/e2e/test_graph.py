"""Graphs of pipelines: merges, chains, fan-out to several outputs, shared buckets."""
import json

from harness import KayakTest, wait_for


class GraphTest(KayakTest):
    def test_downstream_merges_two_upstreams(self):
        a = self.write_ndjson("a.ndjson", [{"src": "a", "i": i, "v": i} for i in range(300)])
        b = self.write_ndjson("b.ndjson", [{"src": "b", "i": i, "v": 2 * i} for i in range(200)])
        s = self.start(f"""
buckets:
  per_source: {{}}
pipelines:
  from_a:
    input: {{file: {{path: {a}, batch_size: 50}}}}
    outputs: [{{file: {{path: out_a}}}}]
  from_b:
    input: {{file: {{path: {b}, batch_size: 50}}}}
  merged:
    input: {{pipeline: [from_a, from_b]}}
    transforms:
      - bucket: {{name: per_source, key: src, op: add, field: v}}
      - bucket: {{name: per_source, key: src, op: lookup, as: running}}
    outputs: [{{file: {{path: merged}}}}, {{stdout: {{}}}}]
""")
        wait_for(lambda: len(self.read_output("merged")) == 500, what="merged output")
        rows = [json.loads(l) for l in self.read_output("merged")]
        self.assertEqual(sorted((r["src"], r["i"]) for r in rows),
                         sorted([("a", i) for i in range(300)] + [("b", i) for i in range(200)]))
        # per upstream, order is kept, and the running sum only grows
        for src in ("a", "b"):
            mine = [r for r in rows if r["src"] == src]
            self.assertEqual([r["i"] for r in mine], sorted(r["i"] for r in mine))
            self.assertEqual([r["running"] for r in mine],
                             sorted(r["running"] for r in mine))
        self.assertEqual(s.get_json("/api/v1/buckets/per_source?key=a")["value"], sum(range(300)))
        self.assertEqual(s.get_json("/api/v1/buckets/per_source?key=b")["value"], 2 * sum(range(200)))
        # the upstream's own output got every batch too
        self.assertEqual(len(self.read_output("out_a")), 300)
        merged = s.card("merged", "input")
        self.assertEqual(merged["messages_in"], 500)
        self.assertEqual(s.stop(), 0)

    def test_chain_of_three_with_rolling_window(self):
        rows = [{"sensor": "t1", "ts": 1000 + i, "value": i} for i in range(20)]
        src = self.write_ndjson("in.ndjson", rows)
        s = self.start(f"""
pipelines:
  raw:
    input: {{file: {{path: {src}}}}}
  windowed:
    input: {{pipeline: raw}}
    transforms:
      - rolling_window: {{key: sensor, field: value, window_secs: 5, time_field: ts}}
  hot:
    input: {{pipeline: windowed}}
    transforms:
      - filter: 'value_avg > 10'
    outputs: [{{file: {{path: hot}}}}]
""")
        # window of 5 s over one reading a second: avg of the last 5 values
        expected = [r for r in rows if sum(range(max(0, r["value"] - 4), r["value"] + 1)) /
                    min(5, r["value"] + 1) > 10]
        wait_for(lambda: len(self.read_output("hot")) == len(expected), what="hot readings")
        got = [json.loads(l) for l in self.read_output("hot")]
        self.assertEqual([g["value"] for g in got], [e["value"] for e in expected])
        self.assertEqual(got[-1]["value_count"], 5)
        self.assertEqual(got[-1]["value_sum"], 15 + 16 + 17 + 18 + 19)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    import unittest
    unittest.main()
