// The clickhouse output: each batch is one INSERT ... FORMAT JSONEachRow
// request over the HTTP interface. docs/components.md, "clickhouse".
#include <algorithm>
#include <chrono>
#include <future>
#include <set>

#include "common/clock.h"
#include "common/json_text.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "connectors/clickhouse/ch.h"
#include "kayak/component.h"

namespace kayak {

namespace {

constexpr size_t kMaxWarnedFields = 100;  // fields named in "not a column" log lines

// Fields that are not columns are skipped (and logged here once); DateTime
// columns take RFC 3339 strings as well as ClickHouse's own form.
const std::string kInsertSettings =
    "&input_format_skip_unknown_fields=1&date_time_input_format=best_effort";

class ChOutput final : public Output {
 public:
  struct Limits {
    size_t rows;
    size_t bytes;
    int64_t ms;
  };

  ChOutput(ch::Settings cs, std::string table, Limits limits, const ComponentContext& ctx)
      : client_(std::move(cs)),
        table_(std::move(table)),
        limits_(limits),
        stats_(ctx.stats),
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

  // Batches are gathered into one INSERT of up to batch_rows rows or
  // batch_bytes (ClickHouse makes a part of every insert: many small ones are
  // slow and merge late). A full gathering is sent on its own thread while the
  // next one gathers (one insert under way at a time); what is gathered is
  // also sent when it is batch_ms old, at every checkpoint barrier (waiting
  // for the server's answer, so a checkpoint covers only rows it has) and at
  // the end.
  Status Write(const Batch& batch) override {
    KAYAK_RETURN_IF_ERROR(Open());
    if (failed_) {
      KAYAK_RETURN_IF_ERROR(SendNow());
      failed_ = false;
    }
    size_t bytes = 0;
    for (const auto& m : batch.messages) bytes += m.payload().size() + 1;
    if (!cur_.rows.empty() &&
        (cur_.rows.size() + batch.messages.size() > limits_.rows ||
         cur_.body.size() + bytes > limits_.bytes || MonotonicMs() - first_ms_ >= limits_.ms)) {
      if (!SendInBackground().ok()) {
        // the insert before failed: everything gathered, now, in the open; the
        // batch is retried whole (not taken yet) until the server has it
        KAYAK_RETURN_IF_ERROR(SendNow());
      }
    }
    for (size_t i = 0; i < batch.messages.size(); ++i) {
      const Message& m = batch.messages[i];
      if (!IsObject(m)) {
        const std::string why =
            "clickhouse: message " + std::to_string(i + 1) + " of the batch is not a JSON object";
        stats_->RecordError(why);
        Refuse(m, why);  // to the dead letters, when the pipeline has them
        continue;
      }
      WarnUnknownFields(m.payload());
      if (cur_.rows.empty()) first_ms_ = MonotonicMs();
      cur_.rows.push_back({cur_.body.size(), m.payload().size() + 1});
      cur_.body.append(m.payload());
      cur_.body.push_back('\n');
    }
    // Full: on its way at once (an insert still under way is waited for; if
    // that one failed, the next Write sends everything in the open).
    if (cur_.rows.size() >= limits_.rows || cur_.body.size() >= limits_.bytes) {
      if (Status st = SendInBackground(); !st.ok()) {
        stats_->RecordError(st.message());
        failed_ = true;  // the next Write sends in the open first, and says so
      }
    }
    return Status::Ok();
  }

  void Tick(int64_t now_ms) override {
    (void)now_ms;
    Status st;
    if (inflight_.valid() &&
        inflight_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      st = Collect();
    }
    if (st.ok() && !cur_.rows.empty() && MonotonicMs() - first_ms_ >= limits_.ms) {
      st = SendInBackground();
    }
    if (!st.ok()) {
      failed_ = true;
      stats_->RecordError(st.message());
      KLOG_WARN("pipeline {}: clickhouse output: an insert of {} rows failed, kept for the "
                "next try: {}", pipeline_, cur_.rows.size(), st.message());
    }
  }

  Status Checkpoint(uint64_t id, std::string* state) override {
    (void)id;
    (void)state;
    return SendNow();
  }

  // The rows gathered, and those of the insert under way.
  size_t MemoryBytes() const override { return cur_.body.capacity() + sending_bytes_; }

  Status Close() override { return SendNow(); }

  ~ChOutput() override {
    if (inflight_.valid()) inflight_.wait();  // bounded by timeout_ms
  }

 private:
  struct Row {
    size_t at, size;  // its line in the body, the newline included
  };
  struct Gathered {
    std::string body;
    std::vector<Row> rows;
    // Rows the server refused for their content, with why: for the dead
    // letters, taken on the output's thread (TakeRefused).
    std::vector<std::pair<std::string, std::string>> refused;
  };

  ch::Client client_;
  const std::string table_;
  const Limits limits_;
  ComponentStats* stats_;
  const std::string pipeline_;
  bool inited_ = false;
  std::set<std::string> columns_;
  std::string insert_;
  Gathered cur_;      // gathered, not sent yet
  Gathered sending_;  // the insert under way (inflight_), or empty
  std::future<Status> inflight_;
  size_t sending_bytes_ = 0;  // sending_'s, for MemoryBytes (the output's thread)
  bool failed_ = false;  // an insert failed since the last Write
  int64_t first_ms_ = 0;  // when the first gathered row came
  std::vector<jtext::Member> members_;
  std::set<std::string> warned_;
  std::set<std::string, std::less<>> seen_tokens_;  // key tokens already looked at

  // Waits for the insert under way; if it failed, its rows go back in front
  // of what is gathered, to be sent again.
  Status Collect() {
    if (!inflight_.valid()) return Status::Ok();
    Status st = inflight_.get();
    TakeRefused(&sending_);
    if (!st.ok()) {
      const size_t shift = sending_.body.size();
      for (auto& r : cur_.rows) r.at += shift;
      sending_.body.append(cur_.body);
      sending_.rows.insert(sending_.rows.end(), cur_.rows.begin(), cur_.rows.end());
      std::swap(cur_, sending_);
      first_ms_ = MonotonicMs() - limits_.ms;  // due at once
    }
    sending_.body.clear();
    sending_.rows.clear();
    sending_bytes_ = 0;
    return st;
  }

  // Sends what is gathered on its own thread, once the insert before is done.
  Status SendInBackground() {
    KAYAK_RETURN_IF_ERROR(Collect());
    if (cur_.rows.empty()) return Status::Ok();
    std::swap(cur_, sending_);
    sending_bytes_ = sending_.body.capacity();  // the insert's thread has it now
    inflight_ = std::async(std::launch::async, [this] { return Send(&sending_); });
    return Status::Ok();
  }

  // Sends everything gathered and waits for the answer.
  Status SendNow() {
    (void)Collect();  // a failed insert's rows are back in cur_
    Status st = Send(&cur_);
    TakeRefused(&cur_);
    return st;
  }

  // The rows `g`'s insert refused go to the pipeline's dead letters, when
  // it has them. The output's thread.
  void TakeRefused(Gathered* g) {
    const int64_t now = SystemClock::Get()->NowMs();
    for (auto& [row, why] : g->refused) Refuse(row, now, why);
    g->refused.clear();
  }

  // Sends `g` as one INSERT and clears it. When the server refuses a row for
  // its content, the rows are sent in halves until each refused row is alone:
  // those are counted on the card and left out, the rest inserted.
  Status Send(Gathered* g) {
    if (g->rows.empty()) return Status::Ok();
    size_t refused = 0;
    std::string last;
    KAYAK_RETURN_IF_ERROR(InsertRange(*g, 0, g->rows.size(), &refused, &last));
    if (refused > 0) {
      stats_->RecordError(last, refused);
      KLOG_WARN("pipeline {}: clickhouse output: {} of {} rows refused by {}; last: {}",
                pipeline_, refused, g->rows.size(), table_, last);
    }
    g->rows.clear();
    g->body.clear();
    return Status::Ok();
  }

  Status InsertRange(Gathered& g, size_t begin, size_t end, size_t* refused,
                     std::string* last) {
    const size_t from = g.rows[begin].at;
    const size_t to = g.rows[end - 1].at + g.rows[end - 1].size;
    ch::Failure f;
    Status st = client_.Insert(insert_, std::string_view(g.body).substr(from, to - from),
                               kInsertSettings, &f);
    if (st.ok() || !f.content) return st;  // not the rows: retried whole by the caller
    if (end - begin == 1) {
      ++*refused;
      std::string_view row(g.body.data() + from, std::min<size_t>(to - from - 1, 200));
      *last = "clickhouse: a row refused: " +
              st.message().substr(std::string_view("clickhouse: ").size()) + ": " +
              std::string(row);
      g.refused.emplace_back(g.body.substr(from, to - from - 1),
                             "clickhouse: a row refused: " +
                                 st.message().substr(std::string_view("clickhouse: ").size()));
      return Status::Ok();
    }
    const size_t mid = begin + (end - begin) / 2;
    KAYAK_RETURN_IF_ERROR(InsertRange(g, begin, mid, refused, last));
    return InsertRange(g, mid, end, refused, last);
  }

  static bool IsObject(const Message& m) {
    const std::string& p = m.payload();
    const size_t open = jtext::SkipWs(p, 0);
    return open < p.size() && p[open] == '{' && (m.json_known() || IsJson(p));
  }

  // A key token seen before (a column's, or one already warned of) costs a
  // lookup without a copy; only a new one is decoded.
  void WarnUnknownFields(const std::string& p) {
    if (warned_.size() >= kMaxWarnedFields) return;
    jtext::Members(p, jtext::SkipWs(p, 0), &members_);
    for (const auto& mem : members_) {
      const std::string_view token = mem.key.of(p);
      if (seen_tokens_.count(token)) continue;
      std::string name;
      jtext::DecodeString(token, &name);
      if (columns_.count(name) || !warned_.insert(name).second) {
        if (seen_tokens_.size() < 4 * kMaxWarnedFields) seen_tokens_.emplace(token);
        continue;
      }
      seen_tokens_.emplace(token);
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
      "interface, with `INSERT INTO table FORMAT JSONEachRow` requests: batches are gathered "
      "into one insert of up to `batch_rows` rows or `batch_bytes`, sent when the next batch "
      "would not fit, when the first row is `batch_ms` old, at every checkpoint barrier and "
      "at the end (ClickHouse makes a part of each insert, so fewer, larger ones are faster). A field that "
      "is not a column is skipped (logged once by name); a column the message lacks gets its "
      "type's zero value (ClickHouse 18.16 applies no DEFAULT expression to JSONEachRow "
      "input); DateTime columns take RFC 3339 strings. At least once: a batch replayed after "
      "a crash is inserted again; a ReplacingMergeTree table (ORDER BY the row's key) folds "
      "those repeats into one row when it merges (or at once with SELECT ... FINAL).";
  d.checkpoint = "nothing kept: at a barrier the gathered rows are inserted (the server "
                 "answers once it has them), so a barrier passes only after everything before "
                 "it is in the table; rows gathered after the last barrier are replayed after a "
                 "crash";
  d.bad_input = "a message that is not a JSON object is counted as an error on the card, left "
                "out and sent to the pipeline's dead letters when it has them; a row the server "
                "refuses for its content (a parse or type error) is counted as an error and left "
                "out (found by sending the insert in halves), the rest inserted; an unreachable or overloaded server is "
                "retried holding the pipeline; a table that does not exist is an error naming "
                "`table`";
  d.props = ChConnectionProps();
  d.props.push_back(PropDef{"table", PropType::kString, true, "",
                            "the table (database.table, or a table of `database`)"}.NonEmpty());
  d.props.push_back(PropDef{"batch_rows", PropType::kInt, false, "100000",
                            "most rows gathered into one INSERT", PropRole::kTuning}
                        .Range(1, 10000000));
  d.props.push_back(PropDef{"batch_bytes", PropType::kInt, false, "16777216",
                            "most bytes gathered into one INSERT", PropRole::kTuning}
                        .Range(1024, 1 << 30).Unit("bytes"));
  d.props.push_back(PropDef{"batch_ms", PropType::kInt, false, "1000",
                            "longest a gathered row waits to be sent", PropRole::kTuning}
                        .Range(0, 3600000).Unit("ms"));
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    ch::Settings cs = ChSettings(o);
    if (o.failed()) return nullptr;
    const ChOutput::Limits limits{static_cast<size_t>(o.Int("batch_rows")),
                                  static_cast<size_t>(o.Int("batch_bytes")), o.Int("batch_ms")};
    return std::make_unique<ChOutput>(std::move(cs), o.String("table"), limits, ctx);
  };
  return d;
}

}  // namespace kayak
