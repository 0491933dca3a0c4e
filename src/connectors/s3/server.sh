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

start_s3() { moto_start 1; }
start_s3strict() { moto_start 5242880; }
