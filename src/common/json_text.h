// Reading and patching JSON text in place: what transforms use instead of a
// parsed tree. Every function here takes text already known to be valid JSON
// (IsJson in common/ndjson.h, checked once per message) and does not check it
// again; spans are byte offsets into that text.
//
// Duplicate keys follow the parser the project used before (nlohmann): a
// lookup finds the last member with the key, a removal removes every one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/field_path.h"

namespace kayak::jtext {

inline bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The first index at or after `i` that is not whitespace.
size_t SkipWs(std::string_view s, size_t i);
// The index just past the value whose first byte is s[i].
size_t SkipValue(std::string_view s, size_t i);

struct Span {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  std::string_view of(std::string_view s) const { return s.substr(begin, end - begin); }
};

// One member of an object: its key token (quotes included) and its value.
struct Member {
  Span key;
  Span value;
};

// The members of the object whose '{' is s[open], in order, into `out`
// (cleared first). Returns the index of the object's '}'.
size_t Members(std::string_view s, size_t open, std::vector<Member>* out);
// The elements of the array whose '[' is s[open], into `out` (cleared first).
// Returns the index of the array's ']'.
size_t Elements(std::string_view s, size_t open, std::vector<Span>* out);

// KeyIs for a token longer than its key: one with escapes.
bool KeyIsEscaped(std::string_view token, std::string_view key);
// Whether the key token `token` (quotes included) names `key` (decoded bytes).
// Every escape is longer than the bytes it stands for, so a token with one
// is longer than the key it names: most keys are told apart by their size
// alone, with no search for a backslash (and no call: lookups compare a key
// with every member).
inline bool KeyIs(std::string_view token, std::string_view key) {
  const size_t inner = token.size() - 2;
  if (inner < key.size()) return false;
  if (inner > key.size()) return KeyIsEscaped(token, key);
  return std::memcmp(token.data() + 1, key.data(), inner) == 0 &&
         std::memchr(token.data() + 1, '\\', inner) == nullptr;
}
// The last member of the object at s[open] named `key`; false if none.
bool FindMember(std::string_view s, size_t open, std::string_view key, Member* out);
// Element `index` of the array at s[open]; false if it has fewer.
bool FindElement(std::string_view s, size_t open, size_t index, Span* out);

// Decodes the string token `token` (quotes included) into `out` (appended).
void DecodeString(std::string_view token, std::string* out);
// Whether a string token has escapes (if not, its bytes between the quotes
// are its value).
inline bool HasEscapes(std::string_view token) {
  return token.substr(1, token.size() - 2).find('\\') != std::string_view::npos;
}

// A number token read the way nlohmann reads it: an integer that fits int64
// is kInt, a non-negative one that fits uint64 is kUint, anything else (a
// fraction, an exponent, a wider integer) is kFloat (inf beyond double).
struct Number {
  enum Kind : uint8_t { kInt, kUint, kFloat } kind = kInt;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
};
Number ReadNumber(std::string_view token);

// Writers, producing what nlohmann's dump() produced for the same value, so
// that a field a transform computes is written as it was before.
void AppendString(std::string* out, std::string_view utf8);  // quoted, escaped
void AppendInt(std::string* out, int64_t v);
void AppendUint(std::string* out, uint64_t v);
// Shortest round-trip digits; "85.0" for a whole number, "1e+20" past 1e15,
// "null" for inf and nan (JSON has neither).
void AppendDouble(std::string* out, double v);

// The type name used in error messages: null, bool, int, float, string,
// array, object (from the value's first byte and, for numbers, its token).
const char* TypeName(std::string_view value);

// The value at `path` in the document `doc`; false when a step is missing
// (a key not in an object, an index past an array's end, or a step into
// something that is neither).
bool FindPath(std::string_view doc, const FieldPath& path, Span* out);
// The same for the steps [first, last) from the value at `from`.
bool FindSteps(std::string_view doc, Span from, const PathStep* first, const PathStep* last,
               Span* out);

// ---- patching: each writes the whole patched document into `out` ----
// Bytes outside the changed span are copied as they are.

// Sets the value at `path` to the JSON text `value`, replacing what is there
// or adding the member at the end of its object, creating objects for missing
// keys on the way; a null on the way becomes an object. False (and `out`
// untouched) when a step goes through something else, or an index is past an
// array's end.
bool SetPath(std::string_view doc, const FieldPath& path, std::string_view value, std::string* out);
// Removes the value at `path` (every member with the key); false (and `out`
// untouched) when there is nothing to remove.
bool RemovePath(std::string_view doc, const FieldPath& path, std::string* out);
// Sets top-level members of the object `doc`: each (key, JSON text) replaces
// the value of the key's member, or is added at the end, in one pass. False
// when `doc` is not an object.
bool SetMembers(std::string_view doc,
                const std::vector<std::pair<std::string_view, std::string_view>>& members,
                std::string* out);
// SetMembers on the object at doc[open] whose members `ms` are already known.
// With `now`, also the members of the patched object in `out` (computed, not
// scanned).
bool SetMembersOf(std::string_view doc, size_t open, const std::vector<Member>& ms,
                  const std::vector<std::pair<std::string_view, std::string_view>>& members,
                  std::string* out, std::vector<Member>* now = nullptr);

}  // namespace kayak::jtext
