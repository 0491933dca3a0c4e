"""The peers' workloads as Quix Streams' documentation writes them: a
StreamingDataFrame over a JSON topic, and for the windowed one a stateful
function (its RocksDB state, with a changelog topic) keyed by the message key.

    python job.py stateless BOOTSTRAP IN OUT GROUP GUARANTEE COMMIT_MS STATE_DIR
    python job.py windowed  BOOTSTRAP IN OUT GROUP GUARANTEE COMMIT_MS STATE_DIR WINDOW_MS

GUARANTEE is at-least-once or exactly-once; COMMIT_MS is Quix Streams'
commit interval, its checkpoint. Stateless keeps `v >= 0` and adds
`w = v * 2`. Windowed keeps per key the points of the last WINDOW_MS of
event time (`ts`, epoch ms) and a running total of `v`, and adds `v_count`,
`v_sum` and `total` to each message, as bench/peers/kstreams' Windowed does:
the window ends at the newest time the key saw; an older point than its
start is late, emitted with the window's aggregates and not added.
"""
import sys

from quixstreams import Application


def main():
    job, bootstrap, src, dst, group, guarantee, commit_ms, state_dir = sys.argv[1:9]
    app = Application(broker_address=bootstrap, consumer_group=group,
                      auto_offset_reset="earliest", processing_guarantee=guarantee,
                      commit_interval=int(commit_ms) / 1000, state_dir=state_dir)
    sdf = app.dataframe(app.topic(src, value_deserializer="json"))
    out = app.topic(dst, value_serializer="json")
    if job == "stateless":
        sdf = sdf[sdf["v"] >= 0]
        sdf["w"] = sdf["v"] * 2
    else:
        window_ms = int(sys.argv[9])

        def enrich(value, state):
            v, ts = value["v"], value["ts"]
            total = state.get("total", 0) + v
            newest = state.get("newest")
            end = ts if newest is None else max(newest, ts)
            start = end - window_ms  # points at or before it leave
            points = [p for p in state.get("points", []) if p[0] > start]
            if ts > start:
                points.append([ts, v])
            state.set("total", total)
            state.set("newest", end)
            state.set("points", points)
            value["v_count"] = len(points)
            value["v_sum"] = sum(p[1] for p in points)
            value["total"] = total
            return value

        sdf = sdf.apply(enrich, stateful=True)
    sdf.to_topic(out)
    app.run()


if __name__ == "__main__":
    main()
