#include "config/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace kayak {

SourceMark MarkOf(const std::string& file, const YAML::Node& node) {
  SourceMark m;
  m.file = file;
  if (node.IsDefined()) {
    const YAML::Mark ym = node.Mark();
    if (ym.line >= 0) {
      m.line = ym.line + 1;
      m.column = ym.column + 1;
    }
  }
  return m;
}

std::string ConfigError::ToString() const {
  return mark.file + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column) + ": " +
         message;
}

void ErrorList::Add(const SourceMark& mark, std::string message) {
  errors_.push_back(ConfigError{mark, std::move(message)});
}

std::string ErrorList::ToString() const {
  std::vector<const ConfigError*> sorted;
  for (const auto& e : errors_) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ConfigError* a, const ConfigError* b) {
    if (a->mark.file != b->mark.file) return a->mark.file < b->mark.file;
    if (a->mark.line != b->mark.line) return a->mark.line < b->mark.line;
    return a->mark.column < b->mark.column;
  });
  std::string out;
  for (const auto* e : sorted) out += e->ToString() + "\n";
  return out;
}


namespace {

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end != '\0') return false;
  *out = v;
  return true;
}

bool IsPlainString(const YAML::Node& n) { return n.IsScalar(); }

// Checks one value against a declared type.
bool CheckType(PropType type, const YAML::Node& v, std::string* why) {
  switch (type) {
    case PropType::kString:
    case PropType::kExpr:
      if (!IsPlainString(v)) {
        *why = "must be a string";
        return false;
      }
      return true;
    case PropType::kInt: {
      int64_t x;
      if (!v.IsScalar() || !ParseInt(v.Scalar(), &x)) {
        *why = "must be a whole number";
        return false;
      }
      return true;
    }
    case PropType::kNumber: {
      double x;
      if (!v.IsScalar() || !ParseNumber(v.Scalar(), &x)) {
        *why = "must be a number";
        return false;
      }
      return true;
    }
    case PropType::kBool:
      if (!v.IsScalar() || (v.Scalar() != "true" && v.Scalar() != "false")) {
        *why = "must be true or false";
        return false;
      }
      return true;
    case PropType::kStringList:
      if (v.IsScalar()) return true;
      if (!v.IsSequence()) {
        *why = "must be a list of strings";
        return false;
      }
      for (const auto& e : v) {
        if (!e.IsScalar()) {
          *why = "must be a list of strings";
          return false;
        }
      }
      return true;
    case PropType::kStringMap:
      if (!v.IsMap()) {
        *why = "must be a map of strings";
        return false;
      }
      for (const auto& kv : v) {
        if (!kv.second.IsScalar()) {
          *why = "must be a map of strings";
          return false;
        }
      }
      return true;
    case PropType::kAny:
      return true;
  }
  return true;
}


// The table's rules for a value of the right type.
bool CheckRules(const PropDef& p, const YAML::Node& v, std::string* why) {
  if ((p.type == PropType::kInt || p.type == PropType::kNumber) && (p.min || p.max)) {
    double x = 0;
    ParseNumber(v.Scalar(), &x);
    const bool low = p.min && (p.min_open ? x <= *p.min : x < *p.min);
    const bool high = p.max && x > *p.max;
    if (low || high) {
      *why = "must be " + p.RulesText();
      return false;
    }
  }
  if (p.type == PropType::kString && !p.choices.empty() &&
      std::find(p.choices.begin(), p.choices.end(), v.Scalar()) == p.choices.end()) {
    *why = "must be " + p.RulesText() + ", not '" + v.Scalar() + "'";
    return false;
  }
  if (p.non_empty) {
    const bool empty = v.IsScalar() ? v.Scalar().empty() : v.size() == 0;
    if (empty) {
      *why = "must not be empty";
      return false;
    }
  }
  return true;
}

std::string KnownNames(const ComponentDef& def) {
  std::string s;
  for (const auto& p : def.props) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

}  // namespace


bool ValidateShape(const ComponentDef& def, const YAML::Node& value, const SourceMark& mark,
                   ErrorList* errors) {
  const std::string what = def.type + " " + def.kind;
  const SourceMark vmark = value.IsDefined() && !value.IsNull() ? MarkOf(mark.file, value) : mark;
  switch (def.shape) {
    case Shape::kExpr:
      if (!value.IsScalar()) {
        errors->Add(vmark, what + " takes an expression string");
        return false;
      }
      return true;
    case Shape::kExprMap:
    case Shape::kStringMap:
      if (!value.IsMap() || value.size() == 0) {
        errors->Add(vmark, what + " takes a non-empty map of " +
                               (def.shape == Shape::kExprMap ? "field: expression" : "from: to"));
        return false;
      }
      for (const auto& kv : value) {
        if (!kv.second.IsScalar()) {
          errors->Add(MarkOf(mark.file, kv.second),
                      what + ": the value for '" + kv.first.Scalar() + "' must be a string");
          return false;
        }
      }
      return true;
    case Shape::kStringList:
      if (!value.IsSequence() || value.size() == 0) {
        errors->Add(vmark, what + " takes a non-empty list of field names");
        return false;
      }
      for (const auto& e : value) {
        if (!e.IsScalar()) {
          errors->Add(MarkOf(mark.file, e), what + ": each entry must be a field name");
          return false;
        }
      }
      return true;
    case Shape::kStringOrList:
      if (value.IsScalar()) return true;
      if (value.IsSequence() && value.size() > 0) {
        for (const auto& e : value) {
          if (!e.IsScalar()) {
            errors->Add(MarkOf(mark.file, e), what + ": each entry must be a pipeline id");
            return false;
          }
        }
        return true;
      }
      errors->Add(vmark, what + " takes a pipeline id or a non-empty list of them");
      return false;
    case Shape::kOptions:
      break;
  }
  if (!value.IsNull() && value.IsDefined() && !value.IsMap()) {
    errors->Add(vmark, what + " takes a map of options");
    return false;
  }
  bool ok = true;
  if (value.IsMap()) {
    for (const auto& kv : value) {
      const std::string name = kv.first.Scalar();
      auto it = std::find_if(def.props.begin(), def.props.end(),
                             [&](const PropDef& p) { return p.name == name; });
      if (it == def.props.end()) {
        errors->Add(MarkOf(mark.file, kv.first),
                    "unknown option '" + name + "' for " + what + " (known: " + KnownNames(def) +
                        ")");
        ok = false;
        continue;
      }
      std::string why;
      if (!CheckType(it->type, kv.second, &why) || !CheckRules(*it, kv.second, &why)) {
        errors->Add(MarkOf(mark.file, kv.second), "option '" + name + "' of " + what + " " + why);
        ok = false;
      }
    }
  }
  for (const auto& p : def.props) {
    if (p.required && (!value.IsMap() || !value[p.name].IsDefined())) {
      errors->Add(mark, what + " is missing required option '" + p.name + "'");
      ok = false;
    }
  }
  return ok;
}

const PropDef* YamlOptions::Find(const std::string& name) const {
  for (const auto& p : def_->props) {
    if (p.name == name) return &p;
  }
  KAYAK_CHECK(false && "option not declared in the property table");
  return nullptr;
}

YAML::Node YamlOptions::Get(const std::string& name) const {
  if (!value_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  return value_[name];
}

bool YamlOptions::Has(const std::string& name) const {
  Find(name);
  return Get(name).IsDefined() && !Get(name).IsNull();
}

std::string YamlOptions::String(const std::string& name) const {
  const PropDef* p = Find(name);
  YAML::Node v = Get(name);
  if (v.IsDefined() && v.IsScalar()) return v.Scalar();
  return p->default_text;
}

int64_t YamlOptions::Int(const std::string& name) const {
  int64_t x = 0;
  if (!ParseInt(String(name), &x)) return 0;
  return x;
}

double YamlOptions::Number(const std::string& name) const {
  double x = 0;
  if (!ParseNumber(String(name), &x)) return 0;
  return x;
}

bool YamlOptions::Bool(const std::string& name) const { return String(name) == "true"; }

std::vector<std::string> YamlOptions::Strings(const std::string& name) const {
  Find(name);
  std::vector<std::string> out;
  YAML::Node v = Get(name);
  if (!v.IsDefined() || v.IsNull()) return out;
  if (v.IsScalar()) {
    out.push_back(v.Scalar());
    return out;
  }
  for (const auto& e : v) out.push_back(e.Scalar());
  return out;
}

std::vector<std::pair<std::string, std::string>> YamlOptions::StringMap(const std::string& name) const {
  Find(name);
  std::vector<std::pair<std::string, std::string>> out;
  YAML::Node v = Get(name);
  if (!v.IsDefined() || !v.IsMap()) return out;
  for (const auto& kv : v) out.emplace_back(kv.first.Scalar(), kv.second.Scalar());
  return out;
}

std::shared_ptr<const expr::Expr> YamlOptions::Expr(const std::string& name) const {
  Find(name);
  YAML::Node v = Get(name);
  if (!v.IsDefined()) return nullptr;
  return ExprAt(v);
}

YAML::Node YamlOptions::EntryNode(size_t i, bool key) const {
  if (value_.IsScalar()) return value_;
  size_t n = 0;
  for (const auto& e : value_) {
    if (n++ != i) continue;
    if (value_.IsMap()) return key ? e.first : e.second;
    return e;
  }
  return value_;
}

std::vector<Options::Entry> YamlOptions::Entries() const {
  std::vector<Entry> out;
  if (value_.IsScalar()) {
    out.push_back(Entry{"", value_.Scalar()});
  } else if (value_.IsMap()) {
    for (const auto& kv : value_) out.push_back(Entry{kv.first.Scalar(), kv.second.Scalar()});
  } else if (value_.IsSequence()) {
    for (const auto& e : value_) out.push_back(Entry{"", e.Scalar()});
  }
  return out;
}

std::shared_ptr<const expr::Expr> YamlOptions::ExprOfEntry(size_t i) const {
  return ExprAt(EntryNode(i, false));
}

void YamlOptions::ErrorAtEntry(size_t i, bool at_key, const std::string& message) const {
  ErrorAt(EntryNode(i, at_key), message);
}

std::shared_ptr<const expr::Expr> YamlOptions::ExprAt(const YAML::Node& node) const {
  expr::CompileError err;
  auto e = expr::Compile(node.Scalar(), &err);
  if (e == nullptr) {
    SourceMark m = MarkOf(mark_.file, node);
    // A quoted scalar starts one column before its text.
    const int quote = node.Tag() == "!" ? 1 : 0;
    m.column += quote + static_cast<int>(err.offset);
    errors_->Add(m, "expression error: " + err.message);
    failed_ = true;
  }
  return e;
}

SourceMark YamlOptions::MarkOfOption(const std::string& name) const {
  YAML::Node v = Get(name);
  if (v.IsDefined()) return PlaceOf(v);
  return mark_;
}

// A node's place in the file; a node the loader made (the ends of a
// repartition step) has none, and is at its component's place.
SourceMark YamlOptions::PlaceOf(const YAML::Node& node) const {
  const SourceMark m = MarkOf(mark_.file, node);
  return m.line > 0 ? m : mark_;
}

void YamlOptions::Error(const std::string& name, const std::string& message) const {
  errors_->Add(MarkOfOption(name), def_->type + " " + def_->kind + ": " + message);
  failed_ = true;
}

void YamlOptions::ErrorAt(const YAML::Node& node, const std::string& message) const {
  errors_->Add(PlaceOf(node), def_->type + " " + def_->kind + ": " + message);
  failed_ = true;
}

}  // namespace kayak
