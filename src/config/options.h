// Config-side property tables: places in the file, the error list, and the
// options of a component read from YAML (the SDK's Options). The tables
// themselves (PropDef, ComponentDef) are in the SDK, include/kayak/component.h.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "expr/expr.h"
#include "kayak/component.h"

namespace kayak {

// A place in a config file, 1-based.
struct SourceMark {
  std::string file;
  int line = 0;
  int column = 0;
};
SourceMark MarkOf(const std::string& file, const YAML::Node& node);

struct ConfigError {
  SourceMark mark;
  std::string message;
  std::string ToString() const;  // "file:line:column: message"
};

// Collects every config error so all are reported at once.
class ErrorList {
 public:
  void Add(const SourceMark& mark, std::string message);
  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }
  const std::vector<ConfigError>& errors() const { return errors_; }
  std::string ToString() const;  // one error per line, in file order

 private:
  std::vector<ConfigError> errors_;
};

// A component's validated options, read from its YAML node. Factories see
// them as the SDK's `Options`; errors are recorded at their place in the file.
class YamlOptions final : public Options {
 public:
  YamlOptions(const ComponentDef* def, YAML::Node value, SourceMark mark, ErrorList* errors)
      : def_(def), value_(std::move(value)), mark_(std::move(mark)), errors_(errors) {}

  bool Has(const std::string& name) const override;
  std::string String(const std::string& name) const override;
  int64_t Int(const std::string& name) const override;
  double Number(const std::string& name) const override;
  bool Bool(const std::string& name) const override;
  std::vector<std::string> Strings(const std::string& name) const override;
  std::vector<std::pair<std::string, std::string>> StringMap(
      const std::string& name) const override;
  std::shared_ptr<const expr::Expr> Expr(const std::string& name) const override;
  std::vector<Entry> Entries() const override;
  std::shared_ptr<const expr::Expr> ExprOfEntry(size_t i) const override;
  void Error(const std::string& name, const std::string& message) const override;
  void ErrorAtEntry(size_t i, bool at_key, const std::string& message) const override;
  bool failed() const override { return failed_; }

  const SourceMark& mark() const { return mark_; }
  SourceMark MarkOfOption(const std::string& name) const;
  SourceMark PlaceOf(const YAML::Node& node) const;

 private:
  const PropDef* Find(const std::string& name) const;
  YAML::Node Get(const std::string& name) const;
  // The YAML node of entry `i` of a shorthand value: its key or its value.
  YAML::Node EntryNode(size_t i, bool key) const;
  std::shared_ptr<const expr::Expr> ExprAt(const YAML::Node& node) const;
  void ErrorAt(const YAML::Node& node, const std::string& message) const;

  const ComponentDef* def_;
  YAML::Node value_;
  SourceMark mark_;
  ErrorList* errors_;
  mutable bool failed_ = false;
};

// Checks the shape and option types of `value` against `def`, recording
// errors. Returns true when the options can be handed to the factory.
bool ValidateShape(const ComponentDef& def, const YAML::Node& value, const SourceMark& mark,
                   ErrorList* errors);

}  // namespace kayak
