// Logging: spdlog to stderr. One place sets the level from the server config.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

#include "kayak/status.h"

namespace kayak {

// Installs kayak's stderr logger once. Call before starting threads that
// log (the engine does); later calls do nothing.
void InitLogging();

// Sets the global log level from "trace|debug|info|warn|error".
Status SetLogLevel(const std::string& level);

}  // namespace kayak

#define KLOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define KLOG_DEBUG(...) spdlog::debug(__VA_ARGS__)
#define KLOG_INFO(...) spdlog::info(__VA_ARGS__)
#define KLOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define KLOG_ERROR(...) spdlog::error(__VA_ARGS__)
