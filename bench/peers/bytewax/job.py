"""The peers' workloads as Bytewax's documentation writes them: a Dataflow
from its Kafka input operator to its Kafka output operator, and for the
windowed one a `stateful_map` over the stream keyed by the message key (its
state snapshotted to the recovery store at each epoch).

    python -m bytewax.run "job:flow()" -w WORKERS [-r RECOVERY -s SNAPSHOT_SECS]

with the job's arguments in the environment: JOB (stateless | windowed |
files), BOOTSTRAP, IN, OUT, WINDOW_MS. Stateless keeps `v >= 0` and adds
`w = v * 2`; windowed does what bench/peers/kstreams' Windowed does (see
bench/peers/quix/job.py). Bytewax's Kafka output is at least once. Files is
the stateless job from the file IN to the file OUT, through its files
connectors (the sink takes keyed items: one key, one writer).
"""
import json
import os

from pathlib import Path

import bytewax.operators as op
from bytewax.connectors.files import FileSink, FileSource
from bytewax.connectors.kafka import KafkaSinkMessage
from bytewax.connectors.kafka import operators as kop
from bytewax.dataflow import Dataflow
from confluent_kafka import OFFSET_BEGINNING


def flow():
    job, window_ms = os.environ["JOB"], int(os.environ.get("WINDOW_MS", "10000"))
    f = Dataflow(job)
    if job == "files":
        def keep_line(line):
            value = json.loads(line)
            if value["v"] < 0:
                return None
            value["w"] = value["v"] * 2
            return json.dumps(value)

        lines = op.input("in", f, FileSource(Path(os.environ["IN"])))
        kept = op.filter_map("filter_map", lines, keep_line)
        op.output("out", op.key_on("one_writer", kept, lambda _: "out"),
                  FileSink(Path(os.environ["OUT"])))
        return f
    src = kop.input("in", f, brokers=[os.environ["BOOTSTRAP"]], topics=[os.environ["IN"]],
                    starting_offset=OFFSET_BEGINNING)
    if job == "stateless":
        def keep(msg):
            value = json.loads(msg.value)
            if value["v"] < 0:
                return None
            value["w"] = value["v"] * 2
            return KafkaSinkMessage(msg.key, json.dumps(value))

        out = op.filter_map("filter_map", src.oks, keep)
    else:
        keyed = op.map("parse", src.oks,
                       lambda msg: (msg.key.decode(), json.loads(msg.value)))

        def enrich(state, value):
            total, newest, points = state if state is not None else (0, None, [])
            v, ts = value["v"], value["ts"]
            total += v
            end = ts if newest is None else max(newest, ts)
            start = end - window_ms  # points at or before it leave
            points = [p for p in points if p[0] > start]
            if ts > start:
                points.append((ts, v))
            value["v_count"] = len(points)
            value["v_sum"] = sum(p[1] for p in points)
            value["total"] = total
            return (total, end, points), value

        enriched = op.stateful_map("window", keyed, enrich)
        out = op.map("serialize", enriched,
                     lambda kv: KafkaSinkMessage(kv[0].encode(), json.dumps(kv[1])))
    kop.output("out", out, brokers=[os.environ["BOOTSTRAP"]], topic=os.environ["OUT"])
    return f
