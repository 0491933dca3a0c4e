"""The Kafka brokers of the tests: the suite's real broker (one Apache Kafka in
KRaft mode, started once per run by the CTest fixture `kafka`), a private
cluster a test can take down and bring up (tests/servers/kafka_cluster.py),
and the client side of both through build/tests/kafkatool's client commands.

The suite's broker is shared by every test that runs at the same time: a
`Broker` names its topics under a prefix of its own (`b.t("in")`), and its
tests give their groups and transactional ids unique names."""
import glob
import json
import os
import signal
import subprocess
import sys
import uuid

import servers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "servers"))
from kafka_cluster import Cluster  # noqa: E402

TOOL = os.environ.get("KAYAK_KAFKATOOL", "")


def tool(*args, timeout=120, check=True):
    assert TOOL, "KAYAK_KAFKATOOL must name build/tests/kafkatool (ctest sets it)"
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=timeout,
                          check=check)


class Broker:
    """Topics on a real broker, named under this object's prefix. With
    `cluster`, on that private cluster (which `down` and `up` stop and start);
    else on the suite's broker."""

    def __init__(self, topics=("in:4",), cluster=None, prefix=None):
        self.cluster = cluster
        self.bootstrap = (cluster.bootstrap if cluster is not None
                          else servers.env("kafka")["KAFKA_BROKERS"])
        self.prefix = prefix or f"t{uuid.uuid4().hex[:10]}"
        if topics:
            self.create(*topics)

    def t(self, name):
        """The topic called `name` in this test."""
        return f"{self.prefix}.{name}"

    def create(self, *specs):
        """Creates topics given as NAME[:PARTITIONS[:REPLICAS]]."""
        tool("create", self.bootstrap, *(self.t(s) for s in specs))

    def produce(self, topic, n, start=0, keys=None):
        """Messages start..start+n-1: {"seq", "k": "k<seq % 7>", "v"}, keyed by k
        (with `keys`, k<seq % keys> and an event time "ts" besides)."""
        extra = [str(keys)] if keys else []
        tool("produce", self.bootstrap, self.t(topic), str(n), str(start), *extra)

    def committed(self, topic, group):
        out = tool("committed", self.bootstrap, self.t(topic), group, timeout=60).stdout
        return {int(p): int(o) for p, o in (l.split() for l in out.splitlines())}

    def open_transactions(self, topic):
        """The partitions of `topic` where a transaction is open (its last
        stable offset short of the high watermark)."""
        out = tool("ends", self.bootstrap, self.t(topic), timeout=60).stdout
        return [int(p) for p, stable, hw in (l.split() for l in out.splitlines()) if stable != hw]

    def read(self, topic, n=-1, seconds=60, isolation="read_committed"):
        """What `topic` holds, from the beginning: with n = -1 everything up to
        the end of every partition (for read_committed, its last stable
        offset), else until n messages were read. Parsed as JSON."""
        r = tool("consume", self.bootstrap, self.t(topic), str(n), str(seconds), isolation,
                 timeout=seconds + 30, check=False)
        if r.returncode != 0:
            raise AssertionError(f"reading {self.t(topic)}: {r.returncode} after "
                                 f"{len(r.stdout.splitlines())} messages: {r.stderr[-500:]}")
        return [json.loads(l) for l in r.stdout.splitlines() if l]

    def member(self, topic, group, seconds):
        """A second member of `group` on `topic` for `seconds` (a process;
        its stdout says each assignment it got)."""
        assert TOOL, "KAYAK_KAFKATOOL must name build/tests/kafkatool (ctest sets it)"
        return subprocess.Popen([TOOL, "member", self.bootstrap, self.t(topic), group,
                                 str(seconds)], stdout=subprocess.PIPE, text=True)

    def hold(self, topic, transactional_id):
        """A transaction of `transactional_id` holding partition 0 of `topic`
        open (a process, once its record is in): closing its stdin aborts it."""
        assert TOOL, "KAYAK_KAFKATOOL must name build/tests/kafkatool (ctest sets it)"
        p = subprocess.Popen([TOOL, "hold", self.bootstrap, self.t(topic), transactional_id],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        if line.strip() != "open":
            p.kill()
            raise AssertionError(f"kafkatool hold: {line!r}, exit {p.wait()}")
        return p

    def down(self, i=0):
        """Kills broker i of the private cluster (SIGKILL)."""
        self.cluster.stop_broker(i, signal.SIGKILL)

    def up(self, i=0):
        self.cluster.start_broker(i)

    def close(self):
        pass


def own_cluster(workdir, brokers=1):
    """A private cluster under `workdir`, started; close() kills it."""
    return Cluster(os.path.join(workdir, "kafka"), brokers).start()


# What the kafka tests and the crash suite check against.
KEYS = 7


def value(i):
    return (i * 31) % 97


def oracle(n):
    """What a batch computation gives for the messages `kafkatool produce` wrote
    through a 5-message count window and a running sum per key (in production
    order: a key stays on one partition). Returns ({seq: (count, sum, total)},
    {key: final sum})."""
    windows, sums, want = {}, {}, {}
    for i in range(n):
        k = f"k{i % KEYS}"
        w = windows.setdefault(k, [])
        w.append(value(i))
        del w[:-5]
        sums[k] = sums.get(k, 0) + value(i)
        want[i] = (len(w), float(sum(w)), sums[k])
    return want, sums


def checkpointed_offsets(state, pipeline):
    """The input offsets of the newest committed manifest, read from the state dir
    (docs/state_format.md: a 32-byte frame header, then JSON)."""
    manifests = sorted(glob.glob(os.path.join(state, "MANIFEST-*.kym")),
                       key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    if not manifests:
        return None
    with open(manifests[-1], "rb") as f:
        m = json.loads(f.read()[32:])
    unit = m["units"].get(f"p.{pipeline}.input")
    if unit is None:
        return None
    with open(os.path.join(state, unit["chunk"]), "rb") as f:
        return {p: o for _, p, o in json.loads(f.read()[32:])["offsets"]}
