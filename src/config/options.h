// Property tables and validated options. A component declares its options
// once (name, type, default, help); the same table drives validation,
// `kayak check`, and the docs.
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

enum class PropType {
  kString,
  kInt,         // a whole number
  kNumber,      // any number
  kBool,
  kStringList,  // a list of strings (a single string is taken as a list of one)
  kStringMap,   // string -> string
  kExpr,        // an expression (SPEC section 4)
  kAny,
};
const char* PropTypeName(PropType t);

// Whether an option decides *what* a component computes or reads (its
// identity: a change makes its checkpointed state start empty) or only *how
// fast* (tuning: a change keeps the state). docs/durability.md.
enum class PropRole { kIdentity, kTuning };

// What an option's value names, for the graph around the component: the
// loader checks it (a bucket must be declared, a path served once) and the
// engine wires it (regions, bucket writers) without knowing the component.
enum class PropRef {
  kNone,
  kBucketWrite,  // a bucket the component writes (see PropDef::reads_only_when)
  kBucketRead,   // a bucket the component only reads
  kServedPath,   // a path the component serves on the server's listener
};

// One option of a component. The rules (range, choices, non-empty) are
// checked when the config is loaded, with the option's place in the file;
// the docs show them. Built with the setters below:
//   PropDef{"batch_size", PropType::kInt, false, "100", "...", PropRole::kTuning}
//       .Range(1, 100000)
struct PropDef {
  std::string name;
  PropType type;
  bool required = false;
  std::string default_text;  // shown in docs; "" = no default
  std::string help;
  PropRole role = PropRole::kIdentity;
  // ---- rules ----
  std::optional<double> min, max;  // for kInt and kNumber
  bool min_open = false;           // min itself is not allowed (> rather than >=)
  std::vector<std::string> choices;  // for kString: the only values allowed
  bool non_empty = false;            // for kString and kStringList
  std::string unit;                  // shown in docs: ms, bytes, ...
  // Never logged, never shown by the API (its value is replaced by "***").
  bool secret = false;
  PropRef ref = PropRef::kNone;
  // For kBucketWrite: the component only reads the bucket when option
  // `.first` has the value `.second` (a bucket transform with op: lookup).
  std::pair<std::string, std::string> reads_only_when;

  PropDef& Range(double lo, double hi) { min = lo; max = hi; return *this; }
  PropDef& AtLeast(double lo) { min = lo; return *this; }
  PropDef& Above(double lo) { min = lo; min_open = true; return *this; }
  PropDef& OneOf(std::vector<std::string> values) { choices = std::move(values); return *this; }
  PropDef& NonEmpty() { non_empty = true; return *this; }
  PropDef& Unit(std::string u) { unit = std::move(u); return *this; }
  PropDef& Secret() { secret = true; return *this; }
  PropDef& Refers(PropRef r) { ref = r; return *this; }
  PropDef& ReadsOnlyWhen(std::string option, std::string value) {
    reads_only_when = {std::move(option), std::move(value)};
    return *this;
  }
  // The rules as text for the docs ("1 to 100000", "one of: a, b"); "" = none.
  std::string RulesText() const;
};

// Retry policy of an output (its `retry` option; every output has one).
struct RetryPolicy {
  int64_t base_ms = 100;
  int64_t max_ms = 5000;
  int64_t max_attempts = 5;  // without a state dir, then the batch is dropped and counted
};


// The shape of a component's value in YAML.
enum class Shape {
  kOptions,       // a map of options from the property table
  kExpr,          // filter: 'expr'
  kExprMap,       // map: {field: expr}
  kStringList,    // remove: [a, b]
  kStringMap,     // rename: {from: to}
  kStringOrList,  // pipeline: a | [a, b]
};

class Options;
using InputFactory =
    std::function<std::unique_ptr<Input>(const Options&, const ComponentContext&)>;
using TransformFactory =
    std::function<std::unique_ptr<Transform>(const Options&, const ComponentContext&)>;
using OutputFactory =
    std::function<std::unique_ptr<Output>(const Options&, const ComponentContext&)>;

struct ComponentDef {
  std::string kind;  // input | transform | output
  std::string type;
  Shape shape = Shape::kOptions;
  // An input whose value names the pipelines it reads (shape kStringOrList).
  bool reads_pipelines = false;
  std::vector<PropDef> props;
  std::string help;
  std::string checkpoint;  // what it keeps in a checkpoint (docs)
  std::string bad_input;   // what it does on bad input (docs)
  InputFactory make_input;
  TransformFactory make_transform;
  OutputFactory make_output;
};

// A component's validated options. Getters return the value or the declared
// default. Factories report semantic errors with Error(), which records them
// at the option's place in the file; a factory that reported an error
// returns nullptr.
class Options {
 public:
  Options(const ComponentDef* def, YAML::Node value, SourceMark mark, ErrorList* errors)
      : def_(def), value_(std::move(value)), mark_(std::move(mark)), errors_(errors) {}

  bool Has(const std::string& name) const;
  std::string String(const std::string& name) const;
  int64_t Int(const std::string& name) const;
  double Number(const std::string& name) const;
  bool Bool(const std::string& name) const;
  std::vector<std::string> Strings(const std::string& name) const;
  std::vector<std::pair<std::string, std::string>> StringMap(const std::string& name) const;
  // Compiles an expression option; on a syntax error records it at the exact
  // column and returns nullptr.
  std::shared_ptr<const expr::Expr> Expr(const std::string& name) const;
  // Compiles `node` (a scalar somewhere in this component) as an expression.
  std::shared_ptr<const expr::Expr> ExprAt(const YAML::Node& node) const;

  // The raw value, for shorthand shapes (filter, map, remove, rename).
  const YAML::Node& value() const { return value_; }
  const SourceMark& mark() const { return mark_; }
  SourceMark MarkOfOption(const std::string& name) const;

  void Error(const std::string& name, const std::string& message) const;  // at the option
  void ErrorAt(const YAML::Node& node, const std::string& message) const;
  bool failed() const { return failed_; }

 private:
  const PropDef* Find(const std::string& name) const;
  YAML::Node Get(const std::string& name) const;

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
