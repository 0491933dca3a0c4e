# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

start_mosquitto() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port; port=$(free_port)
  # TLS listeners beside the plain one, with a throwaway CA (tests/e2e/tls_ca.py):
  # one that verifies nothing of the client, one that requires a client
  # certificate, one whose certificate has expired.
  local tls_port mtls_port expired_port
  tls_port=$(free_port); mtls_port=$(free_port); expired_port=$(free_port)
  python3 "$servers_dir/../e2e/tls_ca.py" "$dir/tls" || fail "no test CA"
  # As root mosquitto drops to its own user unless told `user root`: it stays
  # root so that it reads the CA's files wherever the run keeps them (a
  # benchmark's private temporary directory); it logs to stderr.
  local user=""
  if [ "$(id -u)" = 0 ]; then user="user root"; fi
  # The queue limits are mosquitto's defaults unless the caller (the benchmark) says.
  cat >"$dir/mosquitto.conf" <<CONF
$user
listener $port 127.0.0.1
allow_anonymous true
persistence false
log_dest stderr
max_queued_messages ${MOSQUITTO_MAX_QUEUED:-1000}
max_inflight_messages ${MOSQUITTO_MAX_INFLIGHT:-20}
queue_qos0_messages ${MOSQUITTO_QUEUE_QOS0:-false}
listener $tls_port 127.0.0.1
cafile $dir/tls/ca.crt
certfile $dir/tls/server.crt
keyfile $dir/tls/server.key
listener $mtls_port 127.0.0.1
cafile $dir/tls/ca.crt
certfile $dir/tls/server.crt
keyfile $dir/tls/server.key
require_certificate true
listener $expired_port 127.0.0.1
cafile $dir/tls/ca.crt
certfile $dir/tls/expired.crt
keyfile $dir/tls/expired.key
CONF
  mosquitto -c "$dir/mosquitto.conf" >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await mosquitto mosquitto_pub -h 127.0.0.1 -p "$port" -t kayak/health -m up
  { echo "MQTT_URL=mqtt://127.0.0.1:$port"
    echo "MQTT_TLS_URL=mqtts://127.0.0.1:$tls_port"
    echo "MQTT_MTLS_URL=mqtts://127.0.0.1:$mtls_port"
    echo "MQTT_EXPIRED_URL=mqtts://127.0.0.1:$expired_port"
    echo "MQTT_TLS_DIR=$dir/tls"; } >"$dir/env"
}
