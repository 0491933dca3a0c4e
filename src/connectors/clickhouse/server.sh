# shellcheck shell=bash
# The test server of this connector, for tests/servers/servers.sh (which
# sources every src/connectors/*/server.sh): start_<name> starts server <name>
# in "$dir" on free loopback ports and writes its address to "$dir/env";
# stop_<name>, where there is one, stops it (otherwise servers.sh sends TERM
# to "$dir/pid"). Helpers from servers.sh: free_port, fail, await, stop_pid,
# $servers_dir (tests/servers).

start_clickhouse() {
  if [ -f "$dir/pid" ]; then stop_pid TERM; fi
  rm -rf "$dir"; mkdir -p "$dir/data" "$dir/log"
  local http tcp https; http=$(free_port); tcp=$(free_port); https=$(free_port)
  # An https port beside the plain one, with a throwaway CA (tests/e2e/tls_ca.py).
  python3 "$servers_dir/../e2e/tls_ca.py" "$dir/tls" || fail "no test CA"
  cat >"$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/error.log</errorlog>
    <size>100M</size><count>2</count></logger>
  <http_port>$http</http_port>
  <https_port>$https</https_port>
  <openSSL><server><certificateFile>$dir/tls/server.crt</certificateFile>
    <privateKeyFile>$dir/tls/server.key</privateKeyFile><verificationMode>none</verificationMode>
    <loadDefaultCAFile>false</loadDefaultCAFile><cacheSessions>true</cacheSessions>
    <disableProtocols>sslv2,sslv3</disableProtocols><preferServerCiphers>true</preferServerCiphers>
  </server></openSSL>
  <tcp_port>$tcp</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <max_connections>256</max_connections>
  <keep_alive_timeout>10</keep_alive_timeout>
  <max_concurrent_queries>100</max_concurrent_queries>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <mark_cache_size>67108864</mark_cache_size>
  <path>$dir/data/</path>
  <tmp_path>$dir/data/tmp/</tmp_path>
  <user_files_path>$dir/data/user_files/</user_files_path>
  <format_schema_path>$dir/data/format_schemas/</format_schema_path>
  <users_config>$dir/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
</yandex>
XML
  cat >"$dir/users.xml" <<'XML'
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default>
    <kit0><password>pw0</password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota><!--kit0-rights--><!--/kit0-rights--></kit0>
    <kit1><password>pw1</password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota></kit1></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
XML
  /usr/sbin/clickhouse-server --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$http/ping" >/dev/null 2>&1 && break
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || { tail -20 "$dir/log/"*.log >&2; fail "clickhouse exited"; }
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$http/ping" >/dev/null || fail "clickhouse did not answer in 60 s"
  echo "CLICKHOUSE_URL=http://127.0.0.1:$http" >"$dir/env"
  echo "CLICKHOUSE_HTTPS_URL=https://127.0.0.1:$https" >>"$dir/env"
  echo "CLICKHOUSE_TLS_DIR=$dir/tls" >>"$dir/env"
  echo "CLICKHOUSE_TCP_PORT=$tcp" >>"$dir/env"
}
