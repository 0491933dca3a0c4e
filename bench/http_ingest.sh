#!/usr/bin/env bash
# The http input's ingest rate and latency, next to the machine's ceiling.
#
#   bench/http_ingest.sh [runs] [seconds] [connections]
#
# Three targets, each loaded by wrk with small JSON posts over keep-alive
# connections, `runs` times in turn (default 3 x 10 s, 64 connections):
#   ceiling   nginx, one worker, answering 202 to every POST and doing nothing
#   memory    kayak, http input -> file output, no state directory
#   logged    kayak, the same with --state-dir (each 202 after an fdatasync)
#   logged1   the same with checkpoints every second (the default is 10 s)
#   ceiling_tls, logged_tls   nginx and `logged` over TLS (the server config's
#             `tls`, a certificate from tests/e2e/tls_ca.py; wrk keeps its
#             connections, so this is the cost of encryption, not of handshakes)
#   nodered   Node-RED (bench/peers/nodered, from `install-deps.sh --bench`):
#             http in -> file (append a line) -> 202, the flow its docs would
#             draw; it answers after the write, without an fsync
# Prints one line per run and a table of medians (posts/s, p50, p99, and for
# kayak the CPU time it spent per post: utime + stime from /proc/<pid>/stat
# over the run, divided by the posts wrk completed) and the ratio of each
# kayak target to the ceiling. Everything listens on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-10}
CONNS=${3:-64}
KAYAK=${KAYAK_BIN:-build/kayak}
[ -x "$KAYAK" ] || { echo "build first: ./scripts/build.sh" >&2; exit 1; }
command -v wrk >/dev/null && command -v nginx >/dev/null ||
  { echo "needs wrk and nginx: ./scripts/install-deps.sh --bench" >&2; exit 1; }
WORK=$(mktemp -d /tmp/kayak-bench-http.XXXXXX)
PIDS=()
# TERM, not KILL: nginx's master then stops its worker, which would otherwise
# keep this script's output open.
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# scheme of a target: https when its second argument is set
scheme() { if [ -n "${1:-}" ]; then echo https; else echo http; fi; }
wait_port() {
  for _ in $(seq 1 100); do
    if curl -sk -o /dev/null "$(scheme "${2:-}")://127.0.0.1:$1/"; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; exit 1
}

CA="$WORK/ca"
python3 tests/e2e/tls_ca.py "$CA" >/dev/null

start_nginx() {
  local port=$1 tls=${2:-} dir="$WORK/nginx-$1" listen="127.0.0.1:$1" certs=""
  mkdir -p "$dir"
  if [ -n "$tls" ]; then
    listen="$listen ssl"
    certs="ssl_certificate $CA/server.crt; ssl_certificate_key $CA/server.key;"
  fi
  cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir;
  server {
    listen $listen;
    $certs
    location / { return 202 '{"accepted":1}'; }
  }
}
CONF
  nginx -c "$dir/nginx.conf" -g 'daemon off;' &
  PIDS+=($!)
  wait_port "$port" "$tls"
}

start_kayak() {
  local port=$1 state=$2 interval=${3:-} tls=${4:-} dir="$WORK/kayak-$1"
  mkdir -p "$dir"
  cat > "$dir/pipelines.yaml" <<CONF
pipelines:
  ingest:
    input: {http: {path: /ingest, max_backlog_bytes: 268435456}}
    outputs: [{file: {path: $dir/out, max_part_bytes: 1073741824}}]
CONF
  printf 'listen: 127.0.0.1:%s\nlog_level: warn\n' "$port" > "$dir/server.yaml"
  [ -n "$interval" ] && printf 'checkpoint: {interval_secs: %s}\n' "$interval" >> "$dir/server.yaml"
  [ -n "$tls" ] && printf 'tls: {cert_file: %s, key_file: %s}\n' "$CA/server.crt" \
    "$CA/server.key" >> "$dir/server.yaml"
  local args=(--config "$dir/pipelines.yaml" --server-config "$dir/server.yaml")
  [ -n "$state" ] && args+=(--state-dir "$dir/state")
  "$KAYAK" "${args[@]}" 2>"$dir/stderr" &
  PIDS+=($!)
  LAST_PID=$!
  wait_port "$port" "$tls"
  # the input serves once its pipeline started (503 before)
  for _ in $(seq 1 100); do
    code=$(curl -sk -o /dev/null -w '%{http_code}' -X POST --data '{}' \
      "$(scheme "$tls")://127.0.0.1:$port/ingest")
    [ "$code" = 202 ] && return 0
    sleep 0.1
  done
  echo "kayak did not start: $(cat "$dir/stderr")" >&2; exit 1
}

# CPU ticks (user + system) a process has used so far; 0 without a pid.
cpu_ticks() { if [ -n "$1" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi; }

# wrk's summary -> "posts_per_sec p50_ms p99_ms non2xx cpu_us_per_post" (the
# last -1 for nginx, whose worker is another process)
measure() {
  local port=$1 pid=${2:-} tls=${3:-} out before after
  before=$(cpu_ticks "$pid")
  out=$(wrk -t2 -c"$CONNS" -d"${SECS}s" --latency -s bench/post.lua \
    "$(scheme "$tls")://127.0.0.1:$port/ingest")
  after=$(cpu_ticks "$pid")
  python3 - "$out" "$pid" "$before" "$after" "$(getconf CLK_TCK)" <<'PY'
import re, sys
t = sys.argv[1]
pid, before, after, hz = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def ms(label):
    m = re.search(r"^\s*" + label + r"%\s+([\d.]+)(us|ms|s)\s*$", t, re.M)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", t)
posts = int(re.search(r"(\d+) requests in", t).group(1))
cpu = (after - before) / hz * 1e6 / posts if pid else -1
print(f"{rps:.0f} {ms('50'):.3f} {ms('99'):.3f} {bad.group(1) if bad else 0} {cpu:.2f}")
PY
}

NODERED=bench/peers/nodered
[ -d "$NODERED/node_modules/node-red" ] ||
  { echo "needs Node-RED: ./scripts/install-deps.sh --bench" >&2; exit 1; }
start_nodered() {
  local port=$1 dir="$WORK/nodered-$1"
  mkdir -p "$dir"
  NODERED_PORT=$port NODERED_DIR=$dir NODERED_OUT=$dir/out \
    node "$NODERED/node_modules/node-red/red.js" --settings "$NODERED/settings.js" \
    >"$dir/log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
  # The listener comes before the flow: poll the flow's own path.
  for _ in $(seq 1 300); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      --data '{}' "http://127.0.0.1:$port/ingest" || true)
    [ "$code" = 202 ] && return 0
    sleep 0.1
  done
  echo "Node-RED did not start: $(cat "$dir/log")" >&2; exit 1
}

P_CEIL=$(free_port); start_nginx "$P_CEIL"
P_MEM=$(free_port); start_kayak "$P_MEM" ""; PID_MEM=$LAST_PID
P_LOG=$(free_port); start_kayak "$P_LOG" yes; PID_LOG=$LAST_PID
P_LOG1=$(free_port); start_kayak "$P_LOG1" yes 1; PID_LOG1=$LAST_PID
P_CEIL_TLS=$(free_port); start_nginx "$P_CEIL_TLS" tls
P_LOG_TLS=$(free_port); start_kayak "$P_LOG_TLS" yes "" tls; PID_LOG_TLS=$LAST_PID
P_NR=$(free_port); start_nodered "$P_NR"; PID_NR=$LAST_PID
declare -A R
for run in $(seq 1 "$RUNS"); do
  for t in ceiling memory logged logged1 ceiling_tls logged_tls nodered; do
    tls=""
    case $t in
      ceiling) p=$P_CEIL; pid="" ;; memory) p=$P_MEM; pid=$PID_MEM ;;
      logged) p=$P_LOG; pid=$PID_LOG ;; logged1) p=$P_LOG1; pid=$PID_LOG1 ;;
      ceiling_tls) p=$P_CEIL_TLS; pid=""; tls=yes ;;
      logged_tls) p=$P_LOG_TLS; pid=$PID_LOG_TLS; tls=yes ;;
      nodered) p=$P_NR; pid=$PID_NR ;;
    esac
    r=$(measure "$p" "$pid" "$tls")
    echo "run $run $t: posts/s p50_ms p99_ms non2xx cpu_us_per_post = $r"
    R[$t]+="$r;"
  done
done
peak() { awk '/^VmHWM:/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
python3 - "${R[ceiling]}" "${R[memory]}" "${R[logged]}" "${R[logged1]}" "${R[ceiling_tls]}" \
  "${R[logged_tls]}" "${R[nodered]}" "$CONNS" "$SECS" "$RUNS" \
  "" "$(peak "$PID_MEM")" "$(peak "$PID_LOG")" "$(peak "$PID_LOG1")" "" "$(peak "$PID_LOG_TLS")" \
  "$(peak "$PID_NR")" <<'PY'
import statistics, sys
names = ["ceiling (nginx, 202)", "http input, no state dir",
         "http input, --state-dir (fsynced log, checkpoints every 10 s)",
         "http input, --state-dir (fsynced log, checkpoints every 1 s)",
         "ceiling over TLS (nginx, 202)",
         "http input over TLS, --state-dir (checkpoints every 10 s)",
         "Node-RED: http in -> file -> 202 (no fsync)"]
rows = [[list(map(float, r.split())) for r in col.split(";") if r] for col in sys.argv[1:8]]
conns, secs, runs = sys.argv[8:11]
peaks = sys.argv[11:18]
ceilings = [statistics.median(r[0] for r in rows[i]) for i in (0, 4)]
print(f"\n{runs} runs x {secs} s, {conns} connections, medians (min-max of posts/s):")
print("| target | posts/s | ratio to its ceiling | p50 ms | p99 ms | non-2xx | peak RSS MB | CPU µs/post |")
print("|---|---|---|---|---|---|---|---|")
for i, (name, rs, pk) in enumerate(zip(names, rows, peaks)):
    ceil = ceilings[4 <= i <= 5]  # the TLS rows next to nginx over TLS
    rps = [r[0] for r in rs]
    med = statistics.median(rps)
    print(f"| {name} | {med:,.0f} ({min(rps):,.0f}-{max(rps):,.0f}) | {med / ceil:.2f} | "
          f"{statistics.median(r[1] for r in rs):.2f} | {statistics.median(r[2] for r in rs):.2f} | "
          f"{int(sum(r[3] for r in rs))} | {pk} | "
          f"{'' if rs[0][4] < 0 else format(statistics.median(r[4] for r in rs), '.1f')} |")
PY
