"""The crash suite: kill -9, disk faults and power loss against a batch oracle.

Runs the real kayak binary on a workload whose every output and piece of
state can be computed in batch from the input alone, in these parts (and
one per connector below):

  kills     SIGKILL at seeded random instants and at the commit's crash
            points, restart, repeat, then finish;
  disk      ENOSPC and EIO on write, fsync, rename and open of checkpoint
            files (faultshim, an LD_PRELOAD library): each checkpoint under a
            fault is abandoned, the server keeps running and says so, commits
            resume when the fault clears, and a kill while the disk is
            "full" restarts from the checkpoint before it;
  unsynced  one run recorded by faultshim, killed, then restarted from
            *strict* crash states computed from the record (only fsynced
            bytes and directory entries survive, crashstate.py), after
            checking the commit protocol in the record itself.
  cluster   three members of a cluster over a kafka topic, random members
            killed at random instants and restarted (docs/cluster.md).

Each part ends with a final run checked against the oracle: bucket and
window state equal to it (exactly once), every file output byte-identical to
the oracle's bytes, no sequence number missing, and on stdout repeats only
as the replayed prefix of a restarted run.

    python3 crash_suite.py [--kills N] [--seed S] [--messages M] [--crash-states C]

Ends with one line:
    crash summary: kill_points=N messages=M lost=0 double_counted=0 byte_mismatches=0 disk_faults=F
                   output_faults=O refused_starts=R config_changes=3
and exits non-zero if anything was lost, double counted or mismatched.
"""
import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from harness import Server, committed, region_stats, wait_for  # noqa: E402
import crashstate  # noqa: E402
from kafka_broker import Broker  # noqa: E402
from kafka_broker import checkpointed_offsets, oracle as kafka_oracle  # noqa: E402
from test_edges import state_files  # noqa: E402
import servers  # noqa: E402

KEYS = 23
WINDOW_SECS = 30
GEN = 400  # messages of the dummy input `gen`, counted into `counts` under key "gen"
CRASH_POINTS = ["after_chunks", "before_rename", "before_dir_fsync", "after_dir_fsync"]
SERVER = "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1, timeout_secs: 20}\n"
OUTPUTS = {"p.main.o0": "main", "p.merged.o0": "merged", "p.other.o0": "other"}
FAULTS = [("write", "ENOSPC", "No space left on device"),
          ("fsync", "EIO", "Input/output error"),
          ("rename", "ENOSPC", "No space left on device"),
          ("open", "EIO", "Input/output error")]
SHIM = os.environ.get("KAYAK_FAULTSHIM", "")


def value(i):
    return (i * 7919) % 101


def event_ts(i):
    # mostly increasing, every 10th a few seconds out of order, some late
    return 1_700_000_000 + i // 3 - (4 if i % 10 == 0 else 0) - (40 if i % 97 == 0 else 0)


def write_inputs(d, n):
    with open(os.path.join(d, "main.ndjson"), "w") as f:
        for i in range(n):
            f.write(json.dumps({"seq": i, "k": f"k{i % KEYS}", "v": value(i), "ts": event_ts(i)}) + "\n")
    with open(os.path.join(d, "side.ndjson"), "w") as f:
        for i in range(n // 2):
            f.write(json.dumps({"seq": n + i, "k": f"k{i % KEYS}", "v": 1}) + "\n")
    with open(os.path.join(d, "other.ndjson"), "w") as f:
        for i in range(n // 4):
            f.write(json.dumps({"seq": i, "g": f"g{i % 5}", "x": i % 13}) + "\n")


# Config variants a restart may take (part_kills): the same computation
# under a tuning change, an identity change of a stateless transform, and a
# change to an unrelated pipeline; the oracle holds for every one of them.
VARIANTS = ["base", "tuning", "identity", "unrelated"]


def config(d, slow, variant="base"):
    # Region 1: main -> windowed (event time) + buckets + buffer -> file and stdout;
    #           main and side merge into `merged`, which counts into a bucket
    #           that `gen` (a finite dummy input) writes too.
    # Region 2: other -> count window -> file (commits independently).
    # (main's batch size stays: its buffer releases at 25 held, so other
    # batch boundaries could leave a tail held at the end of the input.)
    side_batch, other_batch, part_bytes = (11, 13, 65536) if variant == "tuning" else \
        (30, 25, 67108864)
    lua_note = " -- v2" if variant == "identity" else ""
    spare = "  spare:\n    input: {dummy: {count: 5}}\n" if variant == "unrelated" else ""
    return f"""
buckets:
  sums: {{}}
  maxes: {{}}
  counts: {{idle_timeout_secs: 86400}}
  seen: {{}}
pipelines:
  main:
    input: {{file: {{path: {d}/main.ndjson, batch_size: 40}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end{lua_note}'}}
      - rolling_window: {{key: k, field: v, window_secs: {WINDOW_SECS}, time_field: ts, aggregates: [count, sum, min, max]}}
      - bucket: {{name: sums, key: k, op: add, field: v, as: total}}
      - bucket: {{name: maxes, key: k, op: max, field: v}}
      - bucket: {{name: seen, key: seq, op: count}}
      - lookup: {{bucket: maxes, key: k, as: vmax}}
      - buffer: {{max_messages: 25}}
    outputs: [{{file: {{path: {d}/out/main, max_part_bytes: {part_bytes}}}}}, {{stdout: {{}}}}]
  side:
    input: {{file: {{path: {d}/side.ndjson, batch_size: {side_batch}}}}}
  gen:
    input: {{dummy: {{count: {GEN}, batch_size: 7, template: '{{"seq":{{{{seq}}}},"k":"gen"}}'}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end'}}
      - bucket: {{name: counts, key: k, op: count}}
  merged:
    input: {{pipeline: [main, side]}}
    transforms:
      - bucket: {{name: counts, key: k, op: count}}
    outputs: [{{file: {{path: {d}/out/merged}}}}]
  other:
    input: {{file: {{path: {d}/other.ndjson, batch_size: {other_batch}}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end'}}
      - rolling_window: {{key: g, field: x, window_messages: 9, aggregates: [count, sum]}}
    outputs: [{{file: {{path: {d}/out/other}}}}]
{spare}"""


def oracle(n):
    """What a batch computation over the inputs gives: each main row, bucket values."""
    windows, sums, maxes, counts = {}, {}, {}, {}
    main_rows = []
    for i in range(n):
        k, v, ts = f"k{i % KEYS}", value(i), event_ts(i) * 1000
        w = windows.setdefault(k, {"end": None, "pts": []})
        late = w["pts"] and ts <= w["end"] - WINDOW_SECS * 1000
        if not late:
            w["end"] = ts if w["end"] is None else max(w["end"], ts)
            w["pts"].append((ts, v))
            w["pts"].sort(key=lambda p: p[0])
            w["pts"] = [p for p in w["pts"] if p[0] > w["end"] - WINDOW_SECS * 1000]
        vals = [p[1] for p in w["pts"]]
        sums[k] = sums.get(k, 0) + v
        maxes[k] = max(maxes.get(k, v), v)
        counts[k] = counts.get(k, 0) + 1
        row = {"seq": i, "k": k, "v": v, "ts": event_ts(i), "v_count": len(vals),
               "v_sum": float(sum(vals)), "v_min": float(min(vals)), "v_max": float(max(vals)),
               "total": sums[k], "vmax": maxes[k]}
        main_rows.append(row)
    for i in range(n // 2):
        k = f"k{i % KEYS}"
        counts[k] = counts.get(k, 0) + 1
    counts["gen"] = GEN
    other_rows = []
    ow = {}
    for i in range(n // 4):
        g, x = f"g{i % 5}", i % 13
        w = ow.setdefault(g, [])
        w.append(x)
        del w[:-9]
        other_rows.append({"seq": i, "g": g, "x": x, "x_count": len(w), "x_sum": float(sum(w))})
    # `seen` counts each main row under its own key: a bucket that grows by
    # a few keys a checkpoint, so its checkpoints are delta chains
    seen = {str(i): 1 for i in range(n)}
    return main_rows, other_rows, {"sums": sums, "maxes": maxes, "counts": counts, "seen": seen}


def ndjson_bytes(rows):
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()


def read_dir(path):
    out = b""
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), "rb") as f:
                out += f.read()
    return out


def lines_of(path):
    """The whole lines of every part in an output directory, in part order: a line the server
    is writing right now (no newline yet) is not one, so a poll never parses half a line."""
    lines = []
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), "rb") as f:
                text = f.read()
            lines.extend(l.decode() for l in text[:text.rfind(b"\n") + 1].split(b"\n") if l)
    return lines



class Counts:
    def __init__(self):
        self.kill_points = self.messages = self.lost = self.double = self.mismatches = 0
        self.disk_faults = self.output_faults = self.refusals = 0

    def ok(self):
        return self.lost == self.double == self.mismatches == 0 and self.kill_points > 0


def abandoned(s):
    return sum(r["abandoned"] for r in region_stats(s))


def finished(s, d, n):
    try:
        return (s.card("main", "input")["state"] == "finished"
                and s.card("side", "input")["state"] == "finished"
                and s.card("gen", "input")["state"] == "finished"
                and s.card("other", "input")["state"] == "finished"
                and len(lines_of(f"{d}/out/merged")) >= n + n // 2
                and len(lines_of(f"{d}/out/other")) >= n // 4
                and len(lines_of(f"{d}/out/main")) >= n)
    except Exception:
        return False


def prepare(d, n):
    """Inputs and the output directories, made durable before the first start."""
    os.makedirs(d, exist_ok=True)
    write_inputs(d, n)
    for name in OUTPUTS.values():
        os.makedirs(f"{d}/out/{name}", exist_ok=True)
    os.makedirs(f"{d}/state", exist_ok=True)
    os.sync()


def roots(d):
    return [f"{d}/state"] + [f"{d}/out/{name}" for name in OUTPUTS.values()]


def shim_env(d, rules=None):
    if not SHIM:
        raise AssertionError("KAYAK_FAULTSHIM is not set: build the faultshim target and point at it")
    env = {"LD_PRELOAD": SHIM, "FAULTSHIM_ROOTS": ":".join(roots(d)),
           "FAULTSHIM_LOG": f"{d}/shim.log",
           # the shim comes before a sanitizer runtime in the load order
           "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                                  "verify_asan_link_order=0"]))}
    if rules:
        env["FAULTSHIM_RULES"] = rules
    return env


def start(d, slow, env=None, variant="base"):
    return Server(d, config(d, slow, variant), server_config=SERVER, state_dir=f"{d}/state",
                  capture_stdout=True, env=env)


def check_bucket(s, name, want, c, label):
    """Counts every entry of bucket `name` above the oracle's value as double
    counted and every one below as lost."""
    if len(want) > 100:  # page through it
        entries, after = {}, ""
        while True:
            page = s.get_json(f"/api/v1/buckets/{name}?limit=1000&after={after}")
            entries.update((e["key"], e["value"]) for e in page["entries"])
            if not page.get("next_after"):
                break
            after = page["next_after"]
        extra = set(entries) - set(want)
        if extra:
            print(f"{label}: bucket {name} has {len(extra)} keys the oracle does not")
            c.double += len(extra)
    for key, v in want.items():
        got = (entries.get(key, 0) if len(want) > 100 else
               s.get_json(f"/api/v1/buckets/{name}?key={key}")["value"])
        if got != v:
            print(f"{label}: bucket {name}[{key}] = {got}, oracle {v}")
            c.double += got > v
            c.lost += got < v


def check_final(s, d, n, stdout_runs, c, label):
    """Waits for the run to finish, stops it, checks everything against the oracle.
    `stdout_runs` holds the lines each earlier run printed, or is None when
    earlier runs are not known (a power-loss state)."""
    wait_for(lambda: finished(s, d, n), timeout=300, what=f"{label}: the final run to finish")
    main_rows, other_rows, buckets = oracle(n)
    for name, want in buckets.items():
        check_bucket(s, name, want, c, label)
    s.stop()
    c.messages += n + n // 2 + n // 4 + GEN
    # file outputs: byte for byte (window aggregates and running totals are
    # in every row), in power-loss states too
    for name, rows in (("main", main_rows), ("other", other_rows)):
        if read_dir(f"{d}/out/{name}") != ndjson_bytes(rows):
            c.mismatches += 1
            print(f"{label}: file output {name} differs from the oracle")
    merged = [json.loads(l)["seq"] for l in lines_of(f"{d}/out/merged")]
    if sorted(merged) != list(range(n + n // 2)):
        c.mismatches += 1
        c.lost += len(set(range(n + n // 2)) - set(merged))
        print(f"{label}: merged output is not every message exactly once")
    if stdout_runs is None:
        return  # a power-loss state: what earlier runs printed is not known
    stdout_runs.append(list(s.stdout_lines))
    # stdout: every seq at least once; a repeat only as the replayed tail of a killed run
    seen = set()
    for i, lines in enumerate(stdout_runs):
        seqs = [json.loads(l)["seq"] for l in lines if l]
        repeats = [q for q in seqs if q in seen]
        if repeats and repeats != seqs[:len(repeats)]:
            c.double += 1
            print(f"{label}: run {i}: repeated lines that are not a replayed prefix")
        seen.update(seqs)
    c.lost += len(set(range(n)) - seen)


def kill_now(s):
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(timeout=30)
    s.kill()


def part_kills(d, kills, rng, n, slow, c, verbose):
    """Random SIGKILLs and crash points inside commits, recorded by the shim."""
    prepare(d, n)
    stdout_runs = []
    env = shim_env(d)
    for k in range(kills):
        crash = {}
        if k % 5 == 4:  # every fifth kill lands inside a commit, at a named step of a later one
            crash["KAYAK_CRASH_POINT"] = f"{CRASH_POINTS[(k // 5) % len(CRASH_POINTS)]}:{rng.randint(1, 4)}"
        variant = VARIANTS[k % len(VARIANTS)]  # each restart may come with a config change
        if k == min(kills // 2, 10):
            refuse_unreadable_state(d, slow, env, c, verbose)
        s = start(d, slow, {**env, **crash}, variant)
        if crash:
            s.proc.wait(timeout=60)
            if s.proc.returncode != -signal.SIGKILL:
                raise AssertionError(f"crash point {crash} did not fire:\n{s.stderr()}")
            s.kill()
        else:
            # (A run that finished is killed too: a restart after the end must
            # replay nothing and keep every finished input finished.)
            time.sleep(rng.uniform(0.2, 1.6))  # the random instant is what is tested
            kill_now(s)
        stdout_runs.append(list(s.stdout_lines))
        c.kill_points += 1
        if verbose:
            print(f"  kill {c.kill_points}: {crash.get('KAYAK_CRASH_POINT', 'random')}, "
                  f"config {variant}, {len(s.stdout_lines)} lines printed", flush=True)
    check_final(start(d, slow, env), d, n, stdout_runs, c, "kills")
    check_record(d, c, "kills")


def refuse_unreadable_state(d, slow, env, c, verbose):
    """A corrupt chunk, then reads of the state failing with EIO: each time the
    server refuses to start (exit 1, the file named) and changes no file; the
    run goes on once the damage is repaired."""
    state = f"{d}/state"
    # a bucket's chunk that the newest manifest of its region names
    newest = {}
    for name in os.listdir(state):
        if name.startswith("MANIFEST-") and name.endswith(".kym"):
            region, cid = name[len("MANIFEST-"):-len(".kym")].rsplit("-", 1)
            newest[region] = max(newest.get(region, name), name)
    chunks = []
    for name in newest.values():
        with open(os.path.join(state, name), "rb") as f:
            m = json.loads(f.read()[32:])
        chunks += [u["chunk"] for unit, u in m["units"].items() if unit.startswith("b.")]
    if not chunks:
        return
    victim = os.path.join(state, sorted(chunks)[-1])
    with open(victim, "rb") as f:
        good = f.read()
    with open(victim, "wb") as f:
        f.write(good[:-1] + bytes([good[-1] ^ 0x5A]))
    rules = f"{d}/rules-read"
    for what, extra in (("a corrupt chunk", {}),
                        ("EIO on reads", {"FAULTSHIM_RULES": rules})):
        if extra:
            with open(victim, "wb") as f:
                f.write(good)
            with open(rules, "w") as f:
                f.write(f"read {state} EIO\n")
        before = state_files(state)
        s = Server(d, config(d, slow), server_config=SERVER, state_dir=state, wait=False,
                   env={**env, **extra})
        try:
            code = s.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None  # it started on state it could not read
        s.kill()
        named = os.path.basename(victim) in s.stderr() or "Input/output error" in s.stderr()
        if code != 1 or not named or state_files(state) != before:
            print(f"kills: with {what} the server exited {code} (want 1), named the file: "
                  f"{named}, files unchanged: {state_files(state) == before}\n{s.stderr()[-2000:]}")
            c.mismatches += 1
        c.refusals += 1
        if verbose:
            print(f"  refused to start on {what}; every file kept", flush=True)
    os.remove(rules)


def check_record(d, c, label):
    """The commit protocol, checked in what the shim recorded."""
    ops = crashstate.parse(f"{d}/shim.log")
    problems, commits = crashstate.check_protocol(
        ops, f"{d}/state", roots(d), {u: f"{d}/out/{name}" for u, name in OUTPUTS.items()})
    for p in problems[:10]:
        print(f"{label}: {p}")
    if not commits:
        problems.append("the record holds no commit: is the shim interposing kayak's calls?")
        print(f"{label}: {problems[-1]}")
    c.mismatches += len(problems)
    return ops, commits


def part_disk(d, rng, n, slow, c, verbose):
    """Disk faults on the checkpoint files while the workload runs."""
    prepare(d, n)
    rules = f"{d}/rules"
    env = shim_env(d, rules)
    stdout_runs = []
    s = start(d, slow, env)
    # Faults on the output directories first, while the workload surely runs:
    # a short write (half the buffer written, then ENOSPC) and EIO on write.
    # The output retries, holding its pipeline; its parts must end up whole
    # lines, each once (check_final, byte for byte). A kill while the short
    # writes go on restarts from the last checkpoint.
    for pipeline, op, err, kill in (("main", "short", "ENOSPC", True),
                                    ("merged", "write", "EIO", False)):
        e0 = s.card(pipeline, "outputs[0]")["errors"]
        with open(rules, "w") as f:
            f.write(f"{op} {d}/out/{pipeline} {err}\n")
        wait_for(lambda: s.card(pipeline, "outputs[0]")["errors"] >= e0 + 2, timeout=60,
                 what=f"the {pipeline} output to fail under {op} {err}")
        c.output_faults += 1
        if kill:
            kill_now(s)
            stdout_runs.append(list(s.stdout_lines))
            c.kill_points += 1
            os.remove(rules)
            s = start(d, slow, env)
        else:
            c1 = committed(s)
            os.remove(rules)
            wait_for(lambda: committed(s) > c1, timeout=90,
                     what=f"commits to resume after {op} {err} on the output")
        if verbose:
            print(f"  output fault {op} {err} on out/{pipeline}: retried"
                  f"{', killed while active' if kill else ''}", flush=True)
    faults = list(FAULTS)
    rng.shuffle(faults)
    kill_at = rng.randrange(len(faults))
    for i, (op, err, text) in enumerate(faults):
        wait_for(lambda: committed(s) >= 2, timeout=60, what="a periodic commit")
        a0 = abandoned(s)
        with open(rules, "w") as f:
            f.write(f"{op} {d}/state {err}\n")
        wait_for(lambda: abandoned(s) > a0, timeout=60, what=f"a checkpoint to fail under {op} {err}")
        c1, a1 = committed(s), abandoned(s)
        wait_for(lambda: abandoned(s) > a1, timeout=60, what=f"a second failure under {op} {err}")
        if committed(s) != c1:
            print(f"disk: a checkpoint committed while {op} failed with {err}")
            c.mismatches += 1
        errors = [r["last_error"] for r in region_stats(s) if r["last_error"]]
        if not any(text in e for e in errors) or s.get("/health")[0] != 200:
            print(f"disk: under {op} {err} the API shows {errors}")
            c.mismatches += 1
        if verbose:
            print(f"  disk fault {op} {err}: checkpoints abandoned, server up ({errors[0]})", flush=True)
        if i == kill_at:
            # The disk is "full": kill now, restart from the checkpoint before the fault.
            kill_now(s)
            stdout_runs.append(list(s.stdout_lines))
            c.kill_points += 1
            os.remove(rules)
            s = start(d, slow, env)
            if verbose:
                print("  killed while the fault was active; restarted", flush=True)
            continue
        os.remove(rules)
        wait_for(lambda: committed(s) > c1, timeout=60, what=f"commits to resume after {op} {err}")
    # The input ends while the disk is full: the checkpoint that holds the
    # last changes fails, the next one (nothing changed since) commits, and
    # a kill right after must still restart with those changes.
    with open(rules, "w") as f:
        f.write(f"write {d}/state ENOSPC\n")
    wait_for(lambda: finished(s, d, n), timeout=300, what="the input to end under a full disk")
    a1 = abandoned(s)
    wait_for(lambda: abandoned(s) > a1 + 1, timeout=60, what="failures after the end")
    c1 = committed(s)
    os.remove(rules)
    wait_for(lambda: committed(s) > c1, timeout=60, what="a commit after the disk came back")
    kill_now(s)
    stdout_runs.append(list(s.stdout_lines))
    c.kill_points += 1
    if verbose:
        print("  input ended under a full disk; killed after the next commit", flush=True)
    c.disk_faults += sum(1 for op, _, _ in crashstate.parse(f"{d}/shim.log") if op == "F")
    check_final(start(d, slow, env), d, n, stdout_runs, c, "disk")


def part_unsynced(d, rng, n, slow, states, c, verbose):
    """Restarts from power-loss states: only what was fsynced survives."""
    prepare(d, n)
    s = start(d, slow, shim_env(d))
    wait_for(lambda: committed(s) >= 4, timeout=120, what="four commits")
    time.sleep(rng.uniform(0.0, 1.0))  # a random instant after them
    kill_now(s)
    c.kill_points += 1
    ops, commits = check_record(d, c, "unsynced")
    points = [commits[-1][0], len(ops) - 1] + [rng.randrange(len(ops)) for _ in range(states)]
    for j, k in enumerate(points[:max(states, 1)]):
        want = {}
        for idx, region, cid in commits:
            if idx <= k:
                want[region] = cid
        # Same paths as the recorded run: the config, and so every
        # component's fingerprint, must be the one the checkpoints were taken with.
        for r in roots(d):
            shutil.rmtree(r)
        m = crashstate.state_at(ops, k, roots(d))
        m.materialize({r: r for r in roots(d)})
        s2 = start(d, slow)
        check_final(s2, d, n, None, c, f"unsynced state {j}")
        got = {}
        for line in s2.stderr_lines:
            if "restoring region" in line:
                parts = line.split()
                got[parts[parts.index("region") + 1]] = int(parts[-1])
        for region, cid in want.items():
            if got.get(region, 0) < cid:
                print(f"unsynced: state at op {k}: region {region} restored checkpoint "
                      f"{got.get(region)}, but {cid} was durable")
                c.lost += 1
        if verbose:
            print(f"  power loss at op {k} of {len(ops)}: durable {want}, restored {got}", flush=True)
        c.kill_points += 1


def part_kafka(d, kills, rng, n, slow, c, verbose):
    """A kafka input windowed and summed into a bucket, killed while consuming
    (on topics of its own on the suite's real broker)."""
    os.makedirs(d, exist_ok=True)
    b = Broker(("in:4",))
    try:
        b.produce("in", n)
        group = f"crash-{rng.randrange(1 << 30)}"
        cfg = f"""
buckets:
  ksums: {{}}
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group}, batch_size: 40,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,{slow} do end return m end'}}
      - rolling_window: {{key: k, field: v, window_messages: 5, aggregates: [count, sum]}}
      - bucket: {{name: ksums, key: k, op: add, field: v, as: total}}
    outputs: [{{file: {{path: {d}/out}}}}]
"""
        state = f"{d}/state"

        def start_k():
            return Server(d, cfg, server_config=SERVER, state_dir=state)
        for _ in range(kills):
            s = start_k()
            # killed while consuming (or the checkpoint already covers the whole
            # topic: nothing is left)
            done = lambda: sum((checkpointed_offsets(state, "k") or {}).values()) >= n
            wait_for(lambda: s.card("k", "input")["messages_in"] > 0 or done(), timeout=120,
                     what="the kafka input to consume")
            if len(lines_of(f"{d}/out")) >= n:
                s.kill()
                break
            time.sleep(rng.uniform(0.2, 1.5))
            kill_now(s)
            c.kill_points += 1
            ckpt = checkpointed_offsets(state, "k") or {}
            for p, off in b.committed("in", group).items():
                if off >= 0 and off > ckpt.get(p, -1):
                    print(f"kafka: partition {p} committed at {off}, ahead of the checkpoint "
                          f"({ckpt.get(p)})")
                    c.double += 1
            if verbose:
                print(f"  kafka kill {c.kill_points}: committed offsets within the checkpoint",
                      flush=True)
        s = start_k()
        wait_for(lambda: len(lines_of(f"{d}/out")) >= n, timeout=300,
                 what="kafka: every message in the output")
        want, sums = kafka_oracle(n)
        check_bucket(s, "ksums", sums, c, "kafka")
        s.stop()
        rows = [json.loads(l) for l in lines_of(f"{d}/out")]
        seqs = sorted(r["seq"] for r in rows)
        if seqs != list(range(n)):
            c.lost += len(set(range(n)) - set(seqs))
            c.mismatches += 1
            print("kafka: the file output is not every message exactly once")
        bad = [r["seq"] for r in rows if (r["v_count"], r["v_sum"], r["total"]) != want[r["seq"]]]
        if bad:
            c.mismatches += 1
            print(f"kafka: window aggregates differ from the oracle at seqs {bad[:10]}")
        c.messages += n
    finally:
        b.close()


def part_cluster(d, kills, rng, c, verbose, on_s3=False):
    """Three members of a cluster (docs/cluster.md), their store a directory
    or (`on_s3`) a prefix in the suite's S3 server, summing a topic of six
    partitions into a bucket (through a buffer, whose held messages move
    with their partitions) while a producer goes on; random members killed
    at random instants, most restarted at once (static membership: they take
    their own place back), some only after their session ended (their
    partitions move, with their state, and come back). A second bucket is
    keyed by another field (dev = seq % 7), after a `repartition` step
    through a topic of four partitions. At the end each key of both is on
    one member only, with the oracle's total, every message is in a
    member's file output, and a read_committed reader of the exactly_once
    kafka output reads each message once."""
    keys, partitions, burst, devices = 60, 6, 300, 7
    os.makedirs(d, exist_ok=True)
    b = Broker((f"in:{partitions}", "out:3", "markers:1", "by-dev:4"))
    group = f"crash-cluster-{rng.randrange(1 << 30)}"
    store, s3 = f"{d}/store", ""
    if on_s3:
        prefix = f"crash-cluster-{rng.randrange(1 << 30)}"
        store = f"s3://kayak/{prefix}"
        e = servers.s3_env()
        s3 = (f", s3: {{endpoint: '{e['S3_ENDPOINT']}', path_style: true, "
              f"access_key_id: {e['S3_ACCESS_KEY_ID']}, "
              f"secret_access_key: '{e['S3_SECRET_ACCESS_KEY']}'}}")
    server_of = lambda m: (f"listen: 127.0.0.1:0\ncheckpoint: {{interval_secs: 1, timeout_secs: 20}}\n"
                           f"cluster: {{name: crash, member: {m}, store: '{store}', "
                           f"partitioner: crc32{s3}}}\n")

    def member_files():
        """[member file as JSON] of the store."""
        if on_s3:
            objs = servers.s3_objects_signed(f"{prefix}/crash/members/")
            blobs = [v for k, v in objs.items() if k.endswith(".json")]
        else:
            blobs = []
            for f in glob.glob(f"{store}/crash/members/*.json"):
                try:
                    with open(f, "rb") as fh:
                        blobs.append(fh.read())
                except OSError:
                    continue
        out = []
        for b in blobs:
            try:
                out.append(json.loads(b))
            except ValueError:
                continue
        return out

    def start_member(m):
        md = f"{d}/{m}"
        os.makedirs(md, exist_ok=True)
        cfg = f"""
buckets:
  csums: {{}}
  dsums: {{}}
pipelines:
  k:
    input: {{kafka: {{brokers: "{b.bootstrap}", topics: ["{b.t('in')}"], group: {group}, batch_size: 40,
                      properties: {{session.timeout.ms: "6000", heartbeat.interval.ms: "500"}}}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,30000 do end return m end'}}
      - buffer: {{max_messages: 100, max_secs: 0.3}}
      - bucket: {{name: csums, key: k, op: add, field: v, as: total}}
      - map: {{dev: 'seq % {devices}'}}
      - repartition: {{key: dev, topic: "{b.t('by-dev')}", marker_topic: "{b.t('markers')}",
                       properties: {{transaction.timeout.ms: "10000"}}}}
      - bucket: {{name: dsums, key: dev, op: add, field: v}}
    outputs:
      - {{file: {{path: {md}/out}}}}
      - {{kafka: {{brokers: "{b.bootstrap}", topic: "{b.t('out')}", exactly_once: true,
                  transactional_id: {b.t('txn')}, marker_topic: "{b.t('markers')}",
                  properties: {{transaction.timeout.ms: "10000"}}}}}}
"""
        return Server(md, cfg, server_config=server_of(m), state_dir=f"{md}/state")

    def totals(members, bucket):
        """{key: total} of `bucket` over the members, and the keys found on
        two of them."""
        got, twice = {}, set()
        for s in members.values():
            after = ""
            while True:
                page = s.get_json(f"/api/v1/buckets/{bucket}?limit=1000&after={after}")
                for e in page["entries"]:
                    if e["key"] in got:
                        twice.add(e["key"])
                    got[e["key"]] = e["value"]
                if not page.get("next_after"):
                    break
                after = page["next_after"]
        return got, twice

    def held_by_others(m):
        """The partitions the other members' files say they own."""
        held = set()
        for j in member_files():
            if j.get("member") == m or j.get("member") not in members:
                continue
            for r in j["regions"]:
                held.update(o["partition"] for o in r["owned"])
        return held

    n = 0
    members = {}
    try:
        b.produce("in", 3000, 0, keys)
        n = 3000
        for m in ("a", "b", "c"):
            members[m] = start_member(m)
        for _ in range(kills):
            time.sleep(rng.uniform(0.1, 1.2))
            m = rng.choice(sorted(members))
            kill_now(members[m])
            c.kill_points += 1
            b.produce("in", burst, n, keys)
            n += burst
            moved = rng.random() < 0.2
            if moved:
                # Its session ends first: its partitions move to the others.
                wait_for(lambda: held_by_others(m) == set(range(partitions)), timeout=60,
                         interval=0.2, what=f"cluster: {m}'s partitions on the other members")
            members[m] = start_member(m)
            if verbose:
                print(f"  cluster kill {c.kill_points}: member {m}, {n} messages"
                      f"{', restarted after its partitions moved' if moved else ''}", flush=True)
        wants = {"csums": {}, "dsums": {}}
        for i in range(n):
            for bucket, key in (("csums", f"k{i % keys}"), ("dsums", str(i % devices))):
                wants[bucket][key] = wants[bucket].get(key, 0) + (i * 31) % 97
        for bucket, want in wants.items():
            last = {}

            def settled():
                got, twice = totals(members, bucket)
                last["got"], last["twice"] = got, twice
                return not twice and got == want
            try:
                wait_for(settled, timeout=240, interval=1, what=f"cluster: {bucket}: the oracle")
            except AssertionError:
                got, twice = last.get("got", {}), last.get("twice", set())
                c.double += len(twice)
                for k, v in want.items():
                    if got.get(k, 0) != v:
                        print(f"cluster: {bucket}[{k}] = {got.get(k)}, oracle {v}")
                        c.double += got.get(k, 0) > v
                        c.lost += got.get(k, 0) < v
                if twice:
                    print(f"cluster: {bucket}: keys on two members: {sorted(twice)[:10]}")
        seqs = set()
        for m in ("a", "b", "c"):
            seqs.update(json.loads(l)["seq"] for l in lines_of(f"{d}/{m}/out"))
        missing = set(range(n)) - seqs
        if missing:
            print(f"cluster: {len(missing)} messages in no output, e.g. {sorted(missing)[:10]}")
            c.lost += len(missing)
        # The kafka output: once each (an open transaction of a member ends
        # within its timeout).
        count = {}

        def read_once():
            count.clear()
            for r in b.read("out", seconds=30):
                count[r["seq"]] = count.get(r["seq"], 0) + 1
            return len(count) >= n
        try:
            wait_for(read_once, timeout=120, interval=2, what="cluster: topic out")
        except AssertionError as e:
            print(f"cluster: {e}")
        twice = sorted(q for q, k in count.items() if k > 1)
        absent = set(range(n)) - set(count)
        if twice or absent:
            print(f"cluster: topic out (read_committed): {len(twice)} messages twice, e.g. "
                  f"{twice[:10]}; {len(absent)} missing, e.g. {sorted(absent)[:10]}")
        c.double += len(twice)
        c.lost += len(absent)
        c.messages += n
    finally:
        for s in members.values():
            s.kill()
        b.close()


class PostgresSource:
    """The postgres side of part_database: a table with a serial id read on
    (ts, id), and a second table upserted by id (idempotent: equal at the end)."""
    name = "postgres"

    def __init__(self, rng):
        self.schema = f"crash_{os.getpid()}_{rng.randrange(1 << 20)}"
        self.src, self.dst = f"{self.schema}.src", f"{self.schema}.dst"
        servers.psql(f"""DROP SCHEMA IF EXISTS {self.schema} CASCADE; CREATE SCHEMA {self.schema};
            CREATE TABLE {self.src} (id bigserial PRIMARY KEY, ts timestamptz NOT NULL, k text,
                                     v int);
            CREATE INDEX ON {self.src} (ts, id);
            CREATE TABLE {self.dst} (id bigint PRIMARY KEY, ts timestamptz, k text, v int);""")
        self.url = servers.pg_url()

    def write_burst(self, b, size):
        servers.psql(f"INSERT INTO {self.src} (ts, k, v) SELECT timestamptz '2026-01-01' + "
                     f"interval '{b} second', 'k' || (g % {KEYS}), (g * 7919) % 101 "
                     f"FROM generate_series({b * size}, {(b + 1) * size - 1}) g")

    def count(self):
        return int(servers.psql(f"SELECT count(*) FROM {self.src}")[0])

    def input_yaml(self):
        return (f"postgres: {{url: '{self.url}', query: 'SELECT id, ts, k, v FROM {self.src}', "
                f"watermark: ts, tiebreak: id, batch_size: 700, poll_secs: 0.05}}")

    def output_yaml(self):
        return f"postgres: {{url: '{self.url}', table: {self.dst}, key: [id]}}"

    def sums(self):
        return {k: int(v) for k, v in (r.split("|") for r in servers.psql(
            f"SELECT k, sum(v) FROM {self.src} GROUP BY k"))}

    def sink_complete(self, total):
        return servers.psql(f"SELECT count(*) FROM {self.dst}")[0] == str(total)

    def sink_check(self):
        """'' when the upserted table equals the source row for row."""
        diff = servers.psql(f"SELECT count(*) FROM ((TABLE {self.src} EXCEPT TABLE {self.dst}) "
                            f"UNION ALL (TABLE {self.dst} EXCEPT TABLE {self.src})) x")[0]
        return "" if diff == "0" else f"{diff} rows differ between the source and the upserted table"

    sink_promise = "the upserted table equal to the source"

    def close(self):
        servers.psql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")


class ClickhouseSource:
    """The clickhouse side of part_database: a MergeTree table read on (ts, id),
    and a second one the output inserts into (at least once: every id there)."""
    name = "clickhouse"

    def __init__(self, rng):
        self.db = f"crash_{os.getpid()}_{rng.randrange(1 << 20)}"
        self.src, self.dst = f"{self.db}.src", f"{self.db}.dst"
        servers.ch(f"DROP DATABASE IF EXISTS {self.db}")
        servers.ch(f"CREATE DATABASE {self.db}")
        for t in (self.src, self.dst):
            servers.ch(f"CREATE TABLE {t} (id UInt64, ts DateTime, k String, v UInt32) "
                       f"ENGINE = MergeTree() ORDER BY (ts, id)")
        self.url = servers.ch_url()

    def write_burst(self, b, size):
        servers.ch(f"INSERT INTO {self.src} SELECT number + 1, toDateTime('2026-01-01 00:00:00')"
                   f" + {b}, concat('k', toString(number % {KEYS})), (number * 7919) % 101 "
                   f"FROM system.numbers WHERE number >= {b * size} LIMIT {size}")

    def count(self):
        return int(servers.ch(f"SELECT count() FROM {self.src}").strip())

    def input_yaml(self):
        return (f"clickhouse: {{url: '{self.url}', query: 'SELECT id, ts, k, v FROM {self.src}', "
                f"watermark: ts, tiebreak: id, batch_size: 700, poll_secs: 0.05}}")

    def output_yaml(self):
        return f"clickhouse: {{url: '{self.url}', table: {self.dst}}}"

    def sums(self):
        return {r["k"]: r["s"] for r in servers.ch_rows(
            f"SELECT k, toUInt64(sum(v)) AS s FROM {self.src} GROUP BY k")}

    def sink_complete(self, total):
        return servers.ch(f"SELECT uniqExact(id) FROM {self.dst}").strip() == str(total)

    def sink_check(self):
        """'' when every source row is in the sink (at least once), as it was."""
        bad = servers.ch(f"SELECT count() FROM {self.src} WHERE (id, ts, k, v) NOT IN "
                         f"(SELECT id, ts, k, v FROM {self.dst})").strip()
        return "" if bad == "0" else f"{bad} source rows missing from the sink"

    sink_promise = "every row in the sink table (at least once)"

    def close(self):
        servers.ch(f"DROP DATABASE IF EXISTS {self.db}")


def part_database(make, d, kills, rng, n, c, verbose):
    """A database table read incrementally while a writer adds bursts of rows
    that share a timestamp, summed into a bucket, written to a file and into a
    second table of the same database, killed while both go on. Then: the
    bucket equals the sums of the table (exactly once), every row is in the
    file (at least once), and the second table holds what the source says
    (`sink_check`)."""
    os.makedirs(d, exist_ok=True)
    db = make(rng)
    burst = 500
    cfg = f"""
buckets:
  sums: {{}}
pipelines:
  db:
    input:
      {db.input_yaml()}
    transforms:
      - bucket: {{name: sums, key: k, op: add, field: v}}
    outputs:
      - file: {{path: {d}/out}}
      - {db.output_yaml()}
"""
    state = f"{d}/state"
    stop = threading.Event()

    def writer():  # bursts of equal timestamps, a batch boundary inside most of them
        for b in range(n // burst):
            if stop.is_set():
                return
            db.write_burst(b, burst)
            time.sleep(0.03)  # about 8 s of writing: the kills land while it goes on
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    try:
        for _ in range(kills):
            s = Server(d, cfg, server_config=SERVER, state_dir=state)
            wait_for(lambda: s.card("db", "input")["messages_in"] > 0, timeout=60,
                     what=f"{db.name}: the input to read")
            time.sleep(rng.uniform(0.3, 1.5))
            kill_now(s)
            c.kill_points += 1
            if verbose:
                print(f"  {db.name} kill {c.kill_points}: {db.count()} rows written", flush=True)
        w.join(timeout=300)
        total = n // burst * burst
        s = Server(d, cfg, server_config=SERVER, state_dir=state)
        ids = lambda: {json.loads(l)["id"] for l in lines_of(f"{d}/out")}  # noqa: E731
        wait_for(lambda: len(ids()) >= total, timeout=300,
                 what=f"{db.name}: every row in the file")
        wait_for(lambda: db.sink_complete(total), timeout=120,
                 what=f"{db.name}: every row in the sink table")
        check_bucket(s, "sums", db.sums(), c, db.name)
        s.stop()
        missing = set(range(1, total + 1)) - ids()
        if missing:
            c.lost += len(missing)
            print(f"{db.name}: rows missing from the file: {sorted(missing)[:10]}")
        problem = db.sink_check()
        if problem:
            c.mismatches += 1
            print(f"{db.name}: {problem}")
        c.messages += total
        print(f"{db.name}: {kills} kills, {total} rows in bursts of {burst}: bucket exact, "
              f"file complete, {db.sink_promise}", flush=True)
    finally:
        stop.set()
        w.join(timeout=60)
        db.close()


class Poster:
    """Posts `n` messages, one per request and in order, to whichever server
    is up (`url` changes at every restart), sending a post again until it is
    answered 202. A post whose answer was lost to a kill (the connection
    broke) is *in doubt*: it may have been logged before the kill, so it may
    come twice; every other post must come exactly once."""

    def __init__(self, n, rng, context=None):
        self.n, self.url, self.acked = n, None, 0
        self.context = context  # an https listener's
        self.in_doubt = set()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        import urllib.error
        import urllib.request
        i = 0
        while i < self.n and not self.stop:
            url = self.url
            if url is None:
                time.sleep(0.01)
                continue
            body = json.dumps({"seq": i, "k": f"h{i % 7}"}).encode()
            try:
                req = urllib.request.Request(url + "/ingest/h", data=body, method="POST")
                with urllib.request.urlopen(req, timeout=10, context=self.context) as r:
                    if r.status == 202:
                        i += 1
                        self.acked = i
                        continue
            except urllib.error.HTTPError as e:
                if e.code != 503:
                    raise AssertionError(f"http: post {i} answered {e.code}")
                time.sleep(0.01)
            except (OSError, urllib.error.URLError):
                self.in_doubt.add(i)  # the server went away mid-request
                time.sleep(0.01)


def part_http(d, kills, rng, n, c, verbose, tls=False, ahead=False):
    """An http input (write-ahead log) counted into a bucket and written to a
    file, killed while a client posts. Every post answered 202 is in the
    output; the bucket equals the output (state exactly once); a post comes
    twice only if it was in doubt. With `tls` the listener serves https
    (a throwaway CA, tls_ca.py) and every post goes over it, so a kill also
    cuts TLS sessions mid-record. With `ahead` the input writes each post
    to a topic of the suite's Kafka broker before its 202 (`topic`), and the
    bucket and the file are in the part that reads the topic back."""
    os.makedirs(d, exist_ok=True)
    server_config, context, label = SERVER, None, "http"
    write_ahead, broker = "", None
    if ahead:
        broker = Broker(("posts:3",))
        write_ahead = (f", topic: '{broker.t('posts')}', brokers: '{broker.bootstrap}', key: k")
        label = "http_ahead"
    if tls:
        import ssl
        import tls_ca
        ca = tls_ca.make(os.path.join(d, "tls"))
        server_config = SERVER + (f"tls: {{cert_file: {ca}/server.crt, "
                                  f"key_file: {ca}/server.key}}\n")
        context = ssl.create_default_context(cafile=f"{ca}/ca.crt")
        label = "https"
    cfg = f"""
buckets:
  hc: {{}}
pipelines:
  h:
    input: {{http: {{path: /ingest/h, batch_size: 50{write_ahead}}}}}
    transforms:
      - bucket: {{name: hc, key: k, op: count}}
    outputs: [{{file: {{path: {d}/out}}}}]
"""
    poster = Poster(n, rng, context)
    try:
        for _ in range(kills):
            s = Server(d, cfg, server_config=server_config, state_dir=f"{d}/state",
                       context=context)
            poster.url = s.url
            start_acked = poster.acked
            wait_for(lambda: poster.acked > start_acked or poster.acked >= n, timeout=60,
                     what=f"{label}: posts taken")
            time.sleep(rng.uniform(0.1, 1.0))  # the random instant is what is tested
            poster.url = None
            kill_now(s)
            c.kill_points += 1
            if verbose:
                print(f"  {label} kill {c.kill_points}: {poster.acked} posts acknowledged", flush=True)
        s = Server(d, cfg, server_config=server_config, state_dir=f"{d}/state",
                       context=context)
        poster.url = s.url
        wait_for(lambda: poster.acked >= n, timeout=300, what=f"{label}: every post acknowledged")
        wait_for(lambda: len({json.loads(l)["seq"] for l in lines_of(f"{d}/out")})
                 >= n, timeout=120, what=f"{label}: every post in the output")
        rows = [json.loads(l) for l in lines_of(f"{d}/out")]
        seqs = [r["seq"] for r in rows]
        missing = set(range(n)) - set(seqs)
        twice = {q for q in seqs if seqs.count(q) > 1} if len(seqs) != len(set(seqs)) else set()
        if missing:
            c.lost += len(missing)
            print(f"{label}: acknowledged posts missing from the output: {sorted(missing)[:10]}")
        if twice - poster.in_doubt:
            c.double += len(twice - poster.in_doubt)
            print(f"{label}: posts twice that were not in doubt: {sorted(twice - poster.in_doubt)[:10]}")
        per_key = {}
        for r in rows:
            per_key[r["k"]] = per_key.get(r["k"], 0) + 1
        check_bucket(s, "hc", per_key, c, label)
        s.stop()
        c.messages += n
    finally:
        poster.stop = True
        if broker is not None:
            broker.close()


# ---- message brokers (nats, redis, mqtt) ----

def broker_message(i):
    """What brokertool publishes as message i."""
    return {"seq": i, "device": f"d{i % 4}", "value": i}


class JetStreamSource:
    """A JetStream stream read by a durable (acknowledged after the
    checkpoint); the sink is JetStream too, read back by a durable."""
    name = "nats_jetstream"

    def __init__(self, rng):
        self.tag = f"crash{rng.randrange(1 << 30)}x{os.getpid()}"
        self.url = servers.nats_url()
        self.stream, self.out_stream = f"{self.tag}IN".upper(), f"{self.tag}OUT".upper()
        servers.brokertool("nats-stream", self.url, self.stream, f"{self.tag}.in")
        servers.brokertool("nats-stream", self.url, self.out_stream, f"{self.tag}.out.>")

    def publish(self, start, count):
        servers.brokertool("nats-pub", self.url, f"{self.tag}.in", count, start, "js")

    def input_yaml(self):
        return (f"nats: {{url: '{self.url}', subject: {self.tag}.in, stream: {self.stream}, "
                f"batch_size: 200}}")

    def output_yaml(self):
        return f"nats: {{url: '{self.url}', subject: '{self.tag}.out.{{{{device}}}}', jetstream: true}}"

    def sink_seqs(self, d):
        n = servers.nats_stream_msgs(self.out_stream) or 0
        path = os.path.join(d, f"sink-{time.monotonic_ns()}")
        servers.brokertool("nats-sub", self.url, f"{self.tag}.out.>", n, path, self.out_stream,
                           f"check{time.monotonic_ns()}")
        with open(path) as f:
            return {json.loads(l)["seq"] for l in f if l.strip()}

    def close(self):
        pass


class RedisStreamSource:
    """A redis stream read by a consumer group (acknowledged after the
    checkpoint); the sink is another stream (XADD)."""
    name = "redis_stream"

    def __init__(self, rng):
        self.key = f"crash{rng.randrange(1 << 30)}x{os.getpid()}"
        self.url = servers.redis_url()

    def publish(self, start, count):
        servers.brokertool("redis-pub", self.url, f"{self.key}.in", count, start)

    def input_yaml(self):
        return f"redis: {{url: '{self.url}', stream: {self.key}.in, batch_size: 200}}"

    def output_yaml(self):
        return f"redis: {{url: '{self.url}', stream: {self.key}.out}}"

    def sink_seqs(self, d):
        return {json.loads(p)["seq"] for p in servers.redis_stream_payloads(f"{self.key}.out")}

    def close(self):
        servers.redis_commands([["DEL", f"{self.key}.in", f"{self.key}.out"]])


def part_broker(make, d, kills, rng, n, c, verbose):
    """A broker input acknowledged after the checkpoint (JetStream, a redis
    stream), summed into a bucket, written to a file and back into the broker,
    killed while a publisher adds bursts. Then: the bucket equals the sums of
    everything published (exactly once), every message is in the file and in
    the broker sink (at least once)."""
    os.makedirs(d, exist_ok=True)
    src = make(rng)
    burst = 500
    cfg = f"""
buckets:
  sums: {{}}
pipelines:
  b:
    input:
      {src.input_yaml()}
    transforms:
      - bucket: {{name: sums, key: device, op: add, field: value}}
    outputs:
      - file: {{path: {d}/out}}
      - {src.output_yaml()}
"""
    state = f"{d}/state"
    stop = threading.Event()

    def publisher():
        for b in range(n // burst):
            if stop.is_set():
                return
            src.publish(b * burst, burst)
            time.sleep(0.2)  # about 10 s of publishing: the kills land while it goes on
    w = threading.Thread(target=publisher, daemon=True)
    w.start()
    try:
        for _ in range(kills):
            s = Server(d, cfg, server_config=SERVER, state_dir=state)
            # (or the publisher is done and the checkpoint covers all of it)
            wait_for(lambda: s.card("b", "input")["messages_in"] > 0 or not w.is_alive(),
                     timeout=60, what=f"{src.name}: the input to read")
            time.sleep(rng.uniform(0.3, 1.5))
            kill_now(s)
            c.kill_points += 1
            if verbose:
                print(f"  {src.name} kill {c.kill_points}", flush=True)
        w.join(timeout=300)
        total = n // burst * burst
        s = Server(d, cfg, server_config=SERVER, state_dir=state)
        seqs = lambda: {json.loads(l)["seq"] for l in lines_of(f"{d}/out")}  # noqa: E731
        wait_for(lambda: len(seqs()) >= total, timeout=300,
                 what=f"{src.name}: every message in the file")
        want = {}
        for i in range(total):
            m = broker_message(i)
            want[m["device"]] = want.get(m["device"], 0) + m["value"]
        check_bucket(s, "sums", want, c, src.name)
        wait_for(lambda: len(src.sink_seqs(d)) >= total, timeout=120,
                 what=f"{src.name}: every message in the broker sink")
        s.stop()
        missing = set(range(total)) - seqs()
        if missing:
            c.lost += len(missing)
            print(f"{src.name}: messages missing from the file: {sorted(missing)[:10]}")
        c.messages += total
        print(f"{src.name}: {kills} kills, {total} messages: bucket exact, file and broker "
              "sink complete (at least once)", flush=True)
    finally:
        stop.set()
        w.join(timeout=60)
        src.close()


class LossySource:
    """An input that keeps nothing for an absent subscriber: nats core, redis
    pub/sub, mqtt with a clean session, udp datagrams."""

    def __init__(self, rng, kind):
        self.name = kind
        self.tag = f"crash{rng.randrange(1 << 30)}x{os.getpid()}"
        if kind == "udp":
            import socket
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind(("127.0.0.1", 0))  # its port, then the input's (free once closed)
            self.port = self.sock.getsockname()[1]
            self.sock.close()
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def input_yaml(self):
        if self.name == "udp":
            return f"udp: {{listen: '127.0.0.1:{self.port}'}}"
        if self.name == "nats":
            return f"nats: {{url: '{servers.nats_url()}', subject: {self.tag}}}"
        if self.name == "redis_pubsub":
            return f"redis: {{url: '{servers.redis_url()}', channel: {self.tag}}}"
        return f"mqtt: {{url: '{servers.mqtt_url()}', topics: [{self.tag}], client_id: {self.tag}}}"

    def subscribed(self, s):
        if self.name == "udp":
            return s.card("l", "input")["position"].startswith("listening")
        if self.name == "nats":
            return servers.nats_subscribed(self.tag)
        if self.name == "redis_pubsub":
            return servers.redis_commands([["PUBSUB", "NUMSUB", self.tag]])[0][1] >= 1
        return s.card("l", "input")["position"].startswith("subscribed")

    def publish(self, start, count):
        if self.name == "udp":
            for i in range(start, start + count):
                self.sock.sendto(json.dumps(broker_message(i)).encode(), ("127.0.0.1", self.port))
        elif self.name == "nats":
            servers.brokertool("nats-pub", servers.nats_url(), self.tag, count, start)
        elif self.name == "redis_pubsub":
            servers.brokertool("redis-pub", servers.redis_url(), self.tag, count, start, "channel")
        else:
            servers.brokertool("mqtt-pub", servers.mqtt_url(), self.tag, count, 1, start)


def part_lossy(kind, d, kills, rng, c, verbose):
    """An input that is not rewindable, counted into a bucket and written to a
    file, killed at a random instant after each burst. Then: the bucket agrees
    with the file (state consistent with the output), nothing is there twice,
    and what is missing is only from bursts a kill cut into: what was in
    flight (received after the last checkpoint) at a crash."""
    os.makedirs(d, exist_ok=True)
    src = LossySource(rng, kind)
    burst = 2000
    cfg = f"""
buckets:
  counts: {{}}
pipelines:
  l:
    input:
      {src.input_yaml()}
    transforms:
      - bucket: {{name: counts, key: device, op: count}}
    outputs:
      - file: {{path: {d}/out}}
"""
    state = f"{d}/state"
    seqs = lambda: [json.loads(l)["seq"] for l in lines_of(f"{d}/out")]  # noqa: E731
    cut = set()
    for k in range(kills + 1):
        s = Server(d, cfg, server_config=SERVER, state_dir=state)
        wait_for(lambda: src.subscribed(s), timeout=60, what=f"{kind}: subscribed")
        if k == kills:
            # Nothing may be lost without a kill. Sent in steps that each
            # arrive before the next: the broker's own queue for a slow
            # subscriber (mosquitto's 1,000 messages) drops what passes it
            # when the machine is loaded, and that is the broker, not kayak.
            step = 250
            for lo in range(k * burst, (k + 1) * burst, step):
                src.publish(lo, step)
                wait_for(lambda: len(set(seqs()) & set(range(lo, lo + step))) >= step,
                         timeout=60, what=f"{kind}: the last burst, whole")
            break
        src.publish(k * burst, burst)
        time.sleep(rng.uniform(0.0, 1.5))
        kill_now(s)
        c.kill_points += 1
        cut.update(range(k * burst, (k + 1) * burst))
    c1 = committed(s)
    wait_for(lambda: committed(s) > c1, timeout=30, what=f"{kind}: a checkpoint after the end")
    got = seqs()
    per_device = {}
    for q in got:
        dev = broker_message(q)["device"]
        per_device[dev] = per_device.get(dev, 0) + 1
    check_bucket(s, "counts", per_device, c, kind)
    s.stop()
    published = (kills + 1) * burst
    missing = set(range(published)) - set(got)
    if len(got) != len(set(got)):
        c.double += len(got) - len(set(got))
        print(f"{kind}: messages twice in the output")
    if missing - cut:
        c.lost += len(missing - cut)
        print(f"{kind}: lost outside a crash: {sorted(missing - cut)[:10]}")
    c.messages += published
    print(f"{kind}: {kills} kills, {published} published, {len(missing)} lost, all in flight at "
          f"a crash; bucket = output", flush=True)


def part_opcua(d, kills, rng, c, verbose):
    """The opcua input (not rewindable: a subscription to two counters of a
    private node-opcua server) counted into a bucket and written to a file,
    killed at random instants. Then the server is stopped, so no change is
    in flight, and a checkpoint is waited for: the bucket agrees with the
    file, and no change is there twice or out of order (each counter only
    grows). Changes made while kayak was down are not received; the gaps
    they leave are reported, not failed (a sampled variable may also skip a
    value under load)."""
    os.makedirs(d, exist_ok=True)
    sh = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "servers", "servers.sh")
    srv = os.path.join(d, "server")
    subprocess.run([sh, "start", "opcua", srv], check=True, timeout=120)
    try:
        with open(os.path.join(srv, "env")) as f:
            url = f.read().strip().split("=", 1)[1]
        nodes = ["ns=1;s=Plant.Counter", "ns=1;s=Plant.Level"]
        cfg = f"""
buckets:
  counts: {{}}
pipelines:
  l:
    input:
      opcua: {{endpoint: '{url}', nodes: ['{nodes[0]}', '{nodes[1]}'], sampling_ms: 50,
               publishing_ms: 100, queue_size: 50}}
    transforms:
      - bucket: {{name: counts, key: node, op: count}}
    outputs:
      - file: {{path: {d}/out}}
"""
        state = f"{d}/state"
        rows = lambda: [json.loads(l) for l in lines_of(f"{d}/out")]  # noqa: E731
        for k in range(kills + 1):
            s = Server(d, cfg, server_config=SERVER, state_dir=state)
            n0 = len(rows())
            wait_for(lambda: len(rows()) >= n0 + 10, timeout=60, what="opcua: changes")
            if k == kills:
                break
            time.sleep(rng.uniform(0.0, 1.5))  # the kill lands anywhere in the flow
            kill_now(s)
            c.kill_points += 1
        subprocess.run([sh, "stop", "opcua", srv], check=True, timeout=120)
        wait_for(lambda: s.card("l", "input")["state"] == "retrying", timeout=60,
                 what="opcua: the input without its server")
        c1 = committed(s)
        wait_for(lambda: committed(s) > c1, timeout=30, what="opcua: a checkpoint after the end")
        got = rows()
        per_node = {}
        for m in got:
            key = urllib.parse.quote(m["node"], safe="")
            per_node[key] = per_node.get(key, 0) + 1
        check_bucket(s, "counts", per_node, c, "opcua")
        s.stop()
        gaps = 0
        for node in nodes:
            values = [abs(m["value"]) for m in got if m["node"] == node]
            if any(b <= a for a, b in zip(values, values[1:])):
                c.double += 1
                print(f"opcua: {node}: a change twice or out of order")
            gaps += sum(1 for a, b in zip(values, values[1:]) if b > a + 1)
        c.messages += len(got)
        print(f"opcua: {kills} kills, {len(got)} changes, {gaps} gaps in the counters; "
              "bucket = output, none twice", flush=True)
    finally:
        subprocess.run([sh, "stop", "opcua", srv], check=False, timeout=120)


def part_s3(d, kills, rng, c, verbose):
    """The file input into the s3 output (small parts and objects), killed at
    random instants and at the crash points between an upload and the
    checkpoint that names it, with `compression: zstd` (the e2e tests kill
    the uncompressed and gzip outputs). Then: the completed objects,
    uncompressed and concatenated, are the input's bytes exactly (every row
    once, byte-identical with an uninterrupted run)."""
    os.makedirs(d, exist_ok=True)
    n = 8000
    with open(f"{d}/in.ndjson", "w") as f:
        for i in range(n):
            f.write(json.dumps({"seq": i, "pad": "x" * (i % 61)}, separators=(",", ":")) + "\n")
    with open(f"{d}/in.ndjson", "rb") as f:
        want = f.read()
    e = servers.s3_env()
    prefix = f"crash{rng.randrange(1 << 30)}x{os.getpid()}"
    cfg = f"""
pipelines:
  s:
    input: {{file: {{path: {d}/in.ndjson, batch_size: 50}}}}
    transforms:
      - lua: {{script: 'function process(m) for i=1,300000 do end return m end'}}
    outputs:
      - s3: {{endpoint: '{e["S3_ENDPOINT"]}', bucket: {e["S3_BUCKET"]}, path_style: true,
              access_key_id: {e["S3_ACCESS_KEY_ID"]}, secret_access_key: {e["S3_SECRET_ACCESS_KEY"]},
              key: '{prefix}/{{{{seq}}}}.ndjson.zst', part_bytes: 8000, max_object_bytes: 60000,
              compression: zstd}}
"""
    state = f"{d}/state"
    points = ["s3_after_upload_part:2", "s3_after_complete:1", "s3_after_upload_part:5"]
    plan = ["random"] * kills
    for i, p in enumerate(points):
        plan.insert(min(len(plan), 2 * i + 1), p)
    for p in plan:
        env = {} if p == "random" else {"KAYAK_CRASH_POINT": p}
        s = Server(d, cfg, server_config=SERVER, state_dir=state, env=env)

        def done(s=s):
            try:
                return s.card("s", "input")["state"] == "finished"
            except OSError:  # it killed itself while answering
                return False
        if p == "random":
            wait_for(lambda: done() or s.card("s", "outputs[0]")["messages_out"] > 0, timeout=60,
                     what="s3: rows out")
            time.sleep(rng.uniform(0.1, 1.2))
        else:
            wait_for(lambda: s.proc.poll() is not None or done(), timeout=120,
                     what=f"s3: the crash point {p}")
        if s.proc.poll() is not None or not done():
            c.kill_points += 1
        kill_now(s)
        if verbose:
            print(f"  s3 kill ({p})", flush=True)
    s = Server(d, cfg, server_config=SERVER, state_dir=state)
    wait_for(lambda: s.card("s", "input")["state"] == "finished", timeout=300,
             what="s3: the input to end")
    s.stop()
    objs = servers.s3_objects(prefix + "/")
    got = b"".join(subprocess.run(["zstd", "-dcq"], input=objs[k], capture_output=True,
                                  check=True, timeout=60).stdout for k in sorted(objs))
    if got != want:
        seqs = [json.loads(l)["seq"] for l in got.decode().splitlines()]
        c.lost += len(set(range(n)) - set(seqs))
        c.double += len(seqs) - len(set(seqs))
        c.mismatches += 1
        print(f"s3: the objects are not the input's bytes ({len(got)} of {len(want)})")
    left_open = servers.s3_uploads(prefix + "/")
    if left_open:  # parts stored (and billed) that no object holds
        c.mismatches += 1
        print(f"s3: {len(left_open)} multipart uploads left open: {left_open[:3]}")
    c.messages += n
    print(f"s3: {len(plan)} kills ({len(points)} at crash points), {n} rows in {len(objs)} "
          "zstd objects: byte-identical to the input, no upload left open", flush=True)


def run(args):
    rng = random.Random(args.seed)
    n = args.messages
    print(f"crash suite: seed {args.seed} (replay with --seed {args.seed}), {args.kills} kills, "
          f"{n} messages", flush=True)
    base = tempfile.mkdtemp(prefix="kayak-crash-")
    c = Counts()
    try:
        part_kills(os.path.join(base, "kills"), args.kills, rng, n, args.slow, c, args.verbose)
        part_disk(os.path.join(base, "disk"), rng, n, args.slow, c, args.verbose)
        part_unsynced(os.path.join(base, "unsynced"), rng, max(n // 3, 300), args.slow,
                      args.crash_states, c, args.verbose)
        part_kafka(os.path.join(base, "kafka"), args.kafka_kills, rng, max(n // 4, 300),
                   args.slow, c, args.verbose)
        if args.cluster_kills:
            # Half on a shared directory, half on S3.
            part_cluster(os.path.join(base, "cluster"), (args.cluster_kills + 1) // 2, rng, c,
                         args.verbose)
            part_cluster(os.path.join(base, "cluster-s3"), args.cluster_kills // 2, rng, c,
                         args.verbose, on_s3=True)
        part_http(os.path.join(base, "http"), args.http_kills, rng, max(n // 6, 300), c,
                  args.verbose)
        if args.https_kills:
            part_http(os.path.join(base, "https"), args.https_kills, rng, max(n // 12, 300), c,
                      args.verbose, tls=True)
        if args.http_ahead_kills:
            part_http(os.path.join(base, "http_ahead"), args.http_ahead_kills, rng,
                      max(n // 12, 300), c, args.verbose, ahead=True)
        if args.db_rows:
            for make in (PostgresSource, ClickhouseSource):
                part_database(make, os.path.join(base, make.name), args.db_kills, rng,
                              args.db_rows, c, args.verbose)
        if args.broker_messages:
            for make in (JetStreamSource, RedisStreamSource):
                part_broker(make, os.path.join(base, make.name), args.broker_kills, rng,
                            args.broker_messages, c, args.verbose)
            for kind in ("nats", "redis_pubsub", "mqtt", "udp"):
                part_lossy(kind, os.path.join(base, kind), 3, rng, c, args.verbose)
        if args.opcua_kills:
            part_opcua(os.path.join(base, "opcua"), args.opcua_kills, rng, c, args.verbose)
        if args.s3_kills:
            part_s3(os.path.join(base, "s3"), args.s3_kills, rng, c, args.verbose)
    except AssertionError as e:
        print(f"crash suite: {e}")
        c.mismatches += 1
    print(f"crash summary: kill_points={c.kill_points} messages={c.messages} lost={c.lost} "
          f"double_counted={c.double} byte_mismatches={c.mismatches} disk_faults={c.disk_faults} "
          f"output_faults={c.output_faults} refused_starts={c.refusals} "
          f"config_changes={len(VARIANTS) - 1}",
          flush=True)
    if not c.ok():
        print(f"kept the work directory for inspection: {base}")
        return 1
    shutil.rmtree(base, ignore_errors=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KAYAK_SEED", random.randrange(1 << 30))))
    ap.add_argument("--messages", type=int, default=12000)
    ap.add_argument("--crash-states", type=int, default=3, help="power-loss states to restart from")
    ap.add_argument("--kafka-kills", type=int, default=4, help="kills of the kafka workload")
    ap.add_argument("--http-kills", type=int, default=4, help="kills of the http workload")
    ap.add_argument("--cluster-kills", type=int, default=30,
                    help="kills of random members of the three-member cluster (0: none)")
    ap.add_argument("--https-kills", type=int, default=3,
                    help="kills of the http workload with the listener over TLS (0: none)")
    ap.add_argument("--http-ahead-kills", type=int, default=3,
                    help="kills of the http workload written ahead to Kafka (0: none)")
    ap.add_argument("--db-kills", type=int, default=5,
                    help="kills of each database workload (postgres, clickhouse)")
    ap.add_argument("--db-rows", type=int, default=100_000,
                    help="rows of each database workload (0: no database parts)")
    ap.add_argument("--broker-kills", type=int, default=5,
                    help="kills of each rewindable broker workload (JetStream, redis stream)")
    ap.add_argument("--broker-messages", type=int, default=20_000,
                    help="messages of each broker workload (0: no broker parts)")
    ap.add_argument("--s3-kills", type=int, default=5,
                    help="random kills of the s3 workload (plus 3 at crash points; 0: none)")
    ap.add_argument("--opcua-kills", type=int, default=3,
                    help="random kills of the opcua workload (0: none)")
    ap.add_argument("--slow", type=int, default=150000, help="Lua loop per message, to stretch the run")
    ap.add_argument("-v", "--verbose", action="store_true")
    sys.exit(run(ap.parse_args()))


if __name__ == "__main__":
    main()
