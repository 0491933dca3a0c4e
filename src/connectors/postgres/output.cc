// The postgres output: each batch is one INSERT (an upsert with `key`) of the
// batch's messages as one JSON array, which the server turns into rows
// (json_populate_recordset). docs/components.md, "postgres".
#include <algorithm>
#include <map>
#include <set>

#include "common/json_text.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "connectors/postgres/pg.h"
#include "connectors/shared/tls.h"
#include "kayak/component.h"

namespace kayak {

namespace {

constexpr size_t kMaxWarnedFields = 100;  // fields named in "not a column" log lines
constexpr size_t kMaxStatements = 64;     // SQL texts kept, one per set of columns

class PgOutput final : public Output {
 public:
  PgOutput(std::string url, std::string table, std::vector<std::string> columns,
           std::vector<std::string> key, TlsOptions tls, const ComponentContext& ctx)
      : conn_(std::move(url), 60, std::move(tls)),
        table_option_(std::move(table)),
        columns_option_(std::move(columns)),
        key_(std::move(key)),
        stats_(ctx.stats),
        pipeline_(ctx.pipeline_id) {}

  // Connects and reads the table's columns. A server that cannot be reached
  // is retried; a table, column or key that does not fit names the option.
  Status Open() override {
    if (described_) return conn_.Ensure();
    return Describe();
  }

  Status Write(const Batch& batch) override {
    if (!described_) KAYAK_RETURN_IF_ERROR(Describe());
    KAYAK_RETURN_IF_ERROR(conn_.Ensure());
    // Which messages go, and which columns they name.
    rows_.clear();
    std::fill(present_.begin(), present_.end(), false);
    for (size_t i = 0; i < batch.messages.size(); ++i) {
      if (TakeColumns(batch.messages[i], i)) rows_.push_back(i);
    }
    if (rows_.empty()) return Status::Ok();
    const std::string& sql = Statement();
    if (sql.empty()) {  // no message names a column: nothing to write
      stats_->RecordError("postgres: no field of the batch is a column of " + table_, rows_.size());
      return Status::Ok();
    }
    body_.clear();
    body_.push_back('[');
    for (size_t n = 0; n < rows_.size(); ++n) {
      if (n) body_.push_back(',');
      body_.append(batch.messages[rows_[n]].payload());
    }
    body_.push_back(']');
    pg::Result r;
    Status st = conn_.Exec(sql, {body_.c_str()}, &r);
    if (st.ok() || !pg::IsContentError(conn_.last_sqlstate())) return st;
    // A row refused for its content: find it (and any other) one row at a time
    // in one transaction, count each as an error, and write the rest.
    return WriteRowByRow(batch, sql);
  }

 private:
  pg::Connection conn_;
  const std::string table_option_;
  const std::vector<std::string> columns_option_;
  const std::vector<std::string> key_;
  ComponentStats* stats_;
  const std::string pipeline_;

  bool described_ = false;
  std::string table_;                      // as the server names it, quoted where needed
  std::vector<std::string> columns_;       // the columns written, in table order
  // "\"name\"" -> index in columns_ (looked up by the message's key token)
  std::map<std::string, size_t, std::less<>> by_token_;
  std::set<std::string> table_columns_;    // every column of the table
  std::vector<bool> present_;              // columns_ named by the current batch
  std::vector<size_t> rows_;               // messages of the batch that go
  std::vector<jtext::Member> members_;
  std::map<std::string, std::string> statements_;  // by the present_ mask
  std::set<std::string> warned_;
  std::string body_, decoded_;

  Status Describe() {
    pg::Result r;
    Status st = conn_.Exec("SELECT $1::regclass::text", {table_option_.c_str()}, &r);
    if (!st.ok()) return st.retryable() ? st : Status::Invalid("table: " + st.message());
    table_ = PQgetvalue(r.get(), 0, 0);
    const std::string columns_sql =
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum";
    KAYAK_RETURN_IF_ERROR(conn_.Exec(columns_sql, {table_option_.c_str()}, &r));
    std::vector<std::string> all;
    table_columns_.clear();
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      all.push_back(PQgetvalue(r.get(), i, 0));
      table_columns_.insert(all.back());
    }
    auto list = [&] {
      std::string s;
      for (const auto& c : all) s += (s.empty() ? "" : ", ") + c;
      return s;
    };
    for (const auto& c : columns_option_) {
      if (!table_columns_.count(c)) {
        return Status::Invalid("columns: '" + c + "' is not a column of " + table_ +
                               " (its columns: " + list() + ")");
      }
    }
    for (const auto& k : key_) {
      if (!table_columns_.count(k)) {
        return Status::Invalid("key: '" + k + "' is not a column of " + table_ +
                               " (its columns: " + list() + ")");
      }
      if (!columns_option_.empty() &&
          std::find(columns_option_.begin(), columns_option_.end(), k) == columns_option_.end()) {
        return Status::Invalid("key: '" + k + "' is not one of `columns`");
      }
    }
    columns_.clear();
    by_token_.clear();
    for (const auto& c : all) {
      if (!columns_option_.empty() &&
          std::find(columns_option_.begin(), columns_option_.end(), c) == columns_option_.end()) {
        continue;
      }
      std::string token;
      jtext::AppendString(&token, c);
      by_token_[token] = columns_.size();
      columns_.push_back(c);
    }
    present_.assign(columns_.size(), false);
    statements_.clear();
    if (!key_.empty()) {
      // ON CONFLICT needs a unique index on exactly the key: the server says
      // so when it plans the statement, so run it now on no rows.
      std::fill(present_.begin(), present_.end(), true);
      pg::Result none;
      Status st = conn_.Exec(Build(), {"[]"}, &none);
      if (!st.ok()) return st.retryable() ? st : Status::Invalid("key: " + st.message());
    }
    described_ = true;
    KLOG_INFO("pipeline {}: postgres output into {} ({} columns{})", pipeline_, table_,
              columns_.size(), key_.empty() ? "" : ", upsert");
    return Status::Ok();
  }

  // Marks the columns `m` names; false (and an error on the card) when it is
  // not a JSON object.
  bool TakeColumns(const Message& m, size_t index) {
    const std::string& p = m.payload();
    const size_t open = jtext::SkipWs(p, 0);
    if (open >= p.size() || p[open] != '{' || (!m.json_known() && !IsJson(p))) {
      const std::string why =
          "postgres: message " + std::to_string(index + 1) + " of the batch is not a JSON object";
      stats_->RecordError(why);
      Refuse(m, why);  // to the dead letters, when the pipeline has them
      return false;
    }
    jtext::Members(p, open, &members_);
    for (const auto& mem : members_) {
      const std::string_view token = mem.key.of(p);
      auto it = by_token_.find(token);
      if (it == by_token_.end() && jtext::HasEscapes(token)) {
        decoded_.clear();
        jtext::DecodeString(token, &decoded_);
        std::string plain;
        jtext::AppendString(&plain, decoded_);
        it = by_token_.find(plain);
      }
      if (it != by_token_.end()) {
        present_[it->second] = true;
      } else if (warned_.size() < kMaxWarnedFields) {
        std::string name(token.substr(1, token.size() - 2));
        if (warned_.insert(name).second) {
          KLOG_WARN("pipeline {}: postgres output: field '{}' is not a column of {}; it is "
                    "not written", pipeline_, name, table_);
        }
      }
    }
    return true;
  }

  const std::string& Statement() {
    std::string mask(present_.size(), '0');
    for (size_t i = 0; i < present_.size(); ++i) mask[i] = present_[i] ? '1' : '0';
    auto it = statements_.find(mask);
    if (it != statements_.end()) return it->second;
    if (statements_.size() >= kMaxStatements) statements_.clear();
    return statements_[mask] = Build();
  }

  // INSERT of the present columns from $1, a JSON array of objects. With a
  // key, the batch is collapsed by key (its last message wins) and upserted.
  std::string Build() const {
    std::string cols, updates;
    for (size_t i = 0; i < columns_.size(); ++i) {
      if (!present_[i]) continue;
      const std::string q = pg::QuoteIdent(columns_[i]);
      cols += (cols.empty() ? "" : ", ") + q;
      if (std::find(key_.begin(), key_.end(), columns_[i]) == key_.end()) {
        updates += (updates.empty() ? "" : ", ") + q + " = EXCLUDED." + q;
      }
    }
    if (cols.empty()) return "";
    const std::string rows = "json_populate_recordset(NULL::" + table_ + ", $1::json)";
    if (key_.empty()) {
      return "INSERT INTO " + table_ + " (" + cols + ") SELECT " + cols + " FROM " + rows;
    }
    std::string keys;
    for (const auto& k : key_) keys += (keys.empty() ? "" : ", ") + pg::QuoteIdent(k);
    return "INSERT INTO " + table_ + " (" + cols + ") SELECT " + cols + " FROM (SELECT DISTINCT ON (" +
           keys + ") * FROM " + rows + " WITH ORDINALITY AS kayak_r ORDER BY " + keys +
           ", kayak_r.ordinality DESC) AS kayak_d ON CONFLICT (" + keys + ") DO " +
           (updates.empty() ? "NOTHING" : "UPDATE SET " + updates);
  }

  std::vector<std::pair<size_t, std::string>> refused_rows_;  // WriteRowByRow's, with why

  Status WriteRowByRow(const Batch& batch, const std::string& sql) {
    refused_rows_.clear();
    KAYAK_RETURN_IF_ERROR(conn_.Exec("BEGIN"));
    size_t refused = 0;
    std::string last_error;
    for (size_t n = 0; n < rows_.size(); ++n) {
      Status st = conn_.Exec("SAVEPOINT kayak_row");
      body_ = "[" + batch.messages[rows_[n]].payload() + "]";
      pg::Result r;
      if (st.ok()) st = conn_.Exec(sql, {body_.c_str()}, &r);
      if (st.ok()) continue;
      if (st.retryable() || !pg::IsContentError(conn_.last_sqlstate())) {
        (void)conn_.Exec("ROLLBACK");
        return st;
      }
      ++refused;
      last_error = "postgres: message " + std::to_string(rows_[n] + 1) + " of the batch: " +
                   st.message().substr(std::string_view("postgres: ").size());
      refused_rows_.emplace_back(rows_[n], "postgres: a row refused: " +
                                               st.message().substr(std::string_view("postgres: ").size()));
      KAYAK_RETURN_IF_ERROR(conn_.Exec("ROLLBACK TO SAVEPOINT kayak_row"));
    }
    Status st = conn_.Exec("COMMIT");
    if (!st.ok()) return st;
    // Committed without them: to the pipeline's dead letters, when it has them.
    for (auto& [index, why] : refused_rows_) Refuse(batch.messages[index], std::move(why));
    stats_->RecordError(last_error, refused);
    KLOG_WARN("pipeline {}: postgres output: {} of {} rows refused by {}; last: {}", pipeline_,
              refused, rows_.size(), table_, last_error);
    return Status::Ok();
  }
};

}  // namespace

ComponentDef PostgresOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "postgres";
  d.help =
      "Writes each message (a JSON object) as a row of `table` (libpq): a batch is one INSERT "
      "of the batch as one JSON array, which the server turns into rows "
      "(json_populate_recordset), so it converts the types: numbers, strings in a column's "
      "literal form (timestamps as RFC 3339), nested JSON into json, jsonb or arrays. With "
      "`key`, an upsert (INSERT ... ON CONFLICT (key) DO UPDATE): the output is idempotent, "
      "and when two messages of a batch share a key the last one wins. A field that is not a "
      "column is ignored (logged once by name); a column no message of the batch names keeps "
      "its default, a column one message lacks and another names gets NULL in the first.";
  d.checkpoint = "nothing kept: each batch is committed (one statement) before the next is "
                 "written, so a barrier passes only after everything before it is in the table";
  d.bad_input = "a message that is not a JSON object is counted as an error on the card, left "
                "out and sent to the pipeline's dead letters when it has them; a row the server "
                "refuses for its content (a type error, a constraint) is counted as an error and "
                "left out, the rest of its batch written in one transaction; an unreachable "
                "server, a login refused or rights taken away (class 28, 42501) are retried "
                "holding the pipeline; a table, column or key that does not "
                "fit is an error naming the option";
  d.props = {
      PropDef{"url", PropType::kString, true, "",
              "libpq connection string or URI; a password as ${ENV}"}.NonEmpty().Secret().Address(),
      PropDef{"table", PropType::kString, true, "", "the table (schema.table)"}.NonEmpty(),
      {"columns", PropType::kStringList, false, "",
       "the columns written (default: every column of the table a message names)"},
      {"key", PropType::kStringList, false, "",
       "upsert on these columns (a unique index must cover exactly them); absent: plain INSERT"},
      TlsPropDef(),
  };
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    TlsOptions tls = ReadTlsOptions(o);
    if (o.failed()) return nullptr;
    return std::make_unique<PgOutput>(o.String("url"), o.String("table"), o.Strings("columns"),
                                      o.Strings("key"), std::move(tls), ctx);
  };
  return d;
}

}  // namespace kayak
