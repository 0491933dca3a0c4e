# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

# Apache Kafka, one broker in KRaft mode (tests/servers/kafka_cluster.py, its jars
# from Maven Central by scripts/install-deps.sh), with its TLS listeners (SSL with
# a client certificate, SASL_SSL, an expired certificate; a throwaway CA).
start_kafka() {
  python3 "$servers_dir/kafka_cluster.py" start "$dir" --tls
}

stop_kafka() { python3 "$servers_dir/kafka_cluster.py" stop "$dir"; }
