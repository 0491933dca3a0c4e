// bucket: writes a per-key value into a named bucket (set, add, min, max,
// count, append) or reads one into the message (lookup). Also the `lookup`
// transform, the same read under its own name.
#include "common/clock.h"
#include "components.h"
#include "state/bucket.h"
#include "transforms/field_access.h"

namespace kayak {

namespace {

enum class Op { kSet, kAdd, kMin, kMax, kCount, kAppend, kLookup };

bool ParseOp(const std::string& s, Op* op) {
  static const std::pair<const char*, Op> kOps[] = {
      {"set", Op::kSet},     {"add", Op::kAdd},     {"min", Op::kMin},       {"max", Op::kMax},
      {"count", Op::kCount}, {"append", Op::kAppend}, {"lookup", Op::kLookup}};
  for (const auto& [name, o] : kOps) {
    if (s == name) {
      *op = o;
      return true;
    }
  }
  return false;
}

Json AddNumbers(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer()) {
    int64_t r;
    if (!__builtin_add_overflow(a.get<int64_t>(), b.get<int64_t>(), &r)) return Json(r);
  }
  return Json(a.get<double>() + b.get<double>());
}

class BucketTransform final : public Transform {
 public:
  struct Config {
    Bucket* bucket = nullptr;
    FieldPath key;
    Op op = Op::kSet;
    FieldPath field;
    FieldPath as;  // empty: do not put the value into the message
    size_t max_items = 1000;
    bool follow_partition = false;  // in a cluster: the key is the message's Kafka key
  };
  BucketTransform(Config c, const Clock* clock) : c_(std::move(c)), clock_(clock) {}

  Status Process(Batch* batch) override {
    const int64_t now = clock_->NowMs();
    return ForEachMessage(batch, [&](Message& m) { return One(batch, m, now); });
  }

  void Tick(int64_t now_ms, Batch*) override { c_.bucket->Expire(now_ms); }

 private:
  Status One(Batch* batch, Message& m, int64_t now) {
    KAYAK_RETURN_IF_ERROR(OpenFields(batch, m, &doc_, true));
    scratch_.Reset();
    KAYAK_RETURN_IF_ERROR(KeyOf(doc_, c_.key, &scratch_, &key_));
    if (c_.follow_partition) KAYAK_RETURN_IF_ERROR(FollowsPartition(key_, m, c_.key));
    const std::string* key = &key_;
    Json result;
    if (c_.op == Op::kLookup) {
      auto e = c_.bucket->Get(*key, now);
      result = e ? e->value : Json(nullptr);
    } else {
      Json field;
      const Json* v = &field;
      if (c_.op != Op::kCount) {
        const expr::Value fv = doc_.Get(c_.field, &scratch_);
        if (fv.missing()) {
          return Status::Invalid("field '" + FieldPathToString(c_.field) + "' is missing");
        }
        if ((c_.op == Op::kAdd || c_.op == Op::kMin || c_.op == Op::kMax) && !fv.is_number()) {
          return Status::Invalid("field '" + FieldPathToString(c_.field) + "' is " +
                                 expr::TypeName(fv) + ", not a number");
        }
        field = ToJson(fv);
      }
      KAYAK_RETURN_IF_ERROR(c_.bucket->Update(
          *key, now,
          [&](Json& value, bool existed) -> Status {
            if (existed && c_.op != Op::kSet && c_.op != Op::kAppend && !value.is_number()) {
              return Status::Invalid("bucket '" + c_.bucket->name() + "' holds a " +
                                     JsonTypeName(value) + " at key '" + *key +
                                     "', not a number");
            }
            switch (c_.op) {
              case Op::kSet: value = *v; break;
              case Op::kAdd: value = existed ? AddNumbers(value, *v) : *v; break;
              case Op::kMin: if (!existed || v->get<double>() < value.get<double>()) value = *v; break;
              case Op::kMax: if (!existed || v->get<double>() > value.get<double>()) value = *v; break;
              case Op::kCount: value = existed ? AddNumbers(value, Json(1)) : Json(1); break;
              case Op::kAppend:
                if (!value.is_array()) value = Json::array();
                value.push_back(*v);
                if (value.size() > c_.max_items) {
                  value.erase(value.begin(),
                              value.begin() + static_cast<ptrdiff_t>(value.size() - c_.max_items));
                }
                break;
              case Op::kLookup: break;
            }
            return Status::Ok();
          },
          c_.as.empty() ? nullptr : &result));
    }
    if (!c_.as.empty()) {
      value_.clear();
      AppendJsonOf(result, &value_);
      KAYAK_RETURN_IF_ERROR(SetField(batch, m, doc_, c_.as, value_, &buf_, &members_));
    }
    return Status::Ok();
  }

  Config c_;
  const Clock* clock_;
  // Reused from message to message.
  expr::Document doc_;
  expr::Scratch scratch_;
  std::string key_;
  std::string value_;
  std::string buf_;
  std::vector<jtext::Member> members_;  // the patched payload's
};

std::unique_ptr<Transform> Make(const Options& o, const ComponentContext& ctx,
                                const std::string& bucket_opt, Op op, size_t max_items) {
  BucketTransform::Config c;
  c.op = op;
  c.max_items = max_items;
  c.bucket = ctx.buckets->Find(o.String(bucket_opt));
  PathOption(o, "key", &c.key);
  if (op != Op::kCount && op != Op::kLookup) {
    if (!o.Has("field")) {
      o.Error("op", "op '" + o.String("op") + "' needs the option 'field'");
    } else {
      PathOption(o, "field", &c.field);
    }
  }
  if (o.Has("as")) PathOption(o, "as", &c.as);
  // A lookup reads: any key, from any partition.
  c.follow_partition = ctx.partitions != nullptr && op != Op::kLookup;
  if (op == Op::kLookup && c.as.empty()) o.Error(bucket_opt, "a lookup needs the option 'as'");
  if (o.failed() || c.bucket == nullptr) return nullptr;  // an unknown bucket: reported by the loader
  return std::make_unique<BucketTransform>(std::move(c), ctx.clock);
}

}  // namespace

ComponentDef BucketTransformDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "bucket";
  d.help =
      "Writes into the named bucket, per key: `set` stores the field's value, `add` sums, "
      "`min`/`max` keep the extreme, `count` counts messages, `append` keeps the last "
      "`max_items` values in a list. `lookup` reads the key's entry (null if none) into `as`. "
      "With `as`, a write also puts the entry's new value into the message.";
  d.checkpoint = "nothing itself; the bucket is checkpointed once per checkpoint, after every "
                 "pipeline bound to it reached the barrier";
  d.bad_input =
      "a missing key or value field, a value that is not a number for add/min/max, or an entry that holds a non-number for add/min/max/count is a transform error; the entry is left as it was. In a cluster, so is a write whose key is not the message's Kafka key (docs/cluster.md)";
  d.props = {
      PropDef{"name", PropType::kString, true, "", "the bucket, declared under top-level `buckets`"}.Refers(PropRef::kBucketWrite).ReadsOnlyWhen("op", "lookup"),
      {"key", PropType::kString, true, "", "field path of the key"},
      PropDef{"op", PropType::kString, true, "", "set | add | min | max | count | append | lookup"}.OneOf({"set", "add", "min", "max", "count", "append", "lookup"}),
      {"field", PropType::kString, false, "", "field path of the value (not for count, lookup)"},
      {"as", PropType::kString, false, "", "field to put the entry's value into"},
      PropDef{"max_items", PropType::kInt, false, "1000", "append: most values kept per key"}.AtLeast(1),
  };
  d.make_transform = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Transform> {
    Op op;
    if (!ParseOp(o.String("op"), &op)) {
      o.Error("op", "unknown op '" + o.String("op") +
                        "' (known: set, add, min, max, count, append, lookup)");
      return nullptr;
    }
    return Make(o, ctx, "name", op, static_cast<size_t>(o.Int("max_items")));
  };
  return d;
}

ComponentDef LookupDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "lookup";
  d.help = "Enriches each message with a bucket's entry for its key (null when there is none).";
  d.checkpoint = "nothing";
  d.bad_input =
      "a missing key field or a payload that is not a JSON object is a transform error";
  d.props = {
      PropDef{"bucket", PropType::kString, true, "", "the bucket to read"}.Refers(PropRef::kBucketRead),
      {"key", PropType::kString, true, "", "field path of the key"},
      {"as", PropType::kString, true, "", "field to put the entry's value into"},
  };
  d.make_transform = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Transform> {
    return Make(o, ctx, "bucket", Op::kLookup, 0);
  };
  return d;
}

}  // namespace kayak
