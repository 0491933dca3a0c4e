# shellcheck shell=bash
# The peer engines of bench/peers/run.py, sourced by `scripts/install-deps.sh
# --bench` ($root is the repository): Kafka Streams' jars from Maven Central
# (pinned by bench/peers/kstreams/pom.xml, through ~/.m2), copied and the job
# compiled only when that pom or the job's source changed since.
ks_dir="$root/bench/peers/kstreams"
ks_stamp=$(cat "$ks_dir/pom.xml" "$ks_dir"/src/main/java/kayak/bench/*.java | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ks_dir/classes/.kayak-stamp" 2>/dev/null)" != "$ks_stamp" ]; then
  echo "install-deps: Kafka Streams' jars from Maven Central into bench/peers/kstreams/libs"
  rm -rf "$ks_dir/libs" "$ks_dir/classes"
  mvn -q -B -Dstyle.color=never -f "$ks_dir/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$ks_dir/libs" >/dev/null
  javac -nowarn -d "$ks_dir/classes" -cp "$ks_dir/libs/*" \
    "$ks_dir"/src/main/java/kayak/bench/*.java
  echo "$ks_stamp" > "$ks_dir/classes/.kayak-stamp"
fi
