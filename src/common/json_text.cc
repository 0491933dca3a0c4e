#include "common/json_text.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace kayak::jtext {

size_t SkipWs(std::string_view s, size_t i) {
  while (i < s.size() && IsWs(s[i])) ++i;
  return i;
}

namespace {

// Past the closing quote of the string token starting at s[i]. Sixteen bytes
// at a time with SSE2 (part of every x86-64), looking for the quote or a
// backslash: most strings in messages end within the first load, with no call
// (a memchr a string measured 185 ns to index a 200-byte message; a byte loop
// 290 ns).
size_t SkipString(std::string_view s, size_t i) {
  const char* p = s.data();
  const size_t n = s.size();
  size_t j = i + 1;
#ifdef __SSE2__
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  while (j + 16 <= n) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j));
    const unsigned mq = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)));
    const unsigned mb = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)));
    const unsigned m = mq | mb;
    if (m == 0) {
      j += 16;
      continue;
    }
    const unsigned k = static_cast<unsigned>(__builtin_ctz(m));
    if (mq & (1u << k)) return j + k + 1;
    j += k + 2;  // a backslash: the byte after it is never the end
  }
#endif
  while (j < n) {
    const char c = p[j];
    if (c == '"') return j + 1;
    j += c == '\\' ? 2 : 1;
  }
  return n;  // not valid JSON; callers never pass it
}

size_t SkipContainer(std::string_view s, size_t i) {
  int depth = 0;
  size_t j = i;
  const size_t n = s.size();
  while (j < n) {
    const char c = s[j];
    if (c == '"') {
      j = SkipString(s, j);
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return j + 1;
    }
    ++j;
  }
  return n;
}

bool IsNumberByte(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// The end of the document's one value: its last non-space byte, plus one.
size_t RootEnd(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && IsWs(s[e - 1])) --e;
  return e;
}

// Calls fn(member) for each member of the object at s[open], in order.
// Returns the index of the object's '}'.
template <typename F>
size_t ForEachMember(std::string_view s, size_t open, F&& fn) {
  size_t j = SkipWs(s, open + 1);
  while (j < s.size() && s[j] == '"') {
    Member m;
    m.key.begin = j;
    m.key.end = SkipString(s, j);
    j = SkipWs(s, m.key.end);
    j = SkipWs(s, j + 1);  // ':'
    m.value.begin = j;
    m.value.end = SkipValue(s, j);
    fn(m);
    j = SkipWs(s, m.value.end);
    if (j < s.size() && s[j] == ',') j = SkipWs(s, j + 1);
  }
  return j;
}

// Walks the object at s[open]: the last member named `key` (if any), where a
// new member would go (after the last value, or after '{'), and whether the
// object is empty.
bool ScanObject(std::string_view s, size_t open, std::string_view key, Member* found,
                size_t* insert_at, bool* empty) {
  bool hit = false;
  *insert_at = open + 1;
  *empty = true;
  ForEachMember(s, open, [&](const Member& m) {
    if (KeyIs(m.key.of(s), key)) {
      *found = m;
      hit = true;
    }
    *insert_at = m.value.end;
    *empty = false;
  });
  return hit;
}

void Splice(std::string_view doc, Span span, std::string_view with, std::string* out) {
  out->clear();
  out->reserve(doc.size() - span.size() + with.size());
  out->append(doc.data(), span.begin);
  out->append(with);
  out->append(doc.data() + span.end, doc.size() - span.end);
}

// The value for `path[from..]` nested in new objects around `value`; false if
// a remaining step is an index (there is no array to index).
bool Nest(const FieldPath& path, size_t from, std::string_view value, std::string* out) {
  for (size_t k = from; k < path.size(); ++k) {
    if (path[k].index >= 0) return false;
    out->push_back('{');
    AppendString(out, path[k].key);
    out->push_back(':');
  }
  out->append(value);
  out->append(path.size() - from, '}');
  return true;
}

// Removes the items `gone` (ascending) of `n` items whose spans are
// [start(i), end(i)) from `doc` into `out`: each item with the separator
// after it, or, for the last item, the separator before it (after the last
// item kept), so the bytes around what stays are untouched.
template <typename StartOf, typename EndOf>
void EraseItems(std::string_view doc, const std::vector<size_t>& gone, size_t n, StartOf start,
                EndOf end, std::string* out) {
  // The last item kept; the removed items after it go as one cut, with the
  // separator after it.
  size_t last_kept = SIZE_MAX;
  for (size_t i = n, g = gone.size(); i-- > 0;) {
    if (g > 0 && gone[g - 1] == i) {
      --g;
      continue;
    }
    last_kept = i;
    break;
  }
  out->clear();
  out->reserve(doc.size());
  size_t from = 0;  // copied up to here
  for (size_t i : gone) {
    Span cut;
    if (last_kept == SIZE_MAX) cut = Span{start(0), end(n - 1)};        // all of them
    else if (i > last_kept) cut = Span{end(last_kept), end(n - 1)};     // the tail
    else cut = Span{start(i), start(i + 1)};                            // with its comma
    if (cut.begin < from) continue;  // the tail's cut, already made
    out->append(doc.data() + from, cut.begin - from);
    from = cut.end;
  }
  out->append(doc.data() + from, doc.size() - from);
}

void AppendHex4(std::string* out, unsigned v) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back(kHex[(v >> 12) & 15]);
  out->push_back(kHex[(v >> 8) & 15]);
  out->push_back(kHex[(v >> 4) & 15]);
  out->push_back(kHex[v & 15]);
}

unsigned Hex4(std::string_view s, size_t i) {
  unsigned v = 0;
  for (size_t k = i; k < i + 4 && k < s.size(); ++k) {
    const char c = s[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
  }
  return v;
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

size_t SkipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return s.size();
  switch (s[i]) {
    case '"': return SkipString(s, i);
    case '{':
    case '[': return SkipContainer(s, i);
    case 't':
    case 'n': return std::min(s.size(), i + 4);
    case 'f': return std::min(s.size(), i + 5);
    default: break;
  }
  size_t j = i;
  while (j < s.size() && IsNumberByte(s[j])) ++j;
  return j;
}

size_t Members(std::string_view s, size_t open, std::vector<Member>* out) {
  out->clear();
  return ForEachMember(s, open, [&](const Member& m) { out->push_back(m); });
}

size_t Elements(std::string_view s, size_t open, std::vector<Span>* out) {
  out->clear();
  size_t j = SkipWs(s, open + 1);
  while (j < s.size() && s[j] != ']') {
    Span e{j, SkipValue(s, j)};
    out->push_back(e);
    j = SkipWs(s, e.end);
    if (j < s.size() && s[j] == ',') j = SkipWs(s, j + 1);
  }
  return j;
}

bool KeyIsEscaped(std::string_view token, std::string_view key) {
  const std::string_view inner = token.substr(1, token.size() - 2);
  if (inner.find('\\') == std::string_view::npos) return false;
  std::string decoded;
  DecodeString(token, &decoded);
  return decoded == key;
}

bool FindMember(std::string_view s, size_t open, std::string_view key, Member* out) {
  size_t insert_at;
  bool empty;
  return ScanObject(s, open, key, out, &insert_at, &empty);
}

bool FindElement(std::string_view s, size_t open, size_t index, Span* out) {
  size_t j = SkipWs(s, open + 1);
  size_t k = 0;
  while (j < s.size() && s[j] != ']') {
    const size_t e = SkipValue(s, j);
    if (k == index) {
      *out = Span{j, e};
      return true;
    }
    ++k;
    j = SkipWs(s, e);
    if (j < s.size() && s[j] == ',') j = SkipWs(s, j + 1);
  }
  return false;
}

void DecodeString(std::string_view token, std::string* out) {
  const size_t n = token.size() - 1;  // the closing quote
  for (size_t i = 1; i < n; ++i) {
    const char c = token[i];
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    const char e = token[++i];
    switch (e) {
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'u': {
        uint32_t cp = Hex4(token, i + 1);
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < token.size() && token[i + 1] == '\\' &&
            token[i + 2] == 'u') {
          const uint32_t lo = Hex4(token, i + 3);
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          }
        }
        AppendUtf8(out, cp);
        break;
      }
      default: out->push_back(e); break;  // '"', '\\', '/'
    }
  }
}

Number ReadNumber(std::string_view token) {
  Number n;
  const char* b = token.data();
  const char* e = b + token.size();
  if (token.find_first_of(".eE") == std::string_view::npos) {
    auto r = std::from_chars(b, e, n.i);
    if (r.ec == std::errc() && r.ptr == e) {
      n.kind = Number::kInt;
      return n;
    }
    if (!token.empty() && token[0] != '-') {
      r = std::from_chars(b, e, n.u);
      if (r.ec == std::errc() && r.ptr == e) {
        n.kind = Number::kUint;
        return n;
      }
    }
  }
  n.kind = Number::kFloat;
  auto r = std::from_chars(b, e, n.d);
  if (r.ec != std::errc()) {
    // Out of range: what strtod gives (inf, or zero for an underflow).
    const std::string text(token);
    n.d = std::strtod(text.c_str(), nullptr);
  }
  return n;
}

void AppendString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t run = 0;  // bytes copied as they are, pending
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        out->append("\\u");
        AppendHex4(out, c);
        break;
    }
  }
  out->append(s.data() + run, s.size() - run);
  out->push_back('"');
}

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, r.ptr);
}

void AppendUint(std::string* out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, r.ptr);
}

void AppendDouble(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  // nlohmann's own writer (Grisu2: round-trip digits, "85.0", "1e+20"), so
  // that a computed float is written byte for byte as the tree path wrote it.
  char buf[64];
  char* end = nlohmann::detail::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, end);
}

const char* TypeName(std::string_view value) {
  if (value.empty()) return "missing";
  switch (value[0]) {
    case 'n': return "null";
    case 't':
    case 'f': return "bool";
    case '"': return "string";
    case '[': return "array";
    case '{': return "object";
    default: break;
  }
  return ReadNumber(value).kind == Number::kFloat ? "float" : "int";
}

bool FindSteps(std::string_view doc, Span from, const PathStep* first, const PathStep* last,
               Span* out) {
  Span cur = from;
  for (const PathStep* step = first; step != last; ++step) {
    if (cur.begin >= doc.size()) return false;
    if (step->index >= 0) {
      if (doc[cur.begin] != '[') return false;
      if (!FindElement(doc, cur.begin, static_cast<size_t>(step->index), &cur)) return false;
      continue;
    }
    if (doc[cur.begin] != '{') return false;
    Member m;
    if (!FindMember(doc, cur.begin, step->key, &m)) return false;
    cur = m.value;
  }
  *out = cur;
  return true;
}

bool FindPath(std::string_view doc, const FieldPath& path, Span* out) {
  return FindSteps(doc, Span{SkipWs(doc, 0), RootEnd(doc)}, path.data(), path.data() + path.size(),
                   out);
}

bool SetPath(std::string_view doc, const FieldPath& path, std::string_view value, std::string* out) {
  Span cur{SkipWs(doc, 0), RootEnd(doc)};
  for (size_t k = 0; k < path.size(); ++k) {
    const PathStep& step = path[k];
    if (cur.begin >= doc.size()) return false;
    const char c = doc[cur.begin];
    if (step.index >= 0) {
      if (c != '[') return false;
      if (!FindElement(doc, cur.begin, static_cast<size_t>(step.index), &cur)) return false;
      continue;
    }
    if (c == 'n') {  // a null on the way becomes an object
      std::string nested;
      if (!Nest(path, k, value, &nested)) return false;
      Splice(doc, cur, nested, out);
      return true;
    }
    if (c != '{') return false;
    Member m;
    size_t insert_at;
    bool empty;
    if (ScanObject(doc, cur.begin, step.key, &m, &insert_at, &empty)) {
      cur = m.value;
      continue;
    }
    std::string member;
    if (!empty) member.push_back(',');
    AppendString(&member, step.key);
    member.push_back(':');
    if (!Nest(path, k + 1, value, &member)) return false;
    Splice(doc, Span{insert_at, insert_at}, member, out);
    return true;
  }
  Splice(doc, cur, value, out);
  return true;
}

bool RemovePath(std::string_view doc, const FieldPath& path, std::string* out) {
  if (path.empty()) return false;
  Span p;  // the parent
  if (!FindSteps(doc, Span{SkipWs(doc, 0), RootEnd(doc)}, path.data(),
                 path.data() + path.size() - 1, &p)) {
    return false;
  }
  const PathStep& last = path.back();
  thread_local std::vector<size_t> gone;
  gone.clear();
  if (last.index >= 0) {
    if (doc[p.begin] != '[') return false;
    thread_local std::vector<Span> elems;
    Elements(doc, p.begin, &elems);
    if (static_cast<size_t>(last.index) >= elems.size()) return false;
    gone.push_back(static_cast<size_t>(last.index));
    EraseItems(doc, gone, elems.size(), [&](size_t i) { return elems[i].begin; },
               [&](size_t i) { return elems[i].end; }, out);
    return true;
  }
  if (doc[p.begin] != '{') return false;
  thread_local std::vector<Member> members;
  Members(doc, p.begin, &members);
  // Every member with the key goes (a key can repeat in JSON text).
  for (size_t j = 0; j < members.size(); ++j) {
    if (KeyIs(members[j].key.of(doc), last.key)) gone.push_back(j);
  }
  if (gone.empty()) return false;
  EraseItems(doc, gone, members.size(), [&](size_t i) { return members[i].key.begin; },
             [&](size_t i) { return members[i].value.end; }, out);
  return true;
}

bool SetMembers(std::string_view doc,
                const std::vector<std::pair<std::string_view, std::string_view>>& members,
                std::string* out) {
  const size_t open = SkipWs(doc, 0);
  if (open >= doc.size() || doc[open] != '{') return false;
  thread_local std::vector<Member> ms;
  Members(doc, open, &ms);
  return SetMembersOf(doc, open, ms, members, out);
}

bool SetMembersOf(std::string_view doc, size_t open, const std::vector<Member>& ms,
                  const std::vector<std::pair<std::string_view, std::string_view>>& members,
                  std::string* out, std::vector<Member>* now) {
  constexpr size_t kMaxAtOnce = 16;
  if (members.size() > kMaxAtOnce) {  // one at a time
    std::string cur(doc);
    for (const auto& m : members) {
      if (!SetMembers(cur, {m}, out)) return false;
      cur.swap(*out);
    }
    out->swap(cur);
    if (now != nullptr) Members(*out, open, now);
    return true;
  }
  // Replacements in the order of the text; the others are added at the end.
  struct Change {
    size_t member;
    size_t pair;
  };
  Change changes[kMaxAtOnce];
  Member added_at[kMaxAtOnce];  // the added members, from the start of `added`
  size_t n_changes = 0, n_added = 0;
  thread_local std::string added;
  added.clear();
  bool empty = ms.empty();
  for (size_t p = 0; p < members.size(); ++p) {
    size_t hit = ms.size();
    for (size_t m = ms.size(); m-- > 0;) {
      if (KeyIs(ms[m].key.of(doc), members[p].first)) {
        hit = m;
        break;
      }
    }
    if (hit == ms.size()) {
      if (!empty) added.push_back(',');
      Member& a = added_at[n_added++];
      a.key.begin = added.size();
      AppendString(&added, members[p].first);
      a.key.end = added.size();
      added.push_back(':');
      a.value.begin = added.size();
      added.append(members[p].second);
      a.value.end = added.size();
      empty = false;
      continue;
    }
    size_t k = n_changes++;
    while (k > 0 && changes[k - 1].member > hit) {
      changes[k] = changes[k - 1];
      --k;
    }
    changes[k] = Change{hit, p};
  }
  const size_t insert_at = ms.empty() ? open + 1 : ms.back().value.end;
  out->clear();
  size_t from = 0;
  for (size_t c = 0; c < n_changes; ++c) {
    const Span at = ms[changes[c].member].value;
    out->append(doc.data() + from, at.begin - from);
    out->append(members[changes[c].pair].second);
    from = at.end;
  }
  out->append(doc.data() + from, insert_at - from);
  const size_t added_from = out->size();
  out->append(added);
  out->append(doc.data() + insert_at, doc.size() - insert_at);
  if (now != nullptr) {
    // Members keep their keys and the bytes around them; a replaced value
    // changes its own end and moves everything after it.
    now->resize(ms.size() + n_added);
    int64_t delta = 0;  // how much the values replaced before a member grew
    auto moved = [&](size_t at) { return static_cast<size_t>(static_cast<int64_t>(at) + delta); };
    size_t c = 0;
    for (size_t k = 0; k < ms.size(); ++k) {
      Member& n = (*now)[k];
      const Member& o = ms[k];
      n.key = Span{moved(o.key.begin), moved(o.key.end)};
      n.value = Span{moved(o.value.begin), moved(o.value.end)};
      if (c < n_changes && changes[c].member == k) {
        const size_t len = members[changes[c].pair].second.size();
        n.value.end = n.value.begin + len;
        delta += static_cast<int64_t>(len) - static_cast<int64_t>(o.value.size());
        ++c;
      }
    }
    for (size_t a = 0; a < n_added; ++a) {
      Member& n = (*now)[ms.size() + a];
      n.key = Span{added_from + added_at[a].key.begin, added_from + added_at[a].key.end};
      n.value = Span{added_from + added_at[a].value.begin, added_from + added_at[a].value.end};
    }
  }
  return true;
}

}  // namespace kayak::jtext
