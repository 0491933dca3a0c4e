#include "common/ndjson.h"

#include <nlohmann/json.hpp>
#include <simdjson.h>

namespace kayak {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

// simdjson checks the common case about nine times faster than nlohmann
// (docs/benchmarks.md); what it refuses is asked of nlohmann, which parses
// the messages later, so that exactly what nlohmann takes is accepted
// (simdjson refuses integers beyond 64 bits and nesting deeper than 1024,
// which nlohmann takes).
bool IsJson(std::string_view text, size_t readable_after) {
  // One parser a thread, reused; its buffers grow to the largest text it
  // checked, so large texts go to nlohmann only.
  constexpr size_t kSimdjsonMax = 64 * 1024;
  if (text.size() <= kSimdjsonMax) {
    thread_local simdjson::dom::parser parser;
    const bool padded = readable_after >= simdjson::SIMDJSON_PADDING;
    if (!parser.parse(text.data(), text.size(), /*realloc_if_needed=*/!padded).error()) {
      return true;
    }
  }
  return nlohmann::json::accept(text);
}

bool NormalizeIngestBody(std::string_view body, std::string* payload, size_t* messages,
                         std::string* error) {
  payload->clear();
  *messages = 0;
  const std::string_view all = Trim(body);
  if (all.empty()) {
    *error = "the body is empty; send one JSON value or NDJSON (one JSON value a line)";
    return false;
  }
  // One JSON value (possibly spread over lines) is one message.
  if (IsJson(all)) {
    if (all.find('\n') == std::string_view::npos) {
      payload->assign(all);
    } else {
      *payload = nlohmann::json::parse(all).dump();
    }
    *messages = 1;
    return true;
  }
  // Otherwise NDJSON: every non-empty line one JSON value.
  payload->reserve(all.size());
  size_t start = 0;
  size_t line_no = 0;
  while (start <= all.size()) {
    size_t nl = all.find('\n', start);
    if (nl == std::string_view::npos) nl = all.size();
    ++line_no;
    const std::string_view line = Trim(all.substr(start, nl - start));
    if (!line.empty()) {
      if (!IsJson(line)) {
        *error = "line " + std::to_string(line_no) +
                 " is not JSON; the body must be one JSON value or NDJSON";
        payload->clear();
        *messages = 0;
        return false;
      }
      if (!payload->empty()) payload->push_back('\n');
      payload->append(line);
      ++*messages;
    }
    start = nl + 1;
  }
  return true;
}

}  // namespace kayak
