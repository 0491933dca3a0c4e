# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

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
  # TLS beside plain connections, with a throwaway CA (tests/e2e/tls_ca.py):
  # its files in the data directory (postgres reads its key only if it owns
  # it; expired.* for a test to switch to), and database kayak_cert
  # admitting only a client certificate.
  python3 "$servers_dir/../e2e/tls_ca.py" "$dir/tls" postgres || fail "no test CA"
  local f
  for f in server.crt server.key expired.crt expired.key ca.crt; do
    cp "$dir/tls/$f" "$dir/data/$f"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir/data/$f"; fi
  done
  chmod 600 "$dir/data/server.key" "$dir/data/expired.key"
  { echo "hostssl kayak_cert all 127.0.0.1/32 cert"; cat "$dir/data/pg_hba.conf"; } >"$dir/hba"
  cat "$dir/hba" >"$dir/data/pg_hba.conf"
  # pg_ctl -w returns once the server accepts connections
  "${run[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c ssl=on -c ssl_ca_file=ca.crt" \
    start >/dev/null || { tail -20 "$dir/postgres.log" >&2; fail "postgres did not start"; }
  head -1 "$dir/data/postmaster.pid" >"$dir/pid"
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE kayak" >/dev/null
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE kayak_cert" >/dev/null
  { echo "PG_URL=postgresql://postgres@127.0.0.1:$port/kayak"
    echo "PG_TLS_DIR=$dir/tls"; } >"$dir/env"
}

stop_postgres() { stop_pid INT; }  # SIGINT: postgres's fast shutdown
