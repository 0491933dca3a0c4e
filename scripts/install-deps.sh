#!/usr/bin/env bash
# install-deps.sh: install what kayak needs to build and test: Debian's packages,
# and the test servers from npm (node-opcua), PyPI (moto) and Maven Central (Kafka).
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
  librdkafka-dev         # the kafka input and output (and tests' mock broker)
  libpq-dev              # the postgres input and output
  postgresql-15 postgresql-client-15  # the real server the postgres tests and benchmark start
  clickhouse-server clickhouse-client # the same for clickhouse (its connector speaks HTTP)
  libnats-dev            # the nats input and output (cnats: core and JetStream)
  libhiredis-dev         # the redis input and output
  libmosquitto-dev       # the mqtt input and output
  libssl-dev             # SHA-256 and HMAC for the s3 output's SigV4 signer
  libcurl4-openssl-dev   # the s3 output's HTTP(S) client
  zlib1g-dev libzstd-dev # the s3 output's gzip and zstd compression
  redis-server redis-tools mosquitto mosquitto-clients  # their real servers, for tests (nats-server: below)
  libgtest-dev libgmock-dev
  libbenchmark-dev       # Google Benchmark: the micro benchmarks in bench/micro
  clang libfuzzer-14-dev libclang-rt-14-dev # the fuzz targets (libFuzzer and its ASan/UBSan runtimes for clang)
  python3 curl procps    # end-to-end tests drive the real binary
  python3-venv           # the venv of the Python test servers (moto)
  iproute2               # `ss`: a test waits until the listener's sockets to slow readers are full
  zstd                   # the s3 tests read zstd objects back with its command line
  prometheus             # promtool: a test lints /metrics of a live server with it
  chromium               # the dashboard's browser tests (driven by playwright-core from npm)
  openjdk-17-jre-headless maven  # the real Kafka broker of the tests (jars from Maven Central)
)

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
npm_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/servers/npm"
if ! cmp -s "$npm_dir/package-lock.json" "$npm_dir/node_modules/.kayak-lock.json" 2>/dev/null; then
  echo "install-deps: npm ci in tests/servers/npm"
  (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$npm_dir/package-lock.json" "$npm_dir/node_modules/.kayak-lock.json"
fi

# The Kafka broker's jars, pinned by tests/servers/kafka/pom.xml, copied from
# Maven Central (through ~/.m2, which keeps them between runs) only when that
# pom changed since the last copy.
kafka_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/servers/kafka"
if ! cmp -s "$kafka_dir/pom.xml" "$kafka_dir/libs/.kayak-pom.xml" 2>/dev/null; then
  echo "install-deps: Kafka's jars from Maven Central into tests/servers/kafka/libs"
  rm -rf "$kafka_dir/libs"
  mvn -q -B -Dstyle.color=never -f "$kafka_dir/pom.xml" dependency:copy-dependencies -DoutputDirectory="$kafka_dir/libs" >/dev/null
  cp "$kafka_dir/pom.xml" "$kafka_dir/libs/.kayak-pom.xml"
fi

# moto's S3 server, in a venv of its own, pinned by tests/servers/python/requirements.txt;
# pip only when that file changed since the last install.
py_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/servers/python"
if ! cmp -s "$py_dir/requirements.txt" "$py_dir/venv/.kayak-requirements.txt" 2>/dev/null; then
  echo "install-deps: moto from PyPI into tests/servers/python/venv"
  rm -rf "$py_dir/venv"
  python3 -m venv "$py_dir/venv"
  "$py_dir/venv/bin/pip" install -q --disable-pip-version-check -r "$py_dir/requirements.txt"
  cp "$py_dir/requirements.txt" "$py_dir/venv/.kayak-requirements.txt"
fi

# nats-server from the Go module proxy, at the version below (Debian's 2.9 lacks
# JetStream's `sync_interval` and the consumer reset the input uses), built once into tests/servers/go/bin.
NATS_SERVER_VERSION=v2.14.10
go_bin="$(cd "$(dirname "$0")/.." && pwd)/tests/servers/go/bin"
if [ "$(cat "$go_bin/.kayak-nats-server" 2>/dev/null)" != "$NATS_SERVER_VERSION" ]; then
  echo "install-deps: nats-server $NATS_SERVER_VERSION from the Go module proxy into tests/servers/go/bin"
  command -v go >/dev/null 2>&1 || { echo "install-deps: Go is needed to build nats-server" >&2; exit 1; }
  mkdir -p "$go_bin"
  GOBIN="$go_bin" GOFLAGS=-mod=mod go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
  echo "$NATS_SERVER_VERSION" >"$go_bin/.kayak-nats-server"
fi
