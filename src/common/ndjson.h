// How the http input reads a post's body (shared with its tests and fuzzer),
// and the JSON check the inputs share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json_text.h"

namespace kayak {

// A body is one JSON value (one message, re-serialised on one line if it
// spans several) or NDJSON (one message per non-empty line; CR LF allowed).
// Fills `payload` with one message a line and `messages` with their count;
// false with `error` (naming the line) for anything else, or an empty body.
// Whether `text` is one JSON value, as nlohmann's parser would take it.
// The http and file inputs check each message with it.
// `readable_after`: how many bytes after text's end the caller's buffer
// holds (64 or more spare simdjson a copy of the text into a padded buffer).
// A text nested deeper than kMaxJsonDepth (arrays and objects inside one
// another: `[]` is 1, `[[]]` is 2) is refused, so no later step that walks a
// message (a parse, a dump, a conversion into lua) recurses without bound.
bool IsJson(std::string_view text, size_t readable_after = 0);

// How deep the JSON data of a server (a message, a body, a config) may nest:
// docs/config.md, "limits".
constexpr int kMaxJsonDepth = 128;

// Whether the arrays and objects of `text` nest at most `max_depth` deep
// (brackets inside strings do not count). Linear, no recursion; for any
// bytes, JSON or not.
bool JsonDepthWithin(std::string_view text, int max_depth = kMaxJsonDepth);
// IsJson that also hands over, for a text whose root is an object, the
// members of that object as the check found them (so that the transforms
// after the input need not look for them): `*indexed` is true, `*root` is
// where the object starts and `members` holds them (byte offsets into
// `text`). `*indexed` is false for other roots and texts the fallback parser
// checked.
bool IsJsonIndexed(std::string_view text, size_t readable_after, bool* indexed, size_t* root,
                   std::vector<jtext::Member>* members);

bool NormalizeIngestBody(std::string_view body, std::string* payload, size_t* messages,
                         std::string* error);

}  // namespace kayak
