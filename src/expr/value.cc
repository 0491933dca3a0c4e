#include "expr/value.h"

#include <algorithm>
#include <cstring>

#include "common/json_util.h"

namespace kayak::expr {

char* Scratch::Alloc(size_t n) {
  while (chunk_ < chunks_.size() && used_ + n > sizes_[chunk_]) {
    ++chunk_;
    used_ = 0;
  }
  if (chunk_ == chunks_.size()) {
    const size_t size = std::max<size_t>(n, sizes_.empty() ? 4096 : sizes_.back() * 2);
    chunks_.emplace_back(new char[size]);
    sizes_.push_back(size);
    used_ = 0;
  }
  char* p = chunks_[chunk_].get() + used_;
  used_ += n;
  return p;
}

std::string_view Scratch::Keep(std::string_view s) {
  if (s.empty()) return {};
  char* p = Alloc(s.size());
  std::memcpy(p, s.data(), s.size());
  return {p, s.size()};
}

const char* TypeName(const Value& v) {
  switch (v.type) {
    case Value::Type::kMissing: return "missing";
    case Value::Type::kNull: return "null";
    case Value::Type::kBool: return "bool";
    case Value::Type::kInt: return "int";
    case Value::Type::kFloat: return v.wide_int ? "int" : "float";
    case Value::Type::kString: return "string";
    case Value::Type::kArray: return "array";
    case Value::Type::kObject: return "object";
  }
  return "unknown";
}

Value ReadJson(std::string_view text, Scratch* scratch) {
  Value v;
  if (text.empty()) return v;
  switch (text[0]) {
    case 'n': v = Value::Null(); break;
    case 't': v = Value::Bool(true); break;
    case 'f': v = Value::Bool(false); break;
    case '"':
      if (jtext::HasEscapes(text)) {
        std::string& t = scratch->temp();
        t.clear();
        jtext::DecodeString(text, &t);
        v = Value::String(scratch->Keep(t));
      } else {
        v = Value::String(text.substr(1, text.size() - 2));
      }
      break;
    case '[': v.type = Value::Type::kArray; break;
    case '{': v.type = Value::Type::kObject; break;
    default: {
      const jtext::Number n = jtext::ReadNumber(text);
      if (n.kind == jtext::Number::kInt) {
        v = Value::Int(n.i);
      } else if (n.kind == jtext::Number::kUint) {
        v = Value::Float(static_cast<double>(n.u));
        v.wide_int = true;
      } else {
        v = Value::Float(n.d);
      }
    }
  }
  v.json = text;
  return v;
}

void AppendJson(const Value& v, std::string* out) {
  if (!v.json.empty()) {
    out->append(v.json);
    return;
  }
  switch (v.type) {
    case Value::Type::kBool: out->append(v.b ? "true" : "false"); break;
    case Value::Type::kInt: jtext::AppendInt(out, v.i); break;
    case Value::Type::kFloat: jtext::AppendDouble(out, v.d); break;
    case Value::Type::kString: jtext::AppendString(out, v.str); break;
    default: out->append("null"); break;
  }
}

void AppendKey(const Value& v, std::string* out) {
  switch (v.type) {
    case Value::Type::kString: out->append(v.str); return;
    case Value::Type::kInt: jtext::AppendInt(out, v.i); return;
    default: break;
  }
  if (v.json.empty()) {
    AppendJson(v, out);
  } else {
    out->append(Json::parse(v.json).dump(-1, ' ', false, Json::error_handler_t::replace));
  }
}

bool SameJson(std::string_view a, std::string_view b) {
  if (a == b) return true;
  return Json::parse(a, nullptr, false) == Json::parse(b, nullptr, false);
}

void Document::Index() const {
  root_ = jtext::SkipWs(text_, 0);
  root_object_ = root_ < text_.size() && text_[root_] == '{';
  if (root_object_) jtext::Members(text_, root_, &top_);
  indexed_ = true;
}

bool Document::SetTop(std::string_view key, std::string_view value, std::string* out,
                      std::vector<jtext::Member>* now) const {
  if (!indexed_) Index();
  if (!root_object_) return false;
  out->clear();
  if (now != nullptr) *now = top_;
  for (size_t m = top_.size(); m-- > 0;) {
    if (!jtext::KeyIs(top_[m].key.of(text_), key)) continue;
    const jtext::Span v = top_[m].value;
    out->reserve(text_.size() - v.size() + value.size());
    out->append(text_.data(), v.begin);
    out->append(value);
    out->append(text_.data() + v.end, text_.size() - v.end);
    if (now != nullptr) {  // this value's end, and everything after it, move
      const size_t grew = value.size();
      (*now)[m].value.end = v.begin + grew;
      for (size_t k = m + 1; k < now->size(); ++k) {
        jtext::Member& n = (*now)[k];
        n.key = jtext::Span{n.key.begin - v.size() + grew, n.key.end - v.size() + grew};
        n.value = jtext::Span{n.value.begin - v.size() + grew, n.value.end - v.size() + grew};
      }
    }
    return true;
  }
  const size_t at = top_.empty() ? root_ + 1 : top_.back().value.end;
  out->reserve(text_.size() + key.size() + value.size() + 4);
  out->append(text_.data(), at);
  if (!top_.empty()) out->push_back(',');
  jtext::Member added;
  added.key.begin = out->size();
  jtext::AppendString(out, key);
  added.key.end = out->size();
  out->push_back(':');
  added.value.begin = out->size();
  out->append(value);
  added.value.end = out->size();
  out->append(text_.data() + at, text_.size() - at);
  if (now != nullptr) now->push_back(added);
  return true;
}

bool Document::SetMembers(
    const std::vector<std::pair<std::string_view, std::string_view>>& members,
    std::string* out, std::vector<jtext::Member>* now) const {
  if (!indexed_) Index();
  if (!root_object_) return false;
  return jtext::SetMembersOf(text_, root_, top_, members, out, now);
}

bool Document::Find(const FieldPath& path, jtext::Span* out) const {
  jtext::Span cur;
  if (!indexed_) Index();
  if (path.empty()) {
    cur.begin = jtext::SkipWs(text_, 0);
    cur.end = jtext::SkipValue(text_, cur.begin);
    *out = cur;
    return true;
  }
  if (path[0].index >= 0) {
    return jtext::FindPath(text_, path, out);
  }
  if (!root_object_) return false;
  const std::string_view key = path[0].key;
  bool hit = false;
  for (size_t m = top_.size(); m-- > 0;) {  // the last member with the key wins
    if (jtext::KeyIs(top_[m].key.of(text_), key)) {
      cur = top_[m].value;
      hit = true;
      break;
    }
  }
  if (!hit) return false;
  return jtext::FindSteps(text_, cur, path.data() + 1, path.data() + path.size(), out);
}

Value Document::Get(const FieldPath& path, Scratch* scratch) const {
  jtext::Span span;
  if (!Find(path, &span)) return Value{};
  return ReadJson(span.of(text_), scratch);
}

}  // namespace kayak::expr
