# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

# node-opcua (npm, pinned in tests/servers/npm), the test server of
# tests/servers/opcua-server.js: OPCUA_PORT fixes the port (a test that
# restarts a server on the same address), OPCUA_ARGS adds its options
# (--items N, --secure-only, --trust CERT, ...). OPCUA_SERVER_CERT is the
# server's certificate (PEM), for a client that checks it.
start_opcua() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port here; port=${OPCUA_PORT:-$(free_port)}; here=$servers_dir
  [ -d "$here/npm/node_modules/node-opcua" ] ||
    fail "node-opcua is not installed: run scripts/install-deps.sh"
  # shellcheck disable=SC2086
  NODE_PATH="$here/npm/node_modules" node "$here/opcua-server.js" "$port" "$dir/pki" \
    ${OPCUA_ARGS:-} >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await opcua grep -q OPCUA_READY "$dir/server.log"
  {
    echo "OPCUA_URL=opc.tcp://127.0.0.1:$port/UA/kayak"
    echo "OPCUA_SERVER_CERT=$dir/pki/server.pem"
  } >"$dir/env"
}
