#!/usr/bin/env bash
# servers.sh: the real database servers the tests need, started once per test
# run on loopback ports and stopped by PID (CTest fixtures, tests/CMakeLists.txt).
#
#   servers.sh start|stop SERVER DIR
#
# SERVER is one a connector's folder has a recipe for (src/connectors/*/server.sh:
# postgres, clickhouse, nats, redis, mosquitto, s3, s3strict, opcua, kafka).
# `start` picks free loopback ports and writes the address to DIR/env
# (PG_URL=..., CLICKHOUSE_URL=..., NATS_URL=..., REDIS_URL=..., MQTT_URL=...,
# OPCUA_URL=..., KAFKA_BROKERS=...), which
# tests/e2e/servers.py reads. Every server binds
# 127.0.0.1 only; its data lives under DIR and is removed by `stop`.
set -euo pipefail
what=$1 name=$2 dir=$3
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

fail() { echo "servers.sh: $*" >&2; exit 1; }

# Waits up to 30 s for `check` to succeed while the server's PID lives.
await() {
  local what=$1; shift
  for _ in $(seq 1 300); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || { tail -20 "$dir/server.log" >&2; fail "$what exited"; }
    sleep 0.1
  done
  fail "$what did not answer in 30 s"
}

stop_pid() {  # SIGNAL: the server's own clean stop; then wait for the PID to go
  [ -f "$dir/pid" ] || return 0
  local pid; pid=$(cat "$dir/pid")
  kill "-$1" "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

servers_dir=$(cd "$(dirname "$0")" && pwd)
# Each connector's server recipe lives in its folder.
for recipe in "$servers_dir"/../../src/connectors/*/server.sh; do
  # shellcheck source=/dev/null
  . "$recipe"
done

case "$what" in
  start) declare -F "start_$name" >/dev/null || fail "no recipe for server $name"; "start_$name" ;;
  stop) if declare -F "stop_$name" >/dev/null; then "stop_$name"; else stop_pid TERM; fi ;;
  *) fail "usage: servers.sh start|stop SERVER DIR (the servers: start_<name> in src/connectors/*/server.sh)" ;;
esac
