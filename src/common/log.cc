#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace kayak {

void InitLogging() {
  static const bool init = [] {
    auto logger = spdlog::stderr_logger_mt("kayak");
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    spdlog::set_default_logger(logger);
    return true;
  }();
  (void)init;
}

Status SetLogLevel(const std::string& level) {
  InitLogging();
  spdlog::level::level_enum lvl;
  if (level == "trace") {
    lvl = spdlog::level::trace;
  } else if (level == "debug") {
    lvl = spdlog::level::debug;
  } else if (level == "info") {
    lvl = spdlog::level::info;
  } else if (level == "warn") {
    lvl = spdlog::level::warn;
  } else if (level == "error") {
    lvl = spdlog::level::err;
  } else {
    return Status::Invalid("log_level must be one of trace, debug, info, warn, error; got '" +
                           level + "'");
  }
  spdlog::set_level(lvl);
  return Status::Ok();
}

}  // namespace kayak
