#!/usr/bin/env bash
# servers.sh: the real database servers the tests need, started once per test
# run on loopback ports and stopped by PID (CTest fixtures, tests/CMakeLists.txt).
#
#   servers.sh start|stop postgres|clickhouse|nats|redis|mosquitto|s3|s3strict|opcua|kafka DIR
#
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

start_clickhouse() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir/data" "$dir/log"
  local http tcp; http=$(free_port); tcp=$(free_port)
  cat >"$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/error.log</errorlog>
    <size>100M</size><count>2</count></logger>
  <http_port>$http</http_port>
  <tcp_port>$tcp</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <max_connections>256</max_connections>
  <keep_alive_timeout>10</keep_alive_timeout>
  <max_concurrent_queries>100</max_concurrent_queries>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <mark_cache_size>67108864</mark_cache_size>
  <path>$dir/data/</path>
  <tmp_path>$dir/data/tmp/</tmp_path>
  <user_files_path>$dir/data/user_files/</user_files_path>
  <format_schema_path>$dir/data/format_schemas/</format_schema_path>
  <users_config>$dir/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
</yandex>
XML
  cat >"$dir/users.xml" <<'XML'
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default>
    <kit0><password>pw0</password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota><!--kit0-rights--><!--/kit0-rights--></kit0>
    <kit1><password>pw1</password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota></kit1></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
XML
  /usr/sbin/clickhouse-server --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$http/ping" >/dev/null 2>&1 && break
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || { tail -20 "$dir/log/"*.log >&2; fail "clickhouse exited"; }
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$http/ping" >/dev/null || fail "clickhouse did not answer in 60 s"
  echo "CLICKHOUSE_URL=http://127.0.0.1:$http" >"$dir/env"
  echo "CLICKHOUSE_TCP_PORT=$tcp" >>"$dir/env"
}

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

# nats-server from the Go module proxy (scripts/install-deps.sh builds it into
# tests/servers/go/bin): Debian's 2.9 has no `sync_interval`. JetStream
# fsyncs each acknowledged write (`sync_interval: always`), so what a
# stream acknowledged survives the machine's power loss, as a JetStream
# input's replay counts on (docs/durability.md).
start_nats() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir/js"
  local port mon here; port=$(free_port); mon=$(free_port); here=$(cd "$(dirname "$0")" && pwd)
  [ -x "$here/go/bin/nats-server" ] || fail "nats-server is not built: run scripts/install-deps.sh"
  cat >"$dir/nats.conf" <<CONF
host: 127.0.0.1
port: $port
http: 127.0.0.1:$mon
jetstream { store_dir: "$dir/js", sync_interval: always }
CONF
  "$here/go/bin/nats-server" -c "$dir/nats.conf" >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await nats curl -sf "http://127.0.0.1:$mon/healthz?js-enabled-only=true"
  { echo "NATS_URL=nats://127.0.0.1:$port"; echo "NATS_MONITOR_URL=http://127.0.0.1:$mon"; } >"$dir/env"
}

start_redis() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port; port=$(free_port)
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$dir" \
    --daemonize no >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await redis redis-cli -h 127.0.0.1 -p "$port" ping
  echo "REDIS_URL=redis://127.0.0.1:$port" >"$dir/env"
}

start_mosquitto() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port; port=$(free_port)
  # As root mosquitto drops to its own user: it logs to stderr, never to a file of ours.
  # The queue limits are mosquitto's defaults unless the caller (the benchmark) says.
  cat >"$dir/mosquitto.conf" <<CONF
listener $port 127.0.0.1
allow_anonymous true
persistence false
log_dest stderr
max_queued_messages ${MOSQUITTO_MAX_QUEUED:-1000}
max_inflight_messages ${MOSQUITTO_MAX_INFLIGHT:-20}
queue_qos0_messages ${MOSQUITTO_QUEUE_QOS0:-false}
CONF
  mosquitto -c "$dir/mosquitto.conf" >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await mosquitto mosquitto_pub -h 127.0.0.1 -p "$port" -t kayak/health -m up
  echo "MQTT_URL=mqtt://127.0.0.1:$port" >"$dir/env"
}

# moto's S3 server (PyPI, pinned in tests/servers/python/requirements.txt;
# scripts/install-deps.sh makes its venv): path-style buckets, bucket `kayak`
# made at start; it takes any credentials and checks no signature (the signer
# is tested against AWS's vectors). `s3strict` keeps every rule of S3's
# multipart uploads, the 5 MiB minimum of a part but the last among them; `s3`
# lowers that minimum to one byte, so that tests can cut objects of kilobytes
# into parts, and keeps the rest (AbortMultipartUpload, ListMultipartUploads,
# conditional writes).
start_s3() {
  local min_part=$1
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port here; port=$(free_port); here=$(cd "$(dirname "$0")" && pwd)
  [ -x "$here/python/venv/bin/moto_server" ] ||
    fail "moto is not installed: run scripts/install-deps.sh"
  S3_UPLOAD_PART_MIN_SIZE=$min_part "$here/python/venv/bin/moto_server" -H 127.0.0.1 -p "$port" \
    >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await moto curl -s -o /dev/null "http://127.0.0.1:$port/"
  curl -sSf -o /dev/null -X PUT "http://127.0.0.1:$port/kayak" || fail "moto: no bucket kayak"
  { echo "S3_ENDPOINT=http://127.0.0.1:$port"; echo "S3_BUCKET=kayak"
    echo "S3_ACCESS_KEY_ID=kayak-test"; echo "S3_SECRET_ACCESS_KEY=kayak-test-secret"
    echo "S3_MIN_PART_BYTES=$min_part"; } >"$dir/env"
}

# node-opcua (npm, pinned in tests/servers/npm), the test server of
# tests/servers/opcua-server.js: OPCUA_PORT fixes the port (a test that
# restarts a server on the same address), OPCUA_ARGS adds its options
# (--items N, --secure-only).
start_opcua() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port here; port=${OPCUA_PORT:-$(free_port)}; here=$(cd "$(dirname "$0")" && pwd)
  [ -d "$here/npm/node_modules/node-opcua" ] ||
    fail "node-opcua is not installed: run scripts/install-deps.sh"
  # shellcheck disable=SC2086
  NODE_PATH="$here/npm/node_modules" node "$here/opcua-server.js" "$port" "$dir/pki" \
    ${OPCUA_ARGS:-} >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await opcua grep -q OPCUA_READY "$dir/server.log"
  echo "OPCUA_URL=opc.tcp://127.0.0.1:$port/UA/kayak" >"$dir/env"
}

# Apache Kafka, one broker in KRaft mode (tests/servers/kafka_cluster.py, its jars
# from Maven Central by scripts/install-deps.sh).
start_kafka() {
  python3 "$(cd "$(dirname "$0")" && pwd)/kafka_cluster.py" start "$dir"
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
  start:clickhouse) start_clickhouse ;;
  stop:clickhouse) stop_pid TERM ;;
  start:nats) start_nats ;;
  start:redis) start_redis ;;
  start:mosquitto) start_mosquitto ;;
  start:s3) start_s3 1 ;;
  start:s3strict) start_s3 5242880 ;;
  start:opcua) start_opcua ;;
  start:kafka) start_kafka ;;
  stop:kafka) python3 "$(cd "$(dirname "$0")" && pwd)/kafka_cluster.py" stop "$dir" ;;
  stop:nats|stop:redis|stop:mosquitto|stop:s3|stop:s3strict|stop:opcua) stop_pid TERM ;;
  *) fail "usage: servers.sh start|stop postgres|clickhouse|nats|redis|mosquitto|s3|s3strict|opcua|kafka DIR" ;;
esac
