// libFuzzer target over what a post to an http input goes through before it
// is logged: Beast's request parser with the listener's limits, then the
// body rules (one JSON value or NDJSON). Nothing may crash, hang or leak;
// an accepted body must come out as one valid JSON value per line.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/ndjson.h"

namespace bhttp = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // The raw bytes as a body.
  std::string payload, error;
  size_t n = 0;
  if (kayak::NormalizeIngestBody(input, &payload, &n, &error)) {
    size_t lines = 0, start = 0;
    while (start <= payload.size()) {
      size_t nl = payload.find('\n', start);
      if (nl == std::string::npos) nl = payload.size();
      if (!nlohmann::json::accept(std::string_view(payload).substr(start, nl - start))) abort();
      ++lines;
      start = nl + 1;
    }
    if (lines != n) abort();
  } else if (error.empty()) {
    abort();  // a refusal always says why
  }
  // What nlohmann (which parses messages later) takes as one value is one
  // message, within the depth limit: the fast check in front of it refuses
  // nothing else it takes. Past the limit, nothing is taken.
  const bool within = kayak::JsonDepthWithin(input);
  if (nlohmann::json::accept(input) && within &&
      !(kayak::NormalizeIngestBody(input, &payload, &n, &error) && n == 1)) {
    abort();
  }
  if (!within && input.find('\n') == std::string_view::npos &&
      kayak::NormalizeIngestBody(input, &payload, &n, &error)) {
    abort();  // one line nested past the limit is refused
  }
  // The bytes as a request on the wire.
  bhttp::request_parser<bhttp::string_body> parser;
  parser.body_limit(1 << 16);
  parser.header_limit(16 * 1024);
  boost::beast::error_code ec;
  size_t used = parser.put(boost::asio::buffer(data, size), ec);
  (void)used;
  if (!ec && parser.is_done()) {
    const auto& req = parser.get();
    (void)req[bhttp::field::authorization];
    (void)kayak::NormalizeIngestBody(req.body(), &payload, &n, &error);
  }
  return 0;
}
