# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

# nats-server from the Go module proxy (scripts/install-deps.sh builds it into
# tests/servers/go/bin): Debian's 2.9 has no `sync_interval`. JetStream
# fsyncs each acknowledged write (`sync_interval: always`), so what a
# stream acknowledged survives the machine's power loss, as a JetStream
# input's replay counts on (docs/durability.md).
start_nats() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir/js"
  local port mon here; port=$(free_port); mon=$(free_port); here=$servers_dir
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
  # Small servers of their own: three that require TLS, with a throwaway CA
  # (tests/e2e/tls_ca.py): one that verifies nothing of the client, one that
  # requires a client certificate, one whose certificate has expired.
  python3 "$servers_dir/../e2e/tls_ca.py" "$dir/tls" || fail "no test CA"
  local tls='tls { cert_file: "%s/tls/%s.crt", key_file: "%s/tls/%s.key", ca_file: "%s/tls/ca.crt", verify: %s }'
  # shellcheck disable=SC2059
  start_nats_extra tls tls "$(printf "$tls" "$dir" server "$dir" server "$dir" false)"
  # shellcheck disable=SC2059
  start_nats_extra mtls tls "$(printf "$tls" "$dir" server "$dir" server "$dir" true)"
  # shellcheck disable=SC2059
  start_nats_extra expired tls "$(printf "$tls" "$dir" expired "$dir" expired "$dir" false)"
  echo "NATS_TLS_DIR=$dir/tls" >>"$dir/env"
  # Two that require a login: a user and password, a token (a test server's,
  # not secrets).
  start_nats_extra login nats 'authorization { user: kayak, password: "kayak-nats-password" }'
  start_nats_extra token nats 'authorization { token: "kayak-nats-token" }'
  { echo "NATS_LOGIN_PASSWORD=kayak-nats-password"; echo "NATS_TOKEN=kayak-nats-token"; } >>"$dir/env"
  # Two that log in by key (natsauth, from the NATS project's nkeys and jwt
  # libraries, writes the keys into $dir/auth): an nkey user, and operator
  # (JWT) mode with one account, whose users log in with a .creds file.
  [ -x "$here/go/bin/natsauth" ] || fail "natsauth is not built: run scripts/install-deps.sh"
  "$here/go/bin/natsauth" "$dir/auth" || fail "natsauth could not write the test's keys"
  start_nats_extra nkey nats "authorization { users: [ { nkey: $(cat "$dir/auth/user.pub") } ] }"
  start_nats_extra jwt nats "$(cat "$dir/auth/operator.conf")"
  echo "NATS_AUTH_DIR=$dir/auth" >>"$dir/env"
}

# start_nats_extra NAME SCHEME CONFIG: a nats-server of its own on free ports
# with CONFIG (its tls or authorization lines), pid in $dir/NAME.pid, its URL
# as NATS_<NAME>_URL in $dir/env.
start_nats_extra() {
  local name=$1 scheme=$2 extra=$3 tport tmon
  tport=$(free_port); tmon=$(free_port)
  cat >"$dir/$name.conf" <<CONF
host: 127.0.0.1
port: $tport
http: 127.0.0.1:$tmon
$extra
CONF
  "$servers_dir/go/bin/nats-server" -c "$dir/$name.conf" >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  await "nats ($name)" curl -sf "http://127.0.0.1:$tmon/healthz"
  echo "NATS_$(echo "$name" | tr a-z A-Z)_URL=$scheme://127.0.0.1:$tport" >>"$dir/env"
}

stop_nats() {
  local f
  for f in "$dir"/tls.pid "$dir"/mtls.pid "$dir"/expired.pid "$dir"/login.pid "$dir"/token.pid \
    "$dir"/nkey.pid "$dir"/jwt.pid; do
    [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
  done
  stop_pid TERM
}
