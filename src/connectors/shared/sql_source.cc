#include "connectors/shared/sql_source.h"

#include "common/json_text.h"

namespace kayak {

std::vector<PropDef> SqlSourceProps(const std::string& db) {
  return {
      PropDef{"query", PropType::kString, true, "",
              "a SELECT; kayak reads it as a subquery"}.NonEmpty(),
      PropDef{"mode", PropType::kString, false, "incremental",
              "incremental (after a checkpointed cursor) or snapshot (everything, every poll)"}
          .OneOf({"incremental", "snapshot"}),
      {"watermark", PropType::kString, false, "",
       "incremental: an ordered column of the query (a timestamp, number or text)"},
      {"tiebreak", PropType::kString, false, "",
       "incremental: a unique column; the cursor is (watermark, tiebreak)"},
      PropDef{"start_from", PropType::kString, false, "",
              "incremental: the first watermark read when nothing is checkpointed, in " + db +
                  "'s own literal for the column's type, without quotes ('2026-01-01 00:00:00', "
                  "100)",
              PropRole::kTuning},
      PropDef{"lag_secs", PropType::kNumber, false, "0",
              "incremental: read only rows whose watermark is older than the server's now() "
              "minus this, so rows that commit late are not skipped",
              PropRole::kTuning}
          .AtLeast(0)
          .Unit("s"),
      PropDef{"poll_secs", PropType::kNumber, false, "1",
              "how long to wait for new rows once caught up", PropRole::kTuning}
          .Range(0.001, 86400).Unit("s"),
      PropDef{"batch_size", PropType::kInt, false, "1000", "most rows a read",
              PropRole::kTuning}.Range(1, 100000),
  };
}

SqlSourceOptions ReadSqlSourceOptions(const Options& o) {
  SqlSourceOptions s;
  s.query = o.String("query");
  s.mode = o.String("mode");
  s.watermark = o.String("watermark");
  s.tiebreak = o.String("tiebreak");
  s.start_from = o.String("start_from");
  s.lag_secs = o.Number("lag_secs");
  s.poll_ms = static_cast<int64_t>(o.Number("poll_secs") * 1000);
  s.batch_size = o.Int("batch_size");
  if (s.incremental() && s.watermark.empty()) {
    o.Error("mode", "incremental reads need a `watermark` column");
  }
  if (!s.incremental()) {
    for (const char* name : {"watermark", "tiebreak", "start_from", "lag_secs"}) {
      if (o.Has(name)) o.Error(name, std::string("`") + name + "` is for incremental reads");
    }
  }
  return s;
}

std::string EncodeCursor(std::string_view watermark_json, std::string_view tiebreak_json) {
  std::string s = "{\"watermark\":";
  s.append(watermark_json);
  if (!tiebreak_json.empty()) {
    s += ",\"tiebreak\":";
    s.append(tiebreak_json);
  }
  s += '}';
  return s;
}

Status DecodeCursor(std::string_view position, std::string* watermark_json,
                    std::string* tiebreak_json) {
  const size_t open = jtext::SkipWs(position, 0);
  jtext::Member wm, tb;
  if (open >= position.size() || position[open] != '{' ||
      !jtext::FindMember(position, open, "watermark", &wm)) {
    return Status::Corruption("a position that is not a cursor: " + std::string(position));
  }
  *watermark_json = std::string(wm.value.of(position));
  tiebreak_json->clear();
  if (jtext::FindMember(position, open, "tiebreak", &tb)) {
    *tiebreak_json = std::string(tb.value.of(position));
  }
  return Status::Ok();
}

std::string NoTiebreakWarning(const std::string& pipeline, const std::string& type) {
  return "pipeline " + pipeline + ": " + type +
         " input without `tiebreak`: rows that share a watermark are read together, and a row "
         "committed later with the watermark already read is missed";
}

}  // namespace kayak
