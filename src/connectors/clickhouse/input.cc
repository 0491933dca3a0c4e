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
#include "connectors/shared/sql_source.h"
#include "connectors/clickhouse/ch.h"
#include "kayak/component.h"

namespace kayak {

namespace {


// Numbers as numbers (kayak keeps 64-bit integers exact), NaN and the
// infinities as strings (JSON has no word for them).
// The cursor's condition goes down into the query's subquery, so a MergeTree
// ordered by the watermark skips what is before it.
const std::string kReadSettings =
    "&output_format_json_quote_64bit_integers=0&output_format_json_quote_denormals=1"
    "&enable_optimize_predicate_expression=1";

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

  Status Open() override { return client_.Init(); }

  // One query reads everything after the cursor (incremental) or the whole
  // result (snapshot), and its answer is read as the pipeline takes the rows:
  // a batch_size at a time, never more than a batch and a piece of the answer
  // in memory. When the answer ends, the next query waits for poll_secs.
  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    if (pending_.empty() && !streaming_) {
      if (!error_.ok()) {  // the answer that ended in an error: from the cursor again
        if (!incremental()) {  // a snapshot pass: the next one reads the whole result
          ++cut_passes_;
          KLOG_WARN("clickhouse input: snapshot pass {} cut; the next pass reads the whole "
                    "result again", passes_ + 1);
        }
        Status st = error_;
        error_ = Status::Ok();
        next_poll_ms_ = 0;
        return st;
      }
      const int64_t now = MonotonicMs();
      if (now < next_poll_ms_) {
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::min(wait_ms, next_poll_ms_ - now)));
        return Status::Ok();
      }
      // Described before every query: the columns are named in it, so a
      // column added to the table since is read, and one dropped is not asked for.
      KAYAK_RETURN_IF_ERROR(Describe());
      Status st = client_.StartQuery(incremental() ? IncrementalSql() : SnapshotSql(),
                                     kReadSettings);
      if (!st.ok() && !st.retryable()) {
        // A column dropped between the description and the query: the
        // query names it. Described again, a changed shape is asked again.
        const std::string asked = columns_;
        KAYAK_RETURN_IF_ERROR(Describe());
        if (columns_ != asked) {
          st = client_.StartQuery(incremental() ? IncrementalSql() : SnapshotSql(),
                                  kReadSettings);
        }
      }
      KAYAK_RETURN_IF_ERROR(st);
      streaming_ = true;
    }
    KAYAK_RETURN_IF_ERROR(Fill(o_.batch_size + 1));
    TakeBatch(out);
    if (pending_.empty() && !streaming_ && error_.ok()) {
      if (!incremental()) ++passes_;
      next_poll_ms_ = MonotonicMs() + o_.poll_ms;
    }
    return Status::Ok();
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
    if (!incremental()) {
      return "snapshot pass " + std::to_string(passes_) +
             (cut_passes_ > 0 ? ", " + std::to_string(cut_passes_) + " cut and read again" : "");
    }
    if (cursor_wm_.empty()) return "no row read yet";
    return o_.watermark + " " + cursor_wm_ +
           (o_.tiebreak.empty() ? "" : ", " + o_.tiebreak + " " + cursor_tb_);
  }

 private:
  SqlSourceOptions o_;
  ch::Client client_;
  const Clock* clock_;
  ComponentStats* stats_;
  std::string columns_;  // the query's columns as last described, for the log
  std::string select_;   // the query's columns, DateTimes as RFC 3339 strings in UTC
  // The DateTime fields' keys as the answer has them, and as the row gets them.
  std::vector<std::pair<std::string, std::string>> renames_;
  bool wm_numeric_ = false, tb_numeric_ = false;
  bool wm_datetime_ = false, tb_datetime_ = false;
  std::string wm_type_, tb_type_;  // without Nullable
  std::string cursor_wm_, cursor_tb_;  // JSON texts of the last handed-over row's values
  int64_t next_poll_ms_ = 0;
  bool streaming_ = false;    // an answer is being read
  std::string partial_;       // its bytes after the last whole line
  Status error_;              // what ended the answer early, once its rows are handed over
  std::deque<Message> pending_;  // rows read and not handed over yet
  uint64_t passes_ = 0;
  uint64_t cut_passes_ = 0;  // passes whose answer broke off

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
    renames_.clear();
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
        const std::string f = ch::UtcTextOf(nullable ? "assumeNotNull(" + q + ")" : q, type);
        // Under another name: the cursor's WHERE and ORDER BY use the column
        // itself (and its index); TakeLines gives the field its name back.
        std::string alias = name + "__kayak_utc";
        renames_.push_back({"\"" + alias + "\":", "\"" + name + "\":"});
        select_ += (nullable ? "if(isNull(" + q + "), NULL, " + f + ")" : f) + " AS " +
                   ch::QuoteIdent(alias);
      } else {
        select_ += q;
      }
      if (name == o_.watermark) {
        has_wm = true;
        wm_numeric_ = numeric;
        wm_datetime_ = datetime;
        wm_type_ = type;
        if (o_.lag_secs > 0 && !datetime && type != "Date") {
          return Status::Invalid("lag_secs: the watermark '" + o_.watermark +
                                 "' is not a DateTime or Date column, so it has no age");
        }
      }
      if (name == o_.tiebreak) {
        has_tb = true;
        tb_numeric_ = numeric;
        tb_datetime_ = datetime;
        tb_type_ = type;
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
    if (!columns_.empty() && cols != columns_) {
      KLOG_INFO("clickhouse input: the query's columns changed from ({}) to ({})", columns_, cols);
    }
    columns_ = cols;
    return Status::Ok();
  }

  // The SQL literal of a cursor value (the JSON text of what was read) for a
  // column of `type`.
  static std::string Literal(const std::string& json, bool numeric, bool datetime,
                             std::string_view type) {
    if (json.empty() || json[0] != '"') return json;  // a number
    std::string text;
    jtext::DecodeString(json, &text);
    if (datetime) return ch::DateTimeLiteral(text, type);
    return numeric ? text : ch::QuoteString(text);
  }

  // Everything after the cursor, in (watermark, tiebreak) order.
  std::string IncrementalSql() const {
    const std::string wm = ch::QuoteIdent(o_.watermark);
    const bool tb = !o_.tiebreak.empty();
    const std::string tbq = tb ? ch::QuoteIdent(o_.tiebreak) : "";
    std::string where = "isNotNull(" + wm + ")";
    if (tb) where += " AND isNotNull(" + tbq + ")";
    if (!cursor_wm_.empty()) {
      const std::string w = Literal(cursor_wm_, wm_numeric_, wm_datetime_, wm_type_);
      if (tb) {
        where += " AND (" + wm + " > " + w + " OR (" + wm + " = " + w + " AND " + tbq + " > " +
                 Literal(cursor_tb_, tb_numeric_, tb_datetime_, tb_type_) + "))";
      } else {
        where += " AND " + wm + " > " + w;
      }
    } else if (!o_.start_from.empty()) {
      where += " AND " + wm + " >= " +
               (wm_numeric_ ? o_.start_from : ch::QuoteString(o_.start_from));
    }
    if (o_.lag_secs > 0) {
      const std::string secs = std::to_string(static_cast<int64_t>(std::ceil(o_.lag_secs)));
      where += " AND " + wm + " <= " +
               (wm_datetime_ ? "now() - " + secs : "toDate(now() - " + secs + ")");
    }
    const std::string order = wm + (tb ? ", " + tbq : "");
    return "SELECT " + select_ + " FROM (" + o_.query + ") WHERE " + where + " ORDER BY " +
           order + " FORMAT JSONEachRow";
  }

  std::string SnapshotSql() const {
    return "SELECT " + select_ + " FROM (" + o_.query + ") FORMAT JSONEachRow";
  }

  // Reads the answer until `rows` rows are pending or it ends.
  Status Fill(size_t rows) {
    constexpr size_t kPiece = 1 << 20;
    while (streaming_ && pending_.size() < rows) {
      bool done = false;
      Status st = client_.ReadMore(&partial_, kPiece, &done);
      if (!st.ok()) {
        streaming_ = false;
        partial_.clear();
        if (pending_.empty()) return st;
        error_ = st;  // hand over what came first, then retry from the cursor
        return Status::Ok();
      }
      TakeLines(done);
      if (done) streaming_ = false;
    }
    return Status::Ok();
  }

  // The whole lines of partial_ into pending_ (at the answer's end, the rest
  // too). ClickHouse writes an error that happens after the answer began into
  // the answer itself ("Code: N, e.displayText() = ..."): the rows before it
  // are handed over, then the query is asked again from the cursor.
  void TakeLines(bool done) {
    const int64_t ts = clock_->NowMs();
    size_t at = 0;
    while (at < partial_.size()) {
      size_t nl = partial_.find('\n', at);
      if (nl == std::string::npos) {
        if (!done) break;
        nl = partial_.size();
      }
      const std::string_view line(partial_.data() + at, nl - at);
      at = nl + 1;
      if (line.empty()) continue;
      if (line.rfind("Code: ", 0) == 0) {
        error_ = Status::Unavailable("clickhouse: the answer ended in an error: " +
                                     std::string(line.substr(0, 300)));
        client_.Abandon();
        streaming_ = false;
        partial_.clear();
        return;
      }
      // A row that is not JSON is counted and skipped; the cursor never moves
      // past it on its own (it could be a row cut short by an error), only
      // with the rows after it.
      if (!IsJson(line)) {
        stats_->RecordError("clickhouse: a row that is not valid JSON (bytes that are not "
                            "UTF-8?): " + std::string(line.substr(0, 200)));
        continue;
      }
      Message m(Renamed(line), ts);
      m.MarkJson();
      pending_.push_back(std::move(m));
    }
    partial_.erase(0, std::min(at, partial_.size()));
  }

  // The row with its DateTime fields under their own names. A key is found
  // with the '{' or ',' before it, which no byte inside a string value can
  // give ('"' is escaped there).
  std::string Renamed(std::string_view line) const {
    std::string out(line);
    for (const auto& [from, to] : renames_) {
      size_t at = out.find(from);
      while (at != std::string::npos && at > 0 && out[at - 1] != '{' && out[at - 1] != ',') {
        at = out.find(from, at + 1);
      }
      if (at != std::string::npos && at > 0) out.replace(at, from.size(), to);
    }
    return out;
  }

  // Hands over batch_size rows (fewer at the answer's end); the cursor moves
  // past the last one. Without a tiebreak a batch does not end inside a group
  // of equal watermarks: it takes the rest of the group too (reading on when
  // the group runs past what is pending), so the cursor never stands where
  // the next query would skip rows. If the answer breaks inside such a group,
  // the group is taken back and the cursor stays before it.
  void TakeBatch(Batch* out) {
    const bool groups = incremental() && o_.tiebreak.empty();
    size_t group_at = out->messages.size();   // where the current group began in out
    std::string before_group = cursor_wm_;    // the cursor before it
    int64_t taken = 0;
    while (true) {
      if (pending_.empty()) {
        Status st;
        if (groups && streaming_ && taken >= o_.batch_size) st = Fill(1);  // to the group's end
        if (pending_.empty()) {
          if (groups && taken > 0 && (!st.ok() || !error_.ok())) {
            out->messages.resize(group_at);  // the answer broke off inside the group
            cursor_wm_ = before_group;
            if (error_.ok()) error_ = st;
          }
          break;
        }
      }
      Message& m = pending_.front();
      const std::string_view text = m.payload();
      const bool last = !groups && (taken + 1 >= o_.batch_size || pending_.size() == 1);
      std::string wm;
      if (incremental() && (groups || last)) wm = ValueOf(text, o_.watermark);
      if (taken >= o_.batch_size && (!groups || wm != cursor_wm_)) break;
      if (groups && wm != cursor_wm_) {
        group_at = out->messages.size();
        before_group = cursor_wm_;
      }
      if (incremental() && (groups || last) && !wm.empty()) {
        cursor_wm_ = std::move(wm);
        if (!o_.tiebreak.empty()) cursor_tb_ = ValueOf(text, o_.tiebreak);
      }
      out->messages.push_back(std::move(m));
      pending_.pop_front();
      ++taken;
    }
  }

  // The JSON text of member `name` of a row; "" when it has none.
  static std::string ValueOf(std::string_view row, const std::string& name) {
    jtext::Member m;
    const size_t open = jtext::SkipWs(row, 0);
    if (open >= row.size() || row[open] != '{' || !jtext::FindMember(row, open, name, &m)) return "";
    return std::string(m.value.of(row));
  }

};

}  // namespace

std::vector<PropDef> ChConnectionProps() {
  return {
      PropDef{"url", PropType::kString, true, "",
              "the HTTP interface, http://host:port (https://host:port over TLS)"}
          .NonEmpty()
          .Address(),
      PropDef{"user", PropType::kString, false, "default",
              "the user (HTTP basic authentication)", PropRole::kTuning},
      PropDef{"password", PropType::kString, false, "", "its password; as ${ENV}",
              PropRole::kTuning}
          .Secret(),
      {"database", PropType::kString, false, "default", "the database of unqualified names"},
      PropDef{"timeout_ms", PropType::kInt, false, "30000", "deadline of one request",
              PropRole::kTuning}.Range(100, 3600000).Unit("ms"),
      TlsPropDef(),
  };
}

ch::Settings ChSettings(const Options& o) {
  ch::Settings s;
  s.url = o.String("url");
  s.user = o.String("user");
  s.password = o.String("password");
  s.database = o.String("database");
  s.timeout_ms = o.Int("timeout_ms");
  s.tls = ReadTlsOptions(o);
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
      "batch at a time, then polls for new rows; `snapshot` reads the whole result on every poll. "
      "One query asks for everything after the cursor (or the whole result), and its answer "
      "is read as the pipeline takes the rows. Types: integers (64-bit ones too) and floats as "
      "numbers (nan and inf as strings), DateTime as RFC 3339 strings in UTC (DateTime64 with "
      "its fractional digits, so a cursor on it loses none), Date and String as strings, "
      "arrays and tuples as arrays, NULL as null. Without `tiebreak`, rows that "
      "share a watermark are read in one batch and a row inserted later with a watermark "
      "already read is missed; rows inserted late with an older watermark are read only with "
      "`lag_secs` covering the delay.";
  d.checkpoint = "incremental: the cursor (the last row's watermark and tiebreak), so a restart "
                 "resumes after it rather than from `start_from`; snapshot: nothing (a restart "
                 "reads the whole result again)";
  d.bad_input = "an unreachable or overloaded server is retried with backoff (the card shows "
                "retrying); a query that does not run, or a watermark, tiebreak, start_from or "
                "lag_secs that does not fit the query's columns, stops the input naming the "
                "option; the query is described again before every read, so a column added "
                "or dropped while the input runs (under SELECT *) is read or no longer asked "
                "for, with a log line; a row that is not valid JSON is counted on the card and "
                "skipped; rows whose watermark or tiebreak is NULL are not read";
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
