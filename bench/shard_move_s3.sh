#!/usr/bin/env bash
# Moving a cluster's shard of `keys` keys through an S3 store (bench/shard_move.cc
# with --s3), next to curl, a plain S3 client, putting and getting an object
# of the same size on the same server in the same run. The server is the
# test suite's (moto on 127.0.0.1), started here and stopped at the end.
#
#   bench/shard_move_s3.sh [keys] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${1:-1000000}
ROUNDS=${2:-3}
WORK=$(mktemp -d /tmp/kayak-bench-shard-s3.XXXXXX)
cleanup() { tests/servers/servers.sh stop s3 "$WORK/s3" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
tests/servers/servers.sh start s3 "$WORK/s3" >/dev/null
build/tests/shard_move --keys "$KEYS" --partitions 1 --rounds "$ROUNDS" --s3 "$WORK/s3/env" \
  2>/dev/null | tee "$WORK/out"
# The slice's size, as shard_move printed it, in bytes.
MB=$(sed -n 's/.*(\([0-9.]*\) MB).*/\1/p' "$WORK/out")
BYTES=$(python3 -c "print(int(float('$MB') * 1e6))")
head -c "$BYTES" /dev/zero > "$WORK/slice"
# shellcheck disable=SC1091
. "$WORK/s3/env"
put=() get=()
for i in $(seq "$ROUNDS"); do
  url="$S3_ENDPOINT/$S3_BUCKET/curl-slice-$i"
  put+=("$(curl -sf -o /dev/null -w '%{time_total}' --aws-sigv4 "aws:amz:us-east-1:s3" \
           --user "$S3_ACCESS_KEY_ID:$S3_SECRET_ACCESS_KEY" -T "$WORK/slice" "$url")")
  get+=("$(curl -sf -o /dev/null -w '%{time_total}' --aws-sigv4 "aws:amz:us-east-1:s3" \
           --user "$S3_ACCESS_KEY_ID:$S3_SECRET_ACCESS_KEY" "$url")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '| curl: one PUT of the slice'"'"'s bytes | %.3f |\n' "$(median "${put[@]}")"
printf '| curl: one GET of the slice'"'"'s bytes | %.3f |\n' "$(median "${get[@]}")"
