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
