#!/usr/bin/env bash
# servers.sh: the real database servers the tests need, started once per test
# run on loopback ports and stopped by PID (CTest fixtures, tests/CMakeLists.txt).
#
#   servers.sh start|stop postgres DIR
#
# `start` picks a free loopback port and writes the address to DIR/env
# (PG_URL=...), which tests/e2e/servers.py reads. Every server binds
# 127.0.0.1 only; its data lives under DIR and is removed by `stop`.
set -euo pipefail
what=$1 name=$2 dir=$3
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

fail() { echo "servers.sh: $*" >&2; exit 1; }

start_postgres() {
  if [ -f "$dir/pid" ]; then stop_pid INT; fi  # a server left by an interrupted run
  rm -rf "$dir"; mkdir -p "$dir"
  local port; port=$(free_port)
  local run=()
  # initdb and postgres refuse to run as root: as root, run them as `postgres`
  if [ "$(id -u)" = 0 ]; then
    chown postgres:postgres "$dir"; run=(runuser -u postgres --)
    "${run[@]}" test -x "$dir" ||
      fail "the postgres user cannot reach $dir: every directory above it must be searchable"
  fi
  "${run[@]}" "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale \
    --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; fail "initdb failed"; }
  # pg_ctl -w returns once the server accepts connections
  "${run[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null || { tail -20 "$dir/postgres.log" >&2; fail "postgres did not start"; }
  head -1 "$dir/data/postmaster.pid" >"$dir/pid"
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE kayak" >/dev/null
  echo "PG_URL=postgresql://postgres@127.0.0.1:$port/kayak" >"$dir/env"
}

stop_pid() {  # SIGNAL: the server's own clean stop; then wait for the PID to go
  [ -f "$dir/pid" ] || return 0
  local pid; pid=$(cat "$dir/pid")
  kill "-$1" "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

case "$what:$name" in
  start:postgres) start_postgres ;;
  stop:postgres) stop_pid INT ;;   # SIGINT: postgres's fast shutdown
  *) fail "usage: servers.sh start|stop postgres DIR" ;;
esac
