// What expressions evaluate to and read from: values that point into a
// message's JSON text instead of a parsed tree. A message is read through a
// Document (an index of its top-level members, built on first use and reused
// for every field the expression names); strings with escapes, and values an
// expression builds, live in a Scratch that is reused from message to message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/field_path.h"
#include "common/json_text.h"

namespace kayak::expr {

// A bump allocator for the bytes of values built while evaluating one
// message; Reset() keeps its memory for the next.
class Scratch {
 public:
  char* Alloc(size_t n);
  std::string_view Keep(std::string_view s);
  void Reset() {
    chunk_ = 0;
    used_ = 0;
  }
  // A buffer for building one value before Keep(); not nested.
  std::string& temp() { return temp_; }

 private:
  std::vector<std::unique_ptr<char[]>> chunks_;
  std::vector<size_t> sizes_;
  size_t chunk_ = 0;  // the chunk in use
  size_t used_ = 0;   // bytes of it used
  std::string temp_;
};

struct Value {
  enum class Type : uint8_t { kMissing, kNull, kBool, kInt, kFloat, kString, kArray, kObject };
  Type type = Type::kMissing;
  // A float read from an integer too wide for int64 (named "int" in errors,
  // computed with as a float).
  bool wide_int = false;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string_view str;   // kString: the decoded bytes
  std::string_view json;  // the value's JSON text when known (always for arrays and objects)

  static Value Null() { return Make(Type::kNull); }
  static Value Bool(bool v) {
    Value x = Make(Type::kBool);
    x.b = v;
    return x;
  }
  static Value Int(int64_t v) {
    Value x = Make(Type::kInt);
    x.i = v;
    return x;
  }
  static Value Float(double v) {
    Value x = Make(Type::kFloat);
    x.d = v;
    return x;
  }
  static Value String(std::string_view s) {
    Value x = Make(Type::kString);
    x.str = s;
    return x;
  }
  bool missing() const { return type == Type::kMissing; }
  bool is_number() const { return type == Type::kInt || type == Type::kFloat; }
  double as_double() const { return type == Type::kInt ? static_cast<double>(i) : d; }

 private:
  static Value Make(Type t) {
    Value x;
    x.type = t;
    return x;
  }
};

// "null", "bool", "int", "float", "string", "array", "object", "missing".
const char* TypeName(const Value& v);

// The value whose JSON text is `text` (one value, valid). Views point into
// `text`, or into `scratch` for a string with escapes.
Value ReadJson(std::string_view text, Scratch* scratch);
// Appends the value as JSON: its own text when it has one, else written the
// way nlohmann wrote it (inf and nan as null).
void AppendJson(const Value& v, std::string* out);
// Appends the value as a key: a string's bytes, anything else as compact
// JSON written the way nlohmann wrote it (1.50 is "1.5").
void AppendKey(const Value& v, std::string* out);
// Deep equality of two arrays or two objects, as nlohmann compared them
// (1 equals 1.0; members in order).
bool SameJson(std::string_view a, std::string_view b);

// A message's JSON text, read by path. The text must be valid JSON and
// outlive the document; Reset() starts on another text and keeps the index's
// memory.
class Document {
 public:
  Document() = default;
  explicit Document(std::string_view text) { Reset(text); }
  void Reset(std::string_view text) {
    text_ = text;
    indexed_ = false;
  }
  // Starts on `text`, an object at byte `root` whose `n` members the caller
  // already knows: it fills them in at the returned pointer.
  jtext::Member* ResetIndexed(std::string_view text, size_t root, size_t n) {
    text_ = text;
    root_ = root;
    root_object_ = true;
    indexed_ = true;
    top_.resize(n);
    return top_.data();
  }
  // Whether the root is an object, indexing it on first use.
  bool RootIsObject() const {
    if (!indexed_) Index();
    return root_object_;
  }
  // Where the root value starts, and the root object's members (both once
  // RootIsObject() said so).
  size_t root() const { return root_; }
  const std::vector<jtext::Member>& members() const { return top_; }
  std::string_view text() const { return text_; }
  // The span of the value at `path`; false when it is missing.
  bool Find(const FieldPath& path, jtext::Span* out) const;
  // The value at `path`, missing when it is not there.
  Value Get(const FieldPath& path, Scratch* scratch) const;
  // jtext::SetPath for a path of one key, with the index this document
  // already has (no second scan). False when the root is not an object.
  // With `now`, also the members of the object written to `out`.
  bool SetTop(std::string_view key, std::string_view value, std::string* out,
              std::vector<jtext::Member>* now = nullptr) const;
  // jtext::SetMembers with this document's index (and `now` as SetTop's).
  bool SetMembers(const std::vector<std::pair<std::string_view, std::string_view>>& members,
                  std::string* out, std::vector<jtext::Member>* now = nullptr) const;

 private:
  std::string_view text_;
  mutable std::vector<jtext::Member> top_;  // the root object's members
  mutable bool indexed_ = false;
  mutable bool root_object_ = false;
  mutable size_t root_ = 0;  // where the root value starts

  void Index() const;
};

}  // namespace kayak::expr
