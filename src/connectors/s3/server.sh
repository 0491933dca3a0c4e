# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

# moto's S3 server (PyPI, pinned in tests/servers/python/requirements.txt;
# scripts/install-deps.sh makes its venv): path-style buckets, bucket `kayak`
# made at start; it takes any credentials and checks no signature (the signer
# is tested against AWS's vectors). `s3strict` keeps every rule of S3's
# multipart uploads, the 5 MiB minimum of a part but the last among them; `s3`
# lowers that minimum to one byte, so that tests can cut objects of kilobytes
# into parts, and keeps the rest (AbortMultipartUpload, ListMultipartUploads,
# conditional writes).
moto_start() {
  local min_part=$1
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir"
  local port here; port=$(free_port); here=$servers_dir
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

# `s3` has a second moto beside it that speaks https only, with a throwaway
# CA (tests/e2e/tls_ca.py): a server of its own, with its own bucket kayak.
start_s3() {
  [ -f "$dir/tls.pid" ] && kill -TERM "$(cat "$dir/tls.pid")" 2>/dev/null
  moto_start 1
  python3 "$servers_dir/../e2e/tls_ca.py" "$dir/tls" || fail "no test CA"
  local port; port=$(free_port)
  S3_UPLOAD_PART_MIN_SIZE=1 "$servers_dir/python/venv/bin/moto_server" -H 127.0.0.1 -p "$port" \
    -c "$dir/tls/server.crt" -k "$dir/tls/server.key" >"$dir/tls.log" 2>&1 &
  echo $! >"$dir/tls.pid"
  await "moto (https)" curl -s -o /dev/null --cacert "$dir/tls/ca.crt" "https://localhost:$port/"
  curl -sSf -o /dev/null --cacert "$dir/tls/ca.crt" -X PUT "https://localhost:$port/kayak" ||
    fail "moto (https): no bucket kayak"
  { echo "S3_TLS_ENDPOINT=https://localhost:$port"; echo "S3_TLS_DIR=$dir/tls"; } >>"$dir/env"
}

stop_s3() {
  [ -f "$dir/tls.pid" ] && kill -TERM "$(cat "$dir/tls.pid")" 2>/dev/null
  stop_pid TERM
}
start_s3strict() { moto_start 5242880; }
