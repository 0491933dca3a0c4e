# shellcheck shell=bash
# What this connector's tests need from a registry, sourced by scripts/install-deps.sh
# (after the Debian packages; $root is the repository).
# The Kafka broker's jars, pinned by tests/servers/kafka/pom.xml, copied from
# Maven Central (through ~/.m2, which keeps them between runs) only when that
# pom changed since the last copy.
kafka_dir="$root/tests/servers/kafka"
if ! cmp -s "$kafka_dir/pom.xml" "$kafka_dir/libs/.kayak-pom.xml" 2>/dev/null; then
  echo "install-deps: Kafka's jars from Maven Central into tests/servers/kafka/libs"
  rm -rf "$kafka_dir/libs"
  mvn -q -B -Dstyle.color=never -f "$kafka_dir/pom.xml" dependency:copy-dependencies -DoutputDirectory="$kafka_dir/libs" >/dev/null
  cp "$kafka_dir/pom.xml" "$kafka_dir/libs/.kayak-pom.xml"
fi

