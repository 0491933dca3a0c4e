#include "common/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <memory>

#include "common/redact.h"

namespace kayak {

namespace {

// The message of a log line with its control characters escaped (\n, \r,
// \xHH): text from outside (a script's error, a key, a server's answer)
// cannot start a line of its own that reads as the server's.
class EscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    // No secret reaches the log: a library's error can quote one.
    const std::string text = Redact(std::string_view(msg.payload.data(), msg.payload.size()));
    const char* p = text.data();
    const char* end = p + text.size();
    auto control = [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return (u < 0x20 && c != '\t') || u == 0x7f;
    };
    while (p < end) {
      const char* run = std::find_if(p, end, control);
      dest.append(p, run);
      if (run == end) break;
      char esc[5] = {'\\', 'x', 0, 0, 0};
      if (*run == '\n') {
        dest.append(std::string_view("\\n"));
      } else if (*run == '\r') {
        dest.append(std::string_view("\\r"));
      } else {
        static const char kHex[] = "0123456789abcdef";
        esc[2] = kHex[static_cast<unsigned char>(*run) >> 4];
        esc[3] = kHex[static_cast<unsigned char>(*run) & 15];
        dest.append(esc, esc + 4);
      }
      p = run + 1;
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessage>();
  }
};

}  // namespace

void InitLogging() {
  static const bool init = [] {
    auto logger = spdlog::stderr_logger_mt("kayak");
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<EscapedMessage>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %*");
    logger->set_formatter(std::move(formatter));
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
