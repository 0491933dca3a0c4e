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
  # pg_ctl -w returns once the server accepts connections
  "${run[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null || { tail -20 "$dir/postgres.log" >&2; fail "postgres did not start"; }
  head -1 "$dir/data/postmaster.pid" >"$dir/pid"
  psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE kayak" >/dev/null
  echo "PG_URL=postgresql://postgres@127.0.0.1:$port/kayak" >"$dir/env"
}

stop_postgres() { stop_pid INT; }  # SIGINT: postgres's fast shutdown
