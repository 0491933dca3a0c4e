#include "common/ndjson.h"

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "common/json_util.h"

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
// (simdjson refuses integers beyond 64 bits, which nlohmann takes). Both
// paths refuse nesting deeper than kMaxJsonDepth.
namespace {

// One parser a thread, reused; its buffers grow to the largest text it
// checked, so large texts go to nlohmann only.
constexpr size_t kSimdjsonMax = 64 * 1024;
simdjson::dom::parser& Parser() {
  thread_local simdjson::dom::parser parser = [] {
    simdjson::dom::parser p;
    // simdjson counts the root's scope, kayak does not: one more. Later
    // growth keeps the depth (ensure_capacity passes max_depth() on).
    // Should it fail, the first parse allocates with simdjson's own depth
    // (1024), and what simdjson refuses goes to the bounded fallback.
    [[maybe_unused]] const auto error = p.allocate(4096, kMaxJsonDepth + 1);
    return p;
  }();
  return parser;
}

bool SimdjsonTakes(std::string_view text, size_t readable_after) {
  if (text.size() > kSimdjsonMax) return false;
  const bool padded = readable_after >= simdjson::SIMDJSON_PADDING;
  return !Parser().parse(text.data(), text.size(), /*realloc_if_needed=*/!padded).error();
}

size_t TrimBack(std::string_view s, size_t end) {
  while (end > 0 && jtext::IsWs(s[end - 1])) --end;
  return end;
}

// The members of the root object of `text`, read off the structural indexes
// simdjson's first stage found as it checked the text (where each brace,
// bracket, colon, comma and value starts; `implementation` is public in the
// simdjson 3 that Debian 12 ships). No byte of the text is scanned again.
bool MembersFromStructurals(std::string_view text, size_t* root, std::vector<jtext::Member>* out) {
  const auto& impl = *Parser().implementation;
  const uint32_t* idx = impl.structural_indexes.get();
  const size_t n = impl.n_structural_indexes;
  out->clear();
  if (n == 0 || text[idx[0]] != '{') return false;
  *root = idx[0];
  size_t i = 1;
  if (i < n && text[idx[i]] == '}') return true;  // {}
  while (i + 2 < n) {
    jtext::Member m;
    m.key.begin = idx[i];
    m.key.end = TrimBack(text, idx[i + 1]);  // before ':'
    m.value.begin = idx[i + 2];
    size_t j = i + 3;
    const char c = text[m.value.begin];
    if (c == '{' || c == '[') {
      int depth = 1;
      while (depth > 0 && j < n) {
        const char d = text[idx[j]];
        if (d == '{' || d == '[') {
          ++depth;
        } else if (d == '}' || d == ']') {
          --depth;
        }
        ++j;
      }
      m.value.end = idx[j - 1] + 1;
    } else {
      if (j >= n) return false;
      m.value.end = TrimBack(text, idx[j]);  // before ',' or '}'
    }
    out->push_back(m);
    if (j >= n) return false;
    if (text[idx[j]] == '}') return true;
    i = j + 1;  // past ','
  }
  return false;
}

}  // namespace

bool JsonDepthWithin(std::string_view text, int max_depth) {
  int depth = 0;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '"') {
      // To the closing quote, past escapes (an unclosed string ends the text).
      for (++i; i < n && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// simdjson's depth check is what bounds its own accepted texts; the
// fallback (nlohmann's iterative accept) is bounded by the scan.
bool IsJson(std::string_view text, size_t readable_after) {
  return SimdjsonTakes(text, readable_after) ||
         (JsonDepthWithin(text) && nlohmann::json::accept(text));
}

bool IsJsonIndexed(std::string_view text, size_t readable_after, bool* indexed, size_t* root,
                   std::vector<jtext::Member>* members) {
  *indexed = false;
  if (SimdjsonTakes(text, readable_after)) {
    *indexed = MembersFromStructurals(text, root, members);
    return true;
  }
  return JsonDepthWithin(text) && nlohmann::json::accept(text);
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
      *payload = DumpJson(nlohmann::json::parse(all));
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
                 (JsonDepthWithin(line)
                      ? " is not JSON; the body must be one JSON value or NDJSON"
                      : " nests arrays and objects more than " + std::to_string(kMaxJsonDepth) +
                            " deep, the limit");
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
