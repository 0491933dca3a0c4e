#!/usr/bin/env bash
# Where an http post's CPU goes, thread by thread: kayak with --state-dir
# (the fsynced log), http input -> file output, under wrk for `seconds` with
# `connections` keep-alive connections; prints the posts, the fdatasyncs (from
# /metrics) and each thread's user and system CPU a post, from
# /proc/<pid>/task/*/stat before and after the run. Everything on 127.0.0.1.
#
#   bench/http_threads.sh [seconds] [connections]     (KAYAK_BIN=... for another binary)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CONNS=${2:-64}
KAYAK=${KAYAK_BIN:-build/kayak}
command -v wrk >/dev/null || { echo "needs wrk: ./scripts/install-deps.sh --bench" >&2; exit 1; }
WORK=$(mktemp -d /tmp/kayak-bench-threads.XXXXXX)
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$WORK/pipelines.yaml" <<CONF
pipelines:
  ingest:
    input: {http: {path: /ingest, max_backlog_bytes: 268435456}}
    outputs: [{file: {path: $WORK/out, max_part_bytes: 1073741824}}]
CONF
printf 'listen: 127.0.0.1:%s\nlog_level: warn\n' "$PORT" > "$WORK/server.yaml"
"$KAYAK" --config "$WORK/pipelines.yaml" --server-config "$WORK/server.yaml" \
  --state-dir "$WORK/state" 2>"$WORK/stderr" &
PID=$!
for _ in $(seq 1 100); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data '{}' "http://127.0.0.1:$PORT/ingest" || true)
  [ "$code" = 202 ] && break
  sleep 0.1
done
[ "$code" = 202 ] || { echo "kayak did not start: $(cat "$WORK/stderr")" >&2; exit 1; }
threads() { for t in /proc/$PID/task/*; do echo "$(basename "$t") $(cat "$t/comm" | tr ' ' _) $(awk '{print $14, $15}' "$t/stat")"; done; }
fsyncs() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^kayak_http_log_fsync_seconds_count/ {print int($2)}'; }
F0=$(fsyncs); threads > "$WORK/before"
OUT=$(wrk -t2 -c"$CONNS" -d"${SECS}s" -s bench/post.lua "http://127.0.0.1:$PORT/ingest")
threads > "$WORK/after"; F1=$(fsyncs)
POSTS=$(echo "$OUT" | grep -o '[0-9]* requests in' | awk '{print $1}')
python3 - "$WORK/before" "$WORK/after" "$POSTS" "$F0" "$F1" "$(getconf CLK_TCK)" <<'PY'
import sys
def read(path):
    return {l.split()[0]: (l.split()[1], int(l.split()[2]), int(l.split()[3])) for l in open(path)}
before, after = read(sys.argv[1]), read(sys.argv[2])
posts, syncs, hz = int(sys.argv[3]), int(sys.argv[5]) - int(sys.argv[4]), int(sys.argv[6])
print(f"{posts} posts, {syncs} fdatasyncs ({posts / max(1, syncs):.1f} posts each)")
total = 0.0
for tid, (name, u, s) in sorted(after.items()):
    bu, bs = before.get(tid, (name, 0, 0))[1:]
    us, ss = (u - bu) / hz * 1e6 / posts, (s - bs) / hz * 1e6 / posts
    total += us + ss
    if us + ss > 0:
        print(f"  thread {tid} ({name}): user {us:.2f} + system {ss:.2f} µs a post")
print(f"  all threads: {total:.2f} µs a post")
PY
