// filter, map, remove, rename: stateless transforms on message fields.
#include "common/clock.h"
#include "components.h"
#include "expr/expr.h"
#include "transforms/field_access.h"

namespace kayak {

namespace {

class FilterTransform final : public Transform {
 public:
  FilterTransform(std::shared_ptr<const expr::Expr> e, const Clock* clock)
      : expr_(std::move(e)), clock_(clock) {}

  Status Process(Batch* batch) override {
    return KeepMessages(batch, [&](Message& m, bool* keep) -> Status {
      KAYAK_RETURN_IF_ERROR(OpenFields(batch, m, &doc_, false));
      scratch_.Reset();
      expr::Value v;
      KAYAK_RETURN_IF_ERROR(expr_->Eval(doc_, &scratch_, *clock_, &v));
      if (v.type != expr::Value::Type::kBool) {
        return Status::Invalid(std::string("filter expression gave ") +
                               (v.missing() ? "a missing field" : expr::TypeName(v)) +
                               ", not a bool");
      }
      *keep = v.b;
      return Status::Ok();
    });
  }

 private:
  std::shared_ptr<const expr::Expr> expr_;
  const Clock* clock_;
  expr::Document doc_;
  expr::Scratch scratch_;
};

class MapTransform final : public Transform {
 public:
  struct Assignment {
    FieldPath path;
    std::string name;
    std::shared_ptr<const expr::Expr> expr;
  };
  MapTransform(std::vector<Assignment> a, const Clock* clock)
      : assignments_(std::move(a)), clock_(clock) {}

  Status Process(Batch* batch) override {
    return ForEachMessage(batch, [&](Message& m) -> Status {
      KAYAK_RETURN_IF_ERROR(OpenFields(batch, m, &doc_, true));
      // Assignments apply in order; a later one sees the earlier ones.
      for (size_t i = 0; i < assignments_.size(); ++i) {
        const Assignment& a = assignments_[i];
        if (i > 0) KAYAK_RETURN_IF_ERROR(OpenFields(batch, m, &doc_, true));  // changed since
        scratch_.Reset();
        expr::Value v;
        Status st = a.expr->Eval(doc_, &scratch_, *clock_, &v);
        if (!st.ok()) return Status::Invalid("'" + a.name + "': " + st.message());
        if (v.missing()) {
          return Status::Invalid("'" + a.name + "': the expression '" + a.expr->text() +
                                 "' names a missing field");
        }
        value_.clear();
        expr::AppendJson(v, &value_);
        KAYAK_RETURN_IF_ERROR(SetField(batch, m, doc_, a.path, value_, &buf_, &members_));
      }
      return Status::Ok();
    });
  }

 private:
  std::vector<Assignment> assignments_;
  const Clock* clock_;
  expr::Document doc_;
  expr::Scratch scratch_;
  std::string value_;  // the assigned value's JSON
  std::string buf_;    // the patched payload, swapped into the message
  std::vector<jtext::Member> members_;  // its members
};

class RemoveTransform final : public Transform {
 public:
  explicit RemoveTransform(std::vector<FieldPath> paths) : paths_(std::move(paths)) {}
  Status Process(Batch* batch) override {
    return ForEachMessage(batch, [&](Message& m) -> Status {
      KAYAK_RETURN_IF_ERROR(OpenFields(batch, m, &doc_, true));
      for (const auto& p : paths_) {
        if (jtext::RemovePath(m.payload(), p, &buf_)) m.SwapJsonPayload(&buf_);
      }
      return Status::Ok();
    });
  }

 private:
  std::vector<FieldPath> paths_;
  expr::Document doc_;
  std::string buf_;
};

class RenameTransform final : public Transform {
 public:
  explicit RenameTransform(std::vector<std::pair<FieldPath, FieldPath>> moves)
      : moves_(std::move(moves)) {}
  Status Process(Batch* batch) override {
    return ForEachMessage(batch, [&](Message& m) -> Status {
      KAYAK_RETURN_IF_ERROR(OpenFields(batch, m, &doc_, true));
      for (const auto& [from, to] : moves_) {
        jtext::Span span;
        if (!jtext::FindPath(m.payload(), from, &span)) continue;  // nothing to rename
        moved_.assign(span.of(m.payload()));
        if (jtext::RemovePath(m.payload(), from, &buf_)) m.SwapJsonPayload(&buf_);
        if (!jtext::SetPath(m.payload(), to, moved_, &buf_)) {
          return Status::Invalid("cannot rename to '" + FieldPathToString(to) +
                                 "': a parent is not an object");
        }
        m.SwapJsonPayload(&buf_);
      }
      return Status::Ok();
    });
  }

 private:
  std::vector<std::pair<FieldPath, FieldPath>> moves_;
  expr::Document doc_;
  std::string moved_;  // the moved value's JSON
  std::string buf_;
};

// Entry `i`'s key or value as a field path; an error at it if it is not one.
FieldPath PathAt(const Options& o, size_t i, bool key, const std::string& text, bool* ok) {
  FieldPath p;
  if (!ParseFieldPath(text, &p)) {
    o.ErrorAtEntry(i, key, "'" + text + "' is not a field path (like a.b[0])");
    *ok = false;
  }
  return p;
}

}  // namespace

ComponentDef FilterDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "filter";
  d.shape = Shape::kExpr;
  d.help = "`filter: EXPR` keeps the messages for which the expression is true. An expression "
           "that is not a bool, or fails, is a transform error.";
  d.checkpoint = "nothing";
  d.bad_input =
      "a payload that is not JSON, an expression that fails (a missing field in arithmetic, a type error) or gives something other than a bool is a transform error: the batch is dropped and counted";
  d.make_transform = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Transform> {
    auto e = o.ExprOfEntry(0);
    if (e == nullptr) return nullptr;
    return std::make_unique<FilterTransform>(e, ctx.clock);
  };
  return d;
}

ComponentDef MapDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "map";
  d.shape = Shape::kExprMap;
  d.help = "`map: {field: EXPR, ...}` sets fields (a dotted name sets a nested field), in the "
           "order written; later expressions see earlier results.";
  d.checkpoint = "nothing";
  d.bad_input =
      "a payload that is not a JSON object, an expression that fails or names a missing field, or a path through a non-object is a transform error: the batch is dropped and counted";
  d.make_transform = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Transform> {
    std::vector<MapTransform::Assignment> as;
    bool ok = true;
    const auto entries = o.Entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      MapTransform::Assignment a;
      a.name = entries[i].key;
      a.path = PathAt(o, i, true, entries[i].key, &ok);
      a.expr = o.ExprOfEntry(i);
      ok = ok && a.expr != nullptr;
      as.push_back(std::move(a));
    }
    if (!ok) return nullptr;
    return std::make_unique<MapTransform>(std::move(as), ctx.clock);
  };
  return d;
}

ComponentDef RemoveDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "remove";
  d.shape = Shape::kStringList;
  d.help = "`remove: [field, ...]` deletes fields; a field that is not there is ignored.";
  d.checkpoint = "nothing";
  d.bad_input =
      "a payload that is not a JSON object is a transform error; fields that are not there are ignored";
  d.make_transform = [](const Options& o, const ComponentContext&) -> std::unique_ptr<Transform> {
    std::vector<FieldPath> paths;
    bool ok = true;
    const auto entries = o.Entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      paths.push_back(PathAt(o, i, false, entries[i].value, &ok));
    }
    if (!ok) return nullptr;
    return std::make_unique<RemoveTransform>(std::move(paths));
  };
  return d;
}

ComponentDef RenameDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "rename";
  d.shape = Shape::kStringMap;
  d.help = "`rename: {from: to, ...}` moves fields; a missing `from` is ignored.";
  d.checkpoint = "nothing";
  d.bad_input =
      "a payload that is not a JSON object is a transform error; a `from` that is not there is ignored";
  d.make_transform = [](const Options& o, const ComponentContext&) -> std::unique_ptr<Transform> {
    std::vector<std::pair<FieldPath, FieldPath>> moves;
    bool ok = true;
    const auto entries = o.Entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      moves.emplace_back(PathAt(o, i, true, entries[i].key, &ok),
                         PathAt(o, i, false, entries[i].value, &ok));
    }
    if (!ok) return nullptr;
    return std::make_unique<RenameTransform>(std::move(moves));
  };
  return d;
}

// A step the loader cuts the pipeline at (config/loader.cc, "repartition"):
// it is never made as a transform. Its table is here so that its options are
// checked and documented as every component's are.
ComponentDef RepartitionDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "repartition";
  d.cuts_pipeline = true;
  d.props = {
      {"key", PropType::kExpr, true, "",
       "the new partition key: each message goes to the partition of `topic` its value hashes "
       "to (a string as it is, another value as compact JSON)"},
      {"topic", PropType::kString, true, "",
       "the topic between the two parts; create it beforehand, with the partitions the part "
       "after should be cut in"},
      PropDef{"brokers", PropType::kStringList, false, "",
              "bootstrap brokers of `topic`; default: the pipeline's kafka input's, with its "
              "`tls` and `sasl`",
              PropRole::kTuning},
      {"group", PropType::kString, false, "",
       "the consumer group of the part after; default kayak-<pipeline>-<topic>"},
      {"exactly_once", PropType::kBool, false, "true",
       "write `topic` in transactions committed with the checkpoints (needs --state-dir), so "
       "the part after counts each message once after a crash; false: at least once"},
      {"transactional_id", PropType::kString, false, "",
       "with exactly_once: the writer's transactional.id (default kayak-<pipeline>-0)"},
      {"marker_topic", PropType::kString, false, "",
       "with exactly_once: where each commit leaves a marker (default "
       "<transactional_id>.markers, one for all members of a cluster); create it with one "
       "partition"},
      PropDef{"properties", PropType::kStringMap, false, "",
              "librdkafka producer properties of the writer (transaction.timeout.ms: how long "
              "a killed member's open transaction holds up the part after)",
              PropRole::kTuning}
          .Secret(),
  };
  d.help =
      "Cuts the pipeline in two at this step: the part before it produces each message to the "
      "kafka `topic`, keyed by `key`; the part after it reads that topic as a kafka input of "
      "its own (a pipeline named <pipeline>-part2, then -part3) and goes on with the steps that "
      "follow and the outputs. A bucket or window keyed by `key` after it holds each key in one "
      "partition: in a cluster (docs/cluster.md) the way to key state by another field than the "
      "one the input topic is partitioned by. The part after reads with the consumer "
      "`properties` of the input before it when it uses that input's brokers.";
  d.checkpoint =
      "nothing itself: the part before checkpoints the topic's transactions (its kafka output), "
      "the part after the topic's offsets (its kafka input)";
  d.bad_input =
      "a message whose `key` fails goes to the pipeline's dead letters or is dropped and "
      "counted, as in the kafka output";
  d.make_transform = [](const Options& o, const ComponentContext&) -> std::unique_ptr<Transform> {
    o.Error("topic", "a repartition step is cut out of its pipeline by the loader");
    return nullptr;
  };
  return d;
}

}  // namespace kayak
