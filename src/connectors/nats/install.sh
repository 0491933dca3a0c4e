# shellcheck shell=bash
# What this connector's tests need from a registry, sourced by scripts/install-deps.sh
# (after the Debian packages; $root is the repository).
# nats-server from the Go module proxy, at the version below (Debian's 2.9 lacks
# JetStream's `sync_interval` and the consumer reset the input uses), built once into tests/servers/go/bin.
NATS_SERVER_VERSION=v2.14.10
go_bin="$root/tests/servers/go/bin"
if [ "$(cat "$go_bin/.kayak-nats-server" 2>/dev/null)" != "$NATS_SERVER_VERSION" ]; then
  echo "install-deps: nats-server $NATS_SERVER_VERSION from the Go module proxy into tests/servers/go/bin"
  command -v go >/dev/null 2>&1 || { echo "install-deps: Go is needed to build nats-server" >&2; exit 1; }
  mkdir -p "$go_bin"
  GOBIN="$go_bin" GOFLAGS=-mod=mod go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
  echo "$NATS_SERVER_VERSION" >"$go_bin/.kayak-nats-server"
fi
# natsauth (natsauth/main.go): writes the nkeys, JWTs and .creds files of the
# login tests with the NATS project's own libraries, pinned in natsauth/go.mod
# and go.sum.
natsauth_src="$root/src/connectors/nats/natsauth"
natsauth_stamp=$(cat "$natsauth_src/go.mod" "$natsauth_src/go.sum" "$natsauth_src/main.go" | sha256sum | cut -c1-16)
if [ "$(cat "$go_bin/.kayak-natsauth" 2>/dev/null)" != "$natsauth_stamp" ]; then
  echo "install-deps: natsauth into tests/servers/go/bin"
  (cd "$natsauth_src" && GOBIN="$go_bin" GOFLAGS=-mod=readonly go install .)
  echo "$natsauth_stamp" >"$go_bin/.kayak-natsauth"
fi
