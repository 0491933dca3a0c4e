// The clickhouse input: a query read over the HTTP interface (JSONEachRow),
// incrementally after a (watermark, tiebreak) cursor that is the input's
// checkpointed position, or whole on every poll (snapshot).
// docs/components.md, "clickhouse".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <thread>

#include "common/clock.h"
#include "common/json_text.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "common/sql_source.h"
#include "components.h"
#include "connectors/clickhouse/ch.h"

namespace kayak {

namespace {

constexpr uint64_t kSnapshotLimit = 256u << 20;  // the largest snapshot answer read

// Numbers as numbers (kayak keeps 64-bit integers exact), NaN and the
// infinities as strings (JSON has no word for them).
const std::string kReadSettings =
    "&output_format_json_quote_64bit_integers=0&output_format_json_quote_denormals=1";

// "Nullable(DateTime('UTC'))" -> "DateTime('UTC')"
std::string_view BaseType(std::string_view t, bool* nullable) {
  *nullable = t.rfind("Nullable(", 0) == 0;
  if (*nullable) t = t.substr(9, t.size() - 10);
  return t;
}

class ChInput final : public Input {
 public:
  ChInput(ch::Settings cs, SqlSourceOptions o, const ComponentContext& ctx)
      : o_(std::move(o)), client_(std::move(cs)), clock_(ctx.clock), stats_(ctx.stats) {
    if (incremental() && o_.tiebreak.empty()) {
      KLOG_WARN("{}", NoTiebreakWarning(ctx.pipeline_id, "clickhouse"));
    }
  }

  Status Open() override {
    Status st = client_.Init();
    if (st.ok() && !incremental()) client_.set_body_limit(kSnapshotLimit);
    return st;
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    if (!pending_.empty()) {  // the rest of a snapshot answer
      TakePending(out);
      return Status::Ok();
    }
    const int64_t now = MonotonicMs();
    if (now < next_poll_ms_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(wait_ms, next_poll_ms_ - now)));
      return Status::Ok();
    }
    Status st = described_ ? Status::Ok() : Describe();
    if (st.ok()) st = incremental() ? ReadIncremental(out) : ReadSnapshot(out);
    return st;
  }

  bool Rewindable() const override { return true; }

  std::string SavePosition() const override {
    if (!incremental() || cursor_wm_.empty()) return "";
    return EncodeCursor(cursor_wm_, cursor_tb_);
  }

  Status RestorePosition(std::string_view position) override {
    if (position.empty() || !incremental()) return Status::Ok();
    Status st = DecodeCursor(position, &cursor_wm_, &cursor_tb_);
    if (st.ok() && !o_.tiebreak.empty() && cursor_tb_.empty()) {
      st = Status::Corruption("the checkpointed cursor has no tiebreak");
    }
    if (!st.ok()) {
      cursor_wm_.clear();
      return Status::Corruption("clickhouse input: " + st.message());
    }
    return Status::Ok();
  }

  std::string Position() const override {
    if (!incremental()) return "snapshot pass " + std::to_string(passes_);
    if (cursor_wm_.empty()) return "no row read yet";
    return o_.watermark + " " + cursor_wm_ +
           (o_.tiebreak.empty() ? "" : ", " + o_.tiebreak + " " + cursor_tb_);
  }

 private:
  SqlSourceOptions o_;
  ch::Client client_;
  const Clock* clock_;
  ComponentStats* stats_;
  bool described_ = false;
  std::string select_;   // the query's columns, DateTimes as RFC 3339 strings in UTC
  bool wm_numeric_ = false, tb_numeric_ = false;
  bool wm_datetime_ = false, tb_datetime_ = false;
  std::string cursor_wm_, cursor_tb_;  // JSON texts of the last row's values
  int64_t next_poll_ms_ = 0;
  std::deque<Message> pending_;
  uint64_t passes_ = 0;

  bool incremental() const { return o_.incremental(); }

  // The query's columns and types: a query that does not run, or a watermark
  // or tiebreak it lacks, stops the input naming the option.
  Status Describe() {
    auto r = client_.Query("SELECT * FROM (" + o_.query + ") LIMIT 0 FORMAT JSON");
    if (!r.ok()) {
      return r.status().retryable() ? r.status() : Status::Invalid("query: " + r.status().message());
    }
    Json meta;
    try {
      meta = Json::parse(*r).at("meta");
    } catch (const std::exception& e) {
      return Status::Invalid("query: clickhouse answered something that is not its JSON format");
    }
    select_.clear();
    std::string cols;
    bool has_wm = false, has_tb = false;
    for (const auto& col : meta) {
      const std::string name = col.value("name", "");
      bool nullable = false;
      const std::string full = col.value("type", "");
      const std::string_view type = BaseType(full, &nullable);
      const bool datetime = type.rfind("DateTime", 0) == 0;
      const bool numeric = type.rfind("Int", 0) == 0 || type.rfind("UInt", 0) == 0 ||
                           type.rfind("Float", 0) == 0 || type.rfind("Decimal", 0) == 0;
      if (!select_.empty()) select_ += ", ";
      const std::string q = ch::QuoteIdent(name);
      if (datetime) {
        const std::string f = "formatDateTime(" + std::string(nullable ? "assumeNotNull(" + q + ")" : q) +
                              ", '%Y-%m-%dT%H:%M:%SZ', 'UTC')";
        select_ += (nullable ? "if(isNull(" + q + "), NULL, " + f + ")" : f) + " AS " + q;
      } else {
        select_ += q;
      }
      if (name == o_.watermark) {
        has_wm = true;
        wm_numeric_ = numeric;
        wm_datetime_ = datetime;
        if (o_.lag_secs > 0 && !datetime && type != "Date") {
          return Status::Invalid("lag_secs: the watermark '" + o_.watermark +
                                 "' is not a DateTime or Date column, so it has no age");
        }
      }
      if (name == o_.tiebreak) {
        has_tb = true;
        tb_numeric_ = numeric;
        tb_datetime_ = datetime;
      }
      cols += (cols.empty() ? "" : ", ") + name;
    }
    if (incremental() && !has_wm) {
      return Status::Invalid("watermark: '" + o_.watermark +
                             "' is not a column of the query (its columns: " + cols + ")");
    }
    if (incremental() && !o_.tiebreak.empty() && !has_tb) {
      return Status::Invalid("tiebreak: '" + o_.tiebreak +
                             "' is not a column of the query (its columns: " + cols + ")");
    }
    if (incremental() && !o_.start_from.empty() && wm_numeric_) {
      char* end = nullptr;
      std::strtod(o_.start_from.c_str(), &end);
      if (end == o_.start_from.c_str() || *end != 0) {
        return Status::Invalid("start_from: '" + o_.start_from +
                               "' is not a number, and the watermark is a number column");
      }
    }
    described_ = true;
    return Status::Ok();
  }

  // The SQL literal of a cursor value (the JSON text of what was read).
  static std::string Literal(const std::string& json, bool numeric, bool datetime) {
    if (json.empty() || json[0] != '"') return json;  // a number
    std::string text;
    jtext::DecodeString(json, &text);
    if (datetime) return "parseDateTimeBestEffort(" + ch::QuoteString(text) + ")";
    return numeric ? text : ch::QuoteString(text);
  }

  Status ReadIncremental(Batch* out) {
    const std::string wm = ch::QuoteIdent(o_.watermark);
    const bool tb = !o_.tiebreak.empty();
    const std::string tbq = tb ? ch::QuoteIdent(o_.tiebreak) : "";
    std::string where = "isNotNull(" + wm + ")";
    if (tb) where += " AND isNotNull(" + tbq + ")";
    if (!cursor_wm_.empty()) {
      const std::string w = Literal(cursor_wm_, wm_numeric_, wm_datetime_);
      if (tb) {
        where += " AND (" + wm + " > " + w + " OR (" + wm + " = " + w + " AND " + tbq + " > " +
                 Literal(cursor_tb_, tb_numeric_, tb_datetime_) + "))";
      } else {
        where += " AND " + wm + " > " + w;
      }
    } else if (!o_.start_from.empty()) {
      where += " AND " + wm + " >= " +
               (wm_numeric_ ? o_.start_from : ch::QuoteString(o_.start_from));
    }
    if (o_.lag_secs > 0) {
      const std::string secs = std::to_string(static_cast<int64_t>(std::ceil(o_.lag_secs)));
      where += " AND " + wm + " <= " + (wm_datetime_ ? "now() - " + secs : "toDate(now() - " + secs + ")");
    }
    const std::string order = wm + (tb ? ", " + tbq : "");
    const std::string sql = "SELECT " + select_ + " FROM (SELECT * FROM (" + o_.query +
                            ") WHERE " + where + " ORDER BY " + order + " LIMIT " +
                            std::to_string(o_.batch_size) + ") ORDER BY " + order +
                            " FORMAT JSONEachRow";
    auto r = client_.Query(sql, kReadSettings);
    if (!r.ok()) return r.status();
    std::vector<std::string_view> lines = Lines(*r);
    const bool full = static_cast<int64_t>(lines.size()) >= o_.batch_size;
    if (!tb && full) {
      // Without a tiebreak the cursor cannot stop inside a group of equal
      // watermarks: leave the last group for the next read, or read all of it
      // now when the whole batch is one group.
      const std::string last = ValueOf(lines.back(), o_.watermark);
      size_t keep = lines.size();
      while (keep > 0 && ValueOf(lines[keep - 1], o_.watermark) == last) --keep;
      if (keep == 0) return ReadGroup(last, out);
      lines.resize(keep);
    }
    Emit(lines, out);
    if (!full) next_poll_ms_ = MonotonicMs() + o_.poll_ms;
    return Status::Ok();
  }

  Status ReadGroup(const std::string& value, Batch* out) {
    const std::string wm = ch::QuoteIdent(o_.watermark);
    auto r = client_.Query("SELECT " + select_ + " FROM (SELECT * FROM (" + o_.query +
                               ") WHERE " + wm + " = " +
                               Literal(value, wm_numeric_, wm_datetime_) +
                               ") FORMAT JSONEachRow",
                           kReadSettings);
    if (!r.ok()) return r.status();
    Emit(Lines(*r), out);
    cursor_wm_ = value;
    return Status::Ok();
  }

  Status ReadSnapshot(Batch* out) {
    auto r = client_.Query("SELECT " + select_ + " FROM (" + o_.query + ") FORMAT JSONEachRow",
                           kReadSettings);
    if (!r.ok()) return r.status();
    Batch all;
    Emit(Lines(*r), &all);
    for (auto& m : all.messages) pending_.push_back(std::move(m));
    ++passes_;
    next_poll_ms_ = MonotonicMs() + o_.poll_ms;
    TakePending(out);
    return Status::Ok();
  }

  void TakePending(Batch* out) {
    for (int64_t i = 0; i < o_.batch_size && !pending_.empty(); ++i) {
      out->messages.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }

  static std::vector<std::string_view> Lines(std::string_view body) {
    std::vector<std::string_view> lines;
    size_t at = 0;
    while (at < body.size()) {
      size_t nl = body.find('\n', at);
      if (nl == std::string_view::npos) nl = body.size();
      if (nl > at) lines.push_back(body.substr(at, nl - at));
      at = nl + 1;
    }
    return lines;
  }

  // The JSON text of member `name` of a row; "" when it has none.
  static std::string ValueOf(std::string_view row, const std::string& name) {
    jtext::Member m;
    const size_t open = jtext::SkipWs(row, 0);
    if (open >= row.size() || row[open] != '{' || !jtext::FindMember(row, open, name, &m)) return "";
    return std::string(m.value.of(row));
  }

  // Each line a message, in order; the cursor moves to the last one. A line
  // that is not JSON (a String column holding bytes that are not UTF-8) is
  // counted and skipped.
  void Emit(const std::vector<std::string_view>& lines, Batch* out) {
    const int64_t ts = clock_->NowMs();
    for (std::string_view line : lines) {
      if (!IsJson(line)) {
        stats_->RecordError("clickhouse: a row that is not valid JSON (bytes that are not "
                            "UTF-8?): " + std::string(line.substr(0, 200)));
        continue;
      }
      Message m(std::string(line), ts);
      m.MarkJson();
      out->messages.push_back(std::move(m));
    }
    if (incremental() && !lines.empty()) {
      cursor_wm_ = ValueOf(lines.back(), o_.watermark);
      if (!o_.tiebreak.empty()) cursor_tb_ = ValueOf(lines.back(), o_.tiebreak);
    }
  }
};

}  // namespace

std::vector<PropDef> ChConnectionProps() {
  return {
      PropDef{"url", PropType::kString, true, "",
              "the HTTP interface, http://host:port"}.NonEmpty(),
      {"user", PropType::kString, false, "default", "the user (HTTP basic authentication)"},
      PropDef{"password", PropType::kString, false, "", "its password; as ${ENV}"}.Secret(),
      {"database", PropType::kString, false, "default", "the database of unqualified names"},
      PropDef{"timeout_ms", PropType::kInt, false, "30000", "deadline of one request",
              PropRole::kTuning}.Range(100, 3600000).Unit("ms"),
  };
}

ch::Settings ChSettings(const Options& o) {
  ch::Settings s;
  s.url = o.String("url");
  s.user = o.String("user");
  s.password = o.String("password");
  s.database = o.String("database");
  s.timeout_ms = o.Int("timeout_ms");
  if (!ParseHttpUrl(s.url).ok()) o.Error("url", ParseHttpUrl(s.url).status().message());
  return s;
}

ComponentDef ClickhouseInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "clickhouse";
  d.help =
      "Reads the rows of `query` from ClickHouse over its HTTP interface (JSONEachRow), one JSON "
      "object a row. `incremental` reads in (`watermark`, `tiebreak`) order after a cursor, a "
      "batch at a time, then polls for new rows; `snapshot` reads the whole result on every poll "
      "(in one answer of at most 256 MiB). Types: integers (64-bit ones too) and floats as "
      "numbers (nan and inf as strings), DateTime as RFC 3339 strings in UTC, Date and String "
      "as strings, arrays and tuples as arrays, NULL as null. Without `tiebreak`, rows that "
      "share a watermark are read in one batch and a row inserted later with a watermark "
      "already read is missed; rows inserted late with an older watermark are read only with "
      "`lag_secs` covering the delay.";
  d.checkpoint = "incremental: the cursor (the last row's watermark and tiebreak), so a restart "
                 "resumes after it rather than from `start_from`; snapshot: nothing (a restart "
                 "reads the whole result again)";
  d.bad_input = "an unreachable or overloaded server is retried with backoff (the card shows "
                "retrying); a query that does not run, or a watermark, tiebreak, start_from or "
                "lag_secs that does not fit the query's columns, stops the input naming the "
                "option; a row that is not valid JSON is counted on the card and skipped; rows "
                "whose watermark or tiebreak is NULL are not read";
  d.props = ChConnectionProps();
  for (auto& p : SqlSourceProps("ClickHouse")) d.props.push_back(std::move(p));
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    ch::Settings cs = ChSettings(o);
    SqlSourceOptions so = ReadSqlSourceOptions(o);
    if (o.failed()) return nullptr;
    return std::make_unique<ChInput>(std::move(cs), std::move(so), ctx);
  };
  return d;
}

}  // namespace kayak
