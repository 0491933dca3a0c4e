#!/usr/bin/env bash
# install-deps.sh: install what kayak needs to build and test: Debian's packages
# (below, and each connector's src/connectors/*/packages), the npm test servers
# and browser client (node-opcua, playwright-core), and what each connector's
# tests take from a registry (src/connectors/*/install.sh).
# Idempotent and fast when everything is present (no apt-get update then).
# Run as root (or with sudo) on Debian 12.
set -euo pipefail

# Why each package is here: docs/dependencies.md
PACKAGES=(
  g++ cmake ninja-build pkg-config make
  libyaml-cpp-dev        # config parsing with line/column marks
  nlohmann-json3-dev     # JSON values for messages and the API
  libsimdjson-dev        # fast validation of posted JSON on the listener's thread
  libabsl-dev            # Abseil's node_hash_map: the keyed state of buckets (fewer bytes a key, faster restore)
  libboost-dev           # Boost.Asio + Boost.Beast: the HTTP listener
  liburing-dev           # io_uring: the listener writes a batch of answers in one system call
  libspdlog-dev libfmt-dev
  libjemalloc-dev        # the server's allocator (many small, cross-thread allocations)
  liblua5.4-dev          # the lua transform
  libssl-dev             # SHA-256 and HMAC for the s3 output's SigV4 signer
  libgtest-dev libgmock-dev
  libbenchmark-dev       # Google Benchmark: the micro benchmarks in bench/micro
  clang libfuzzer-14-dev libclang-rt-14-dev # the fuzz targets (libFuzzer and its ASan/UBSan runtimes for clang)
  python3 curl procps    # end-to-end tests drive the real binary
  openssl                # the TLS tests' throwaway CA (tests/e2e/tls_ca.py)
  iproute2               # `ss`: a test waits until the listener's sockets to slow readers are full
  prometheus             # promtool: a test lints /metrics of a live server with it
  chromium               # the dashboard's browser tests (driven by playwright-core from npm)
)

# Each connector's own packages (src/connectors/*/packages).
root="$(cd "$(dirname "$0")/.." && pwd)"
for list in "$root"/src/connectors/*/packages; do
  while read -r -a words; do PACKAGES+=("${words[@]}"); done < <(sed 's/#.*//' "$list")
done

# `install-deps.sh --bench` adds what bench/ compares kayak with.
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(
    wrk                  # the HTTP load generator of the ingest benchmark
    nginx-light          # the ingest benchmark's ceiling: a server that answers 202 and nothing else
    kcat                 # the kafka benchmark's ceiling: kcat -C | kcat -P
    jq                   # what a user runs instead for filter + map over NDJSON (file workload)
    miller               # the same with mlr
    librocksdb-dev       # bench/state_backends.cc: kayak's bucket against RocksDB (docs/decisions/0004)
  )
fi

# Node.js and npm run the npm test servers (node-opcua) and the browser tests; the machine's own when it
# has them, else Debian's.
command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
  else
    SUDO=
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -o DPkg::Lock::Timeout=600 -qq
  $SUDO apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
fi

# The npm test servers and the browser test client, pinned by tests/servers/npm/package-lock.json; npm ci
# only when that lockfile changed since the last install.
npm_dir="$root/tests/servers/npm"
if ! cmp -s "$npm_dir/package-lock.json" "$npm_dir/node_modules/.kayak-lock.json" 2>/dev/null; then
  echo "install-deps: npm ci in tests/servers/npm"
  (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$npm_dir/package-lock.json" "$npm_dir/node_modules/.kayak-lock.json"
fi

# What each connector's tests need from a registry (src/connectors/*/install.sh:
# the Kafka broker from Maven Central, moto from PyPI, nats-server from the Go
# module proxy).
for recipe in "$root"/src/connectors/*/install.sh; do
  # shellcheck source=/dev/null
  . "$recipe"
done
# With --bench, the peer engines bench/peers/run.py runs beside kayak (Kafka
# Streams from Maven Central), after the broker they read from.
if [ "${1:-}" = "--bench" ]; then
  # shellcheck source=/dev/null
  . "$root/bench/peers/install.sh"
fi
