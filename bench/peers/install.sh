# shellcheck shell=bash
# The peer engines of bench/peers/run.py, sourced by `scripts/install-deps.sh
# --bench` ($root is the repository): the jars of Kafka Streams and of Apache
# Flink from Maven Central (each pinned by its pom.xml, through ~/.m2), copied
# and the jobs compiled only when that pom or the jobs' source changed since;
# then the Python engines (below).
peer_jars() {  # DIR NAME
  local dir="$1" name="$2" stamp
  stamp=$(cat "$dir/pom.xml" "$dir"/src/main/java/kayak/bench/*.java | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$dir/classes/.kayak-stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "install-deps: the jars of $name from Maven Central into ${dir#"$root"/}/libs"
    rm -rf "$dir/libs" "$dir/classes"
    mvn -q -B -Dstyle.color=never -f "$dir/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$dir/libs" >/dev/null
    javac -nowarn -d "$dir/classes" -cp "$dir/libs/*" "$dir"/src/main/java/kayak/bench/*.java
    echo "$stamp" > "$dir/classes/.kayak-stamp"
  fi
}
peer_jars "$root/bench/peers/kstreams" "Kafka Streams"
peer_jars "$root/bench/peers/flink" "Apache Flink"
# Quix Streams and Bytewax from PyPI, each in a venv of its own (they pin
# different confluent-kafka versions), pinned by its requirements.txt; pip
# only when that file changed since the last install.
peer_venv() {  # DIR NAME
  local dir="$1" name="$2"
  if ! cmp -s "$dir/requirements.txt" "$dir/venv/.kayak-requirements.txt" 2>/dev/null; then
    echo "install-deps: $name from PyPI into ${dir#"$root"/}/venv"
    rm -rf "$dir/venv"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install -q --disable-pip-version-check -r "$dir/requirements.txt"
    cp "$dir/requirements.txt" "$dir/venv/.kayak-requirements.txt"
  fi
}
peer_venv "$root/bench/peers/quix" "Quix Streams"
peer_venv "$root/bench/peers/bytewax" "Bytewax"
# Node-RED from npm for bench/http_ingest.sh, pinned by its package-lock.json;
# npm ci only when that lockfile changed since the last install.
nr_dir="$root/bench/peers/nodered"
if ! cmp -s "$nr_dir/package-lock.json" "$nr_dir/node_modules/.kayak-lock.json" 2>/dev/null; then
  echo "install-deps: Node-RED from npm into bench/peers/nodered/node_modules"
  (cd "$nr_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$nr_dir/package-lock.json" "$nr_dir/node_modules/.kayak-lock.json"
fi
