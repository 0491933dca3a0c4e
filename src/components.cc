#include "components.h"

#include "sdk/component_list.h"

#include <memory>
#include <vector>

// The one list of every component: the function that declares it (defined
// beside its implementation, in src/connectors/<system>/ or src/transforms/).
// A new component adds its line here and nowhere else outside its folder.
#define KAYAK_COMPONENTS(X) \
  /* inputs */              \
  X(DummyInputDef)          \
  X(FileInputDef)           \
  X(HttpInputDef)           \
  X(HttpPollInputDef)       \
  X(ClickhouseInputDef)     \
  X(KafkaInputDef)          \
  X(MqttInputDef)           \
  X(NatsInputDef)           \
  X(OpcuaInputDef)          \
  X(PipelineInputDef)       \
  X(PostgresInputDef)       \
  X(RedisInputDef)          \
  X(TcpInputDef)            \
  X(UdpInputDef)            \
  /* transforms */          \
  X(FilterDef)              \
  X(MapDef)                 \
  X(RemoveDef)              \
  X(RenameDef)              \
  X(RepartitionDef)         \
  X(RollingWindowDef)       \
  X(BucketTransformDef)     \
  X(LookupDef)              \
  X(BufferDef)              \
  X(LuaDef)                 \
  /* outputs */             \
  X(ClickhouseOutputDef)    \
  X(FileOutputDef)          \
  X(HttpOutputDef)          \
  X(KafkaOutputDef)         \
  X(MqttOutputDef)          \
  X(NatsOutputDef)          \
  X(RedisOutputDef)         \
  X(S3OutputDef)            \
  X(PostgresOutputDef)      \
  X(StdoutOutputDef)

namespace kayak {

#define KAYAK_DECLARE(def) ComponentDef def();
KAYAK_COMPONENTS(KAYAK_DECLARE)
#undef KAYAK_DECLARE

namespace {

ComponentList MakeBuiltins() {
  ComponentList list;
#define KAYAK_LIST(def) def,
  for (auto make : {KAYAK_COMPONENTS(KAYAK_LIST)}) {
#undef KAYAK_LIST
    ComponentDef* d = list.Add(make());
    if (d->kind == "output") d->props.push_back(RetryPropDef());
  }
  return list;
}

}  // namespace

PropDef RetryPropDef() {
  return {"retry", PropType::kStringMap, false, "{base_ms: 100, max_ms: 5000, max_attempts: 5}",
          "backoff between attempts to write a batch; without a state dir a batch that still "
          "fails after max_attempts is dropped and counted",
          PropRole::kTuning};
}

ComponentDef PipelineInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "pipeline";
  d.shape = Shape::kStringOrList;
  d.reads_pipelines = true;
  d.help = "Reads what other pipelines emit: `pipeline: upstream` or `pipeline: [a, b]` (merged).";
  d.checkpoint = "nothing: covered by the upstream pipelines' checkpoints";
  d.bad_input =
      "nothing of its own: it passes on what its upstreams emit";
  return d;
}

namespace {

const char* ShapeText(Shape s) {
  switch (s) {
    case Shape::kExpr: return "an expression string: `filter: 'value > 0'`";
    case Shape::kExprMap: return "a map of field to expression: `map: {c: '(f - 32) * 5 / 9'}`";
    case Shape::kStringList: return "a list of field paths: `remove: [a, b.c]`";
    case Shape::kStringMap: return "a map of field path to field path: `rename: {from: to}`";
    case Shape::kStringOrList: return "a pipeline id or a list of them: `pipeline: [a, b]`";
    case Shape::kOptions: return "a map of the options below";
  }
  return "";
}

}  // namespace

std::string ComponentReferenceMarkdown() {
  std::string out =
      "# Component reference\n\n"
      "Generated from the property tables in `src/` (`ComponentReferenceMarkdown()`); the unit "
      "test `Docs.ComponentReferenceIsCurrent` fails when this file and the code disagree.\n"
      "Every option is checked when the config is loaded: an unknown option, a missing required "
      "one or a value of the wrong type is reported as `file:line:column: message`.\n"
      "The 'In a checkpoint' line says what the component hands over at a checkpoint barrier "
      "when the server runs with `--state-dir` (see `durability.md` for what is built so far).\n"
      "An option's role says what a change of it does to the component's checkpointed state: "
      "an *identity* option decides what the component reads or computes, and changing it "
      "makes that state start empty (an input starts from its configured beginning); a "
      "*tuning* option decides only how fast or in what chunks, or how the system is reached "
      "(credentials), and changing it keeps the state; an *address* counts for identity by the "
      "part that names the data only (a URL's scheme and path, a libpq string's dbname), its "
      "user, password, host and port are tuning (`durability.md`, 'Config changes'; "
      "`connectors.md`, 'Identity and tuning'). The rules (ranges, choices) are checked when "
      "the config is loaded, from the same table.\n";
  for (const char* kind : {"input", "transform", "output"}) {
    out += std::string("\n## ") + (std::string(kind) == "input" ? "Inputs" :
                                   std::string(kind) == "transform" ? "Transforms" : "Outputs") +
           "\n";
    for (const auto* d : BuiltinComponents().All()) {
      if (d->kind != kind) continue;
      out += "\n### `" + d->type + "`\n\n" + d->help + "\n\n";
      out += "- Takes: " + std::string(ShapeText(d->shape)) + ".\n";
      out += "- On bad input: " + d->bad_input + ".\n";
      out += "- In a checkpoint: " + d->checkpoint + ".\n";
      if (!d->props.empty()) {
        out += "\n| option | type | required | default | role | rules | meaning |\n"
               "|---|---|---|---|---|---|---|\n";
        for (const auto& p : d->props) {
          std::string rules = p.RulesText();
          if (!p.unit.empty()) rules += (rules.empty() ? "" : " ") + std::string("(") + p.unit + ")";
          out += "| `" + p.name + "` | " + PropTypeName(p.type) + " | " +
                 (p.required ? "yes" : "no") + " | " +
                 (p.default_text.empty() ? "" : "`" + p.default_text + "`") + " | " +
                 (p.role == PropRole::kTuning ? "tuning" : p.address ? "address" : "identity") + " | " + rules + " | " +
                 p.help + (p.secret ? " (secret: the API shows `***`)" : "") + " |\n";
        }
      }
    }
  }
  return out;
}

const ComponentRegistry& BuiltinComponents() {
  static const ComponentList registry = MakeBuiltins();
  return registry;
}

}  // namespace kayak
