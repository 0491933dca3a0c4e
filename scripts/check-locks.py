#!/usr/bin/env python3
"""check-locks.py BUILD_DIR: clang's thread-safety analysis over every source
file that uses kayak/thread_annotations.h (Mutex, MutexLock, KAYAK_GUARDED_BY).

gcc builds kayak; clang only checks here, with -fsyntax-only and
-Werror=thread-safety, each file with the flags its compile command has
(from BUILD_DIR/compile_commands.json, gcc-only flags dropped). Which files
use the header comes from ninja's dependency log, so a file that includes it
through another header is checked too. Prints every finding; exit 1 on any.
"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

HEADER = "kayak/thread_annotations.h"
# gcc flags clang does not take, and the warnings gcc already checks (clang
# checks only the locks here).
DROP = {"-Wno-tsan", "-fno-sanitize-recover=undefined", "-Werror", "-Wall", "-Wextra", "-Wpedantic"}


def clang():
    for name in ("clang++-14", "clang++"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("check-locks: clang++ not found (scripts/install-deps.sh installs clang)")


def annotated_objects(build):
    """Object files whose recorded dependencies include the header."""
    out = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True,
                         check=True).stdout
    objects, current, uses = set(), None, False
    for line in out.splitlines() + [""]:
        if line and not line[0].isspace():
            if current and uses:
                objects.add(current)
            current, uses = line.split(":", 1)[0].strip(), False
        elif line.strip().endswith(HEADER):
            uses = True
    if current and uses:
        objects.add(current)
    return objects


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    compiler = clang()
    objects = annotated_objects(build)
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = json.load(f)
    jobs = []
    for c in commands:
        args = shlex.split(c["command"])
        if "-o" not in args:
            continue
        obj = args[args.index("-o") + 1]
        if obj not in objects or not c["file"].startswith(os.path.join(root, "src")):
            continue
        if not c["file"].endswith(".cc"):
            continue
        flags, skip = [], False
        for a in args[1:]:
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MT"):
                skip = True
                continue
            if a in ("-c", "-MD") or a in DROP or a == c["file"]:
                continue
            flags.append(a)
        jobs.append((c["file"], c["directory"],
                     [compiler, *flags, "-fsyntax-only", "-Wthread-safety",
                      "-Wthread-safety-beta", "-Werror=thread-safety", "-Wno-unknown-warning-option",
                      "-Wno-error=unused-command-line-argument", "-ferror-limit=0", c["file"]]))
    if not jobs:
        sys.exit("check-locks: no file uses " + HEADER + " (is " + build + " built with ninja?)")

    def run(job):
        src, cwd, cmd = job
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        return src, p.returncode, p.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for src, rc, err in pool.map(run, sorted(jobs)):
            if rc != 0:
                failed += 1
                sys.stderr.write(err)
    print(f"check-locks: {len(jobs)} files, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
