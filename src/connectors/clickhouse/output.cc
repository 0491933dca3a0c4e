// The clickhouse output: each batch is one INSERT ... FORMAT JSONEachRow
// request over the HTTP interface. docs/components.md, "clickhouse".
#include <set>

#include "common/json_text.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "components.h"
#include "connectors/clickhouse/ch.h"

namespace kayak {

namespace {

constexpr size_t kMaxWarnedFields = 100;  // fields named in "not a column" log lines

// Fields that are not columns are skipped (and logged here once); DateTime
// columns take RFC 3339 strings as well as ClickHouse's own form.
const std::string kInsertSettings =
    "&input_format_skip_unknown_fields=1&date_time_input_format=best_effort";

class ChOutput final : public Output {
 public:
  ChOutput(ch::Settings cs, std::string table, const ComponentContext& ctx)
      : client_(std::move(cs)), table_(std::move(table)), stats_(ctx.stats),
        pipeline_(ctx.pipeline_id) {}

  // Reads the table's columns. A server that cannot be reached is retried; a
  // table that does not exist names the option.
  Status Open() override {
    if (!inited_) {
      KAYAK_RETURN_IF_ERROR(client_.Init());
      inited_ = true;
    }
    if (!columns_.empty()) return Status::Ok();
    auto r = client_.Query("DESCRIBE TABLE " + table_ + " FORMAT JSONEachRow");
    if (!r.ok()) {
      return r.status().retryable() ? r.status() : Status::Invalid("table: " + r.status().message());
    }
    for (size_t at = 0; at < r->size();) {
      size_t nl = r->find('\n', at);
      if (nl == std::string::npos) nl = r->size();
      const std::string_view row = std::string_view(*r).substr(at, nl - at);
      jtext::Member name;
      if (!row.empty() && jtext::FindMember(row, 0, "name", &name)) {
        std::string n;
        jtext::DecodeString(name.value.of(row), &n);
        columns_.insert(std::move(n));
      }
      at = nl + 1;
    }
    insert_ = "INSERT INTO " + table_ + " FORMAT JSONEachRow";
    KLOG_INFO("pipeline {}: clickhouse output into {} ({} columns)", pipeline_, table_,
              columns_.size());
    return Status::Ok();
  }

  Status Write(const Batch& batch) override {
    KAYAK_RETURN_IF_ERROR(Open());
    rows_.clear();
    body_.clear();
    for (size_t i = 0; i < batch.messages.size(); ++i) {
      const Message& m = batch.messages[i];
      if (!IsObject(m)) {
        stats_->RecordError("clickhouse: message " + std::to_string(i + 1) +
                            " of the batch is not a JSON object");
        continue;
      }
      WarnUnknownFields(m.payload());
      rows_.push_back(i);
      body_.append(m.payload());
      body_.push_back('\n');
    }
    if (rows_.empty()) return Status::Ok();
    ch::Failure f;
    Status st = client_.Insert(insert_, body_, kInsertSettings, &f);
    if (st.ok() || !f.content) return st;
    // A row refused for its content: find it (and any other) by sending each
    // row on its own; count each refused one and write the rest.
    size_t refused = 0;
    std::string last;
    for (size_t i : rows_) {
      ch::Failure rf;
      Status rs = client_.Insert(insert_, batch.messages[i].payload() + "\n", kInsertSettings, &rf);
      if (rs.ok()) continue;
      if (!rf.content) return rs;  // the server, not the row: retry what is left
      ++refused;
      last = "clickhouse: message " + std::to_string(i + 1) + " of the batch: " +
             rs.message().substr(std::string_view("clickhouse: ").size());
    }
    stats_->RecordError(last, refused);
    KLOG_WARN("pipeline {}: clickhouse output: {} of {} rows refused by {}; last: {}", pipeline_,
              refused, rows_.size(), table_, last);
    return Status::Ok();
  }

 private:
  ch::Client client_;
  const std::string table_;
  ComponentStats* stats_;
  const std::string pipeline_;
  bool inited_ = false;
  std::set<std::string> columns_;
  std::string insert_;
  std::vector<size_t> rows_;
  std::string body_;
  std::vector<jtext::Member> members_;
  std::set<std::string> warned_;

  static bool IsObject(const Message& m) {
    const std::string& p = m.payload();
    const size_t open = jtext::SkipWs(p, 0);
    return open < p.size() && p[open] == '{' && (m.json_known() || IsJson(p));
  }

  void WarnUnknownFields(const std::string& p) {
    if (warned_.size() >= kMaxWarnedFields) return;
    jtext::Members(p, jtext::SkipWs(p, 0), &members_);
    for (const auto& mem : members_) {
      std::string name;
      jtext::DecodeString(mem.key.of(p), &name);
      if (columns_.count(name) || !warned_.insert(name).second) continue;
      KLOG_WARN("pipeline {}: clickhouse output: field '{}' is not a column of {}; it is not "
                "written", pipeline_, name, table_);
    }
  }
};

}  // namespace

ComponentDef ClickhouseOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "clickhouse";
  d.help =
      "Writes each message (a JSON object) as a row of `table` over ClickHouse's HTTP "
      "interface: a batch is one `INSERT INTO table FORMAT JSONEachRow` request. A field that "
      "is not a column is skipped (logged once by name); a column the message lacks gets its "
      "type's zero value (ClickHouse 18.16 applies no DEFAULT expression to JSONEachRow "
      "input); DateTime columns take RFC 3339 strings. At least once: a batch replayed after "
      "a crash is inserted again; a ReplacingMergeTree table (ORDER BY the row's key) folds "
      "those repeats into one row when it merges (or at once with SELECT ... FINAL).";
  d.checkpoint = "nothing kept: each batch is inserted (the server answers once it has the "
                 "rows) before the next is written, so a barrier passes only after everything "
                 "before it is in the table";
  d.bad_input = "a message that is not a JSON object, or a row the server refuses for its "
                "content (a parse or type error), is counted as an error on the card and left "
                "out, the rest of its batch inserted; an unreachable or overloaded server is "
                "retried holding the pipeline; a table that does not exist is an error naming "
                "`table`";
  d.props = ChConnectionProps();
  d.props.push_back(PropDef{"table", PropType::kString, true, "",
                            "the table (database.table, or a table of `database`)"}.NonEmpty());
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    ch::Settings cs = ChSettings(o);
    if (o.failed()) return nullptr;
    return std::make_unique<ChOutput>(std::move(cs), o.String("table"), ctx);
  };
  return d;
}

}  // namespace kayak
