"""The latency probe of bench/peers/latency.py: feeds an engine's input topic at
a fixed rate and reads its output topic as a read_committed consumer, and
says how long each message took from the producer's call to the reader.

    python probe.py BOOTSTRAP IN OUT RATE KEYS SETTLE_S MEASURE_S DRAIN_S

Runs in a peer's venv (it needs confluent-kafka). Produces the windowed
workload's messages ({"seq", "k", "v", "ts"}, keyed by `k`, `ts` the wall
clock in ms) at RATE a second, in steps of 10 ms. Until the first output and
SETTLE_S seconds after it the engine warms up (a JVM's compiler, a group
join, a first checkpoint): those messages are not measured. The next
MEASURE_S seconds are; then it stops producing and waits up to DRAIN_S for
the last of them. Prints one JSON object: the measured messages, how many
never came, and the latency's percentiles in ms.
"""
import json
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer


def main():
    bootstrap, src, dst = sys.argv[1:4]
    rate, keys = int(sys.argv[4]), int(sys.argv[5])
    settle_s, measure_s, drain_s = (float(x) for x in sys.argv[6:9])
    sent = []  # seq -> time.monotonic() of the produce call
    seen = {}  # seq -> when the reader first had it
    first = threading.Event()
    stop = threading.Event()

    def read():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe-" + uuid.uuid4().hex[:8],
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "enable.auto.commit": False})
        c.subscribe([dst])
        try:
            while not stop.is_set():
                # consume() waits for its whole batch or the timeout: one
                # message with a wait, then what has come without one.
                m = c.poll(0.05)
                if m is None:
                    continue
                for m in [m] + c.consume(num_messages=1000, timeout=0):
                    now = time.monotonic()
                    if m.error():
                        continue
                    seq = json.loads(m.value())["seq"]
                    seen.setdefault(seq, now)
                    first.set()
        finally:
            c.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    t0 = time.monotonic()
    measure_from = measure_to = None  # seqs [from, to) are measured
    give_up = t0 + 180  # no output after 3 minutes: the engine did not start
    while True:
        now = time.monotonic()
        if measure_from is None and first.is_set():
            settled_at = now + settle_s
            measure_from = -1
        if measure_from == -1 and now >= settled_at:
            measure_from, measure_end = len(sent), now + measure_s
        if measure_from is not None and measure_from >= 0 and now >= measure_end:
            measure_to = len(sent)
            break
        if measure_from is None and now > give_up:
            stop.set()
            print(json.dumps({"error": "no output in 180 s"}))
            return 1
        due = int((now - t0) * rate) - len(sent)
        for _ in range(max(0, due)):
            i = len(sent)
            k = f"k{i % keys}"
            value = json.dumps({"seq": i, "k": k, "v": (i * 31) % 97,
                                "ts": int(time.time() * 1000)}, separators=(",", ":"))
            while True:
                try:
                    p.produce(src, value, key=k)
                    break
                except BufferError:
                    p.poll(0.01)
            sent.append(time.monotonic())
        p.poll(0)
        time.sleep(0.01)
    p.flush(30)
    deadline = time.monotonic() + drain_s
    want = range(measure_from, measure_to)
    while time.monotonic() < deadline and any(i not in seen for i in (want[-1], want[0])):
        time.sleep(0.1)
    # The stragglers: a last look for every measured one.
    while time.monotonic() < deadline and sum(i not in seen for i in want) > 0:
        time.sleep(0.2)
    stop.set()
    reader.join(timeout=10)
    lat = sorted((seen[i] - sent[i]) * 1000 for i in want if i in seen)
    missing = sum(i not in seen for i in want)

    def pct(q):
        return round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None
    print(json.dumps({"measured": len(want), "missing": missing, "p50_ms": pct(0.5),
                      "p99_ms": pct(0.99), "max_ms": round(lat[-1], 1) if lat else None,
                      "warmup_msgs": measure_from}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
