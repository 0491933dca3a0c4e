// The bucket a test S3 server's env file names (tests/servers/servers.sh
// writes `s3/env`: S3_ENDPOINT, S3_BUCKET and the keys, one KEY=VALUE a
// line), addressed path-style as moto needs. For the tests and benchmarks
// that run against that server.
#pragma once

#include <fstream>
#include <map>
#include <string>

#include "connectors/s3/client.h"

namespace kayak::s3 {

// An endpoint with an empty `endpoint` when the file is missing or names
// none.
inline Endpoint EndpointFromEnvFile(const std::string& file) {
  std::map<std::string, std::string> env;
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  Endpoint e;
  e.endpoint = env["S3_ENDPOINT"];
  e.bucket = env["S3_BUCKET"];
  e.path_style = true;
  e.credentials = {env["S3_ACCESS_KEY_ID"], env["S3_SECRET_ACCESS_KEY"], ""};
  return e;
}

}  // namespace kayak::s3
