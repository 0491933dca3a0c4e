"""What a power loss could leave behind, computed from faultshim's log.

The log (see faultshim.c) lists every mutating call on the tracked
directories in the order they happened. Replaying it over a model of files
(contents per inode, the part of them made durable by fsync) and directories
(entries, the entries made durable by a directory fsync) gives, for any
point in the run, the *strict* crash state: only bytes that were fsynced and
only directory entries whose directory was fsynced after they appeared. A
file whose contents were never synced is empty. This is harsher than any
real file system, on purpose: a restart that works from it never needed an
unsynced byte.

Also checks the commit protocol directly: when a manifest is renamed into
place, every chunk it names and its own bytes are durable, and the directory
is fsynced after the rename; every file-output part a checkpoint counts on is
durable up to the length it records.
"""
import json
import os

HEADER_BYTES = 32  # docs/state_format.md: the frame header before a payload


def parse(path):
    """The log as a list of (op, args, data) tuples."""
    ops = []
    with open(path, "rb") as f:
        raw = f.read()
    i = 0
    while i < len(raw):
        end = raw.index(b"\n", i)
        fields = raw[i:end].decode().split("\t")
        i = end + 1
        data = b""
        if fields[0] == "W":
            n = int(fields[3])
            data = raw[i:i + n]
            i += n + 1  # the bytes, then "\n"
        ops.append((fields[0], fields[1:], data))
    return ops


class Model:
    """Files and directories as the log leaves them, and what of it is durable."""

    def __init__(self, roots):
        self.roots = list(roots)
        self.next_ino = 1
        self.ns = {}          # path -> inode (files only)
        self.content = {}     # inode -> bytearray
        self.synced = {}      # inode -> bytes made durable by the last fsync
        self.synced_ns = {r: {} for r in self.roots}  # dir -> {path: inode} at its last fsync

    def apply(self, op, args, data):
        if op == "O":
            path, trunc = args[0], args[1] == "1"
            if path not in self.ns:
                self.ns[path] = self.next_ino
                self.content[self.next_ino] = bytearray()
                self.next_ino += 1
            elif trunc:
                self.content[self.ns[path]] = bytearray()
        elif op == "W":
            ino = self.ns.get(args[0])
            if ino is None:
                return
            off = int(args[1])
            c = self.content[ino]
            if len(c) < off:
                c.extend(b"\0" * (off - len(c)))
            c[off:off + len(data)] = data
        elif op == "T":
            ino = self.ns.get(args[0])
            if ino is not None:
                n = int(args[1])
                c = self.content[ino]
                if len(c) > n:
                    del c[n:]
                else:
                    c.extend(b"\0" * (n - len(c)))
        elif op == "S":
            ino = self.ns.get(args[0])
            if ino is not None:
                self.synced[ino] = bytes(self.content[ino])
        elif op == "D":
            d = args[0]
            self.synced_ns[d] = {p: ino for p, ino in self.ns.items() if os.path.dirname(p) == d}
        elif op == "R":
            if args[0] in self.ns:
                self.ns[args[1]] = self.ns.pop(args[0])
        elif op == "U":
            self.ns.pop(args[0], None)

    def durable_bytes(self, path):
        """The bytes of `path` a power loss now would leave, or None if the entry may be gone."""
        d = os.path.dirname(path)
        ino = self.synced_ns.get(d, {}).get(path)
        if ino is None:
            return None
        return self.synced.get(ino, b"")

    def materialize(self, mapping):
        """Writes the strict crash state: `mapping` maps each root to a fresh directory."""
        for root, dest in mapping.items():
            os.makedirs(dest, exist_ok=True)
            for path, ino in self.synced_ns.get(root, {}).items():
                with open(os.path.join(dest, os.path.basename(path)), "wb") as f:
                    f.write(self.synced.get(ino, b""))


def payload_json(data):
    return json.loads(data[HEADER_BYTES:].decode())


def check_protocol(ops, state_dir, roots, output_dirs):
    """Replays the log and checks each commit. `output_dirs` maps a file
    output's unit ("p.main.o0") to its directory. Returns (problems, commits)
    where commits lists (index of the directory fsync that made a manifest
    durable, region, checkpoint id)."""
    m = Model(roots)
    problems, commits = [], []
    pending = None  # a manifest renamed into place, waiting for its directory fsync
    for idx, (op, args, data) in enumerate(ops):
        if op == "R" and os.path.basename(args[1]).startswith("MANIFEST-"):
            tmp_ino = m.ns.get(args[0])
            body = bytes(m.content.get(tmp_ino, b""))
            if m.synced.get(tmp_ino) != body:
                problems.append(f"op {idx}: {args[1]} renamed before its bytes were fsynced")
            try:
                manifest = payload_json(body)
            except ValueError:
                problems.append(f"op {idx}: {args[1]} is not a readable manifest")
                m.apply(op, args, data)
                continue
            for unit, rec in manifest["units"].items():
                chunk = os.path.join(state_dir, rec["chunk"])
                got = m.durable_bytes(chunk)
                if got is None or len(got) != HEADER_BYTES + rec["bytes"]:
                    problems.append(f"op {idx}: checkpoint {manifest['checkpoint']} names {rec['chunk']}, "
                                    f"which is not durable before the rename")
                    continue
                if unit in output_dirs:  # a file output: its part must be durable that far
                    state = json.loads(got[HEADER_BYTES:].decode())
                    if state.get("part"):
                        have = m.durable_bytes(os.path.join(output_dirs[unit], state["part"]))
                        if have is None or len(have) < state["length"]:
                            problems.append(f"op {idx}: checkpoint {manifest['checkpoint']} counts on "
                                            f"{state['length']} bytes of {state['part']}, "
                                            f"{'none' if have is None else len(have)} are durable")
            pending = (manifest["region"], manifest["checkpoint"])
        m.apply(op, args, data)
        if op == "D" and args[0] == state_dir and pending:
            commits.append((idx, pending[0], pending[1]))
            pending = None
        elif pending and op == "O" and os.path.basename(args[0]).startswith("MANIFEST-"):
            problems.append(f"op {idx}: a new manifest was begun before the directory was fsynced "
                            f"after checkpoint {pending[1]} was renamed into place")
    return problems, commits


def state_at(ops, upto, roots):
    """The model after ops[0..upto]."""
    m = Model(roots)
    for op, args, data in ops[:upto + 1]:
        m.apply(op, args, data)
    return m
