# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

start_redis() {
  if [ -f "$dir/pid" ]; then stop_redis; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port tls_port; port=$(free_port); tls_port=$(free_port)
  # TLS with a throwaway CA (tests/e2e/tls_ca.py): this server on a second
  # port too (a client certificate taken when given: the same data over TLS
  # or not), and two that speak TLS only: one that requires a client
  # certificate, one whose certificate has expired.
  python3 "$servers_dir/../e2e/tls_ca.py" "$dir/tls" || fail "no test CA"
  local tls=(--tls-ca-cert-file "$dir/tls/ca.crt")
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$dir" \
    --daemonize no --tls-port "$tls_port" --tls-cert-file "$dir/tls/server.crt" \
    --tls-key-file "$dir/tls/server.key" "${tls[@]}" --tls-auth-clients optional \
    >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  await redis redis-cli -h 127.0.0.1 -p "$port" ping
  local name tls_env="REDIS_TLS_URL=rediss://localhost:$tls_port"$'\n'
  for name in mtls expired; do
    local p cert=server auth=yes; p=$(free_port)
    [ "$name" = expired ] && cert=expired auth=no
    redis-server --bind 127.0.0.1 --port 0 --tls-port "$p" --save "" --appendonly no \
      --dir "$dir" --dbfilename "$name.rdb" --daemonize no "${tls[@]}" \
      --tls-cert-file "$dir/tls/$cert.crt" --tls-key-file "$dir/tls/$cert.key" \
      --tls-auth-clients "$auth" >"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
    tls_env+="REDIS_${name^^}_URL=rediss://localhost:$p"$'\n'
    # the expired one answers only a client that does not verify it
    await "redis ($name)" redis-cli --tls --insecure --cert "$dir/tls/client.crt" \
      --key "$dir/tls/client.key" -h localhost -p "$p" ping
  done
  { echo "REDIS_URL=redis://127.0.0.1:$port"
    printf '%s' "$tls_env"
    echo "REDIS_TLS_DIR=$dir/tls"; } >"$dir/env"
}

stop_redis() {
  local f
  for f in "$dir"/mtls.pid "$dir"/expired.pid; do
    [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
  done
  stop_pid TERM
}
