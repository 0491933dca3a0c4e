// The postgres input: a query read incrementally after a (watermark,
// tiebreak) cursor that is the input's checkpointed position, or whole on
// every poll (snapshot). docs/components.md, "postgres".
#include <algorithm>
#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/json_text.h"
#include "common/log.h"
#include "connectors/shared/sql_source.h"
#include "connectors/shared/tls.h"
#include "connectors/postgres/pg.h"
#include "kayak/component.h"

namespace kayak {

namespace {

constexpr unsigned kDateOid = 1082, kTimestampOid = 1114, kTimestampTzOid = 1184;

class PgInput final : public Input {
 public:
  PgInput(std::string url, SqlSourceOptions o, int64_t timeout_secs, TlsOptions tls,
          const ComponentContext& ctx)
      : o_(std::move(o)),
        conn_(std::move(url), timeout_secs, std::move(tls)),
        clock_(ctx.clock),
        timeout_secs_(timeout_secs),
        read_batch_(o_.batch_size) {
    if (incremental() && o_.tiebreak.empty()) {
      KLOG_WARN("{}", NoTiebreakWarning(ctx.pipeline_id, "postgres"));
    }
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    (void)finished;
    const int64_t now = MonotonicMs();
    if (now < next_poll_ms_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(wait_ms, next_poll_ms_ - now)));
      return Status::Ok();
    }
    Status st = conn_.Ensure();
    if (st.ok() && !described_) st = Describe();
    if (st.ok()) st = incremental() ? ReadIncremental(out) : ReadSnapshot(out);
    if (st.ok() && read_batch_ < o_.batch_size && ++reads_since_timeout_ >= 8) {
      read_batch_ = std::min(o_.batch_size, read_batch_ * 2);  // back up, step by step
      reads_since_timeout_ = 0;
    }
    if (!st.ok() && conn_.last_sqlstate() == "57014") st = TimedOut(st);
    if (!st.ok() && st.retryable()) {
      if (in_snapshot_) {
        // A broken connection ends its transaction: the pass begins again,
        // and like every pass it reads the whole result.
        ++cut_passes_;
        KLOG_WARN("postgres input: snapshot pass {} cut after {} rows; the next pass reads the "
                  "whole result again", passes_ + 1, pass_rows_);
      }
      in_snapshot_ = false;
      conn_.Close();
    }
    return st;
  }

  bool Rewindable() const override { return true; }

  // Incremental: the cursor, as the server wrote the last row's watermark and
  // tiebreak. Snapshot: nothing (a restart begins a new full read).
  std::string SavePosition() const override {
    if (!incremental() || !has_cursor_) return "";
    std::string wm, tb;
    jtext::AppendString(&wm, cursor_wm_);
    if (!o_.tiebreak.empty()) jtext::AppendString(&tb, cursor_tb_);
    return EncodeCursor(wm, tb);
  }

  Status RestorePosition(std::string_view position) override {
    if (position.empty() || !incremental()) return Status::Ok();
    std::string wm, tb;
    Status st = DecodeCursor(position, &wm, &tb);
    if (st.ok() && (wm.empty() || wm[0] != '"' || (!o_.tiebreak.empty() && tb.empty()) ||
                    (!tb.empty() && tb[0] != '"'))) {
      st = Status::Corruption("a cursor without the values it needs: " + std::string(position));
    }
    if (!st.ok()) return Status::Corruption("postgres input: " + st.message());
    cursor_wm_.clear();
    jtext::DecodeString(wm, &cursor_wm_);
    cursor_tb_.clear();
    if (!tb.empty()) jtext::DecodeString(tb, &cursor_tb_);
    has_cursor_ = true;
    return Status::Ok();
  }

  std::string Position() const override {
    if (!incremental()) {
      return "snapshot pass " + std::to_string(passes_) +
             (cut_passes_ > 0 ? ", " + std::to_string(cut_passes_) + " cut and read again" : "");
    }
    if (!has_cursor_) return "no row read yet";
    return o_.watermark + " " + cursor_wm_ + (o_.tiebreak.empty() ? "" : ", " + o_.tiebreak + " " + cursor_tb_);
  }

 private:
  SqlSourceOptions o_;
  pg::Connection conn_;
  const Clock* clock_;
  bool described_ = false;
  std::vector<unsigned> types_;  // of the query's columns
  std::vector<std::string> names_;  // as JSON keys, quoted
  std::vector<std::string> fields_;  // as the server names them
  int wm_col_ = -1, tb_col_ = -1;
  bool has_cursor_ = false;
  std::string cursor_wm_, cursor_tb_;
  const int64_t timeout_secs_;
  int64_t read_batch_;               // batch_size, or less after a statement timeout
  int reads_since_timeout_ = 0;
  int64_t next_poll_ms_ = 0;
  bool in_snapshot_ = false;
  uint64_t passes_ = 0;
  uint64_t pass_rows_ = 0;   // handed over in the pass under way
  uint64_t cut_passes_ = 0;  // passes a broken connection ended early

  bool incremental() const { return o_.incremental(); }

  // A read cancelled by statement_timeout (57014): the same read would take
  // as long again, for ever. Half as many rows the next time (an ordered,
  // indexed read takes time by the rows it returns), down to one; at one row
  // the query itself is too slow, and the error says which option to change.
  Status TimedOut(const Status& st) {
    reads_since_timeout_ = 0;
    if (read_batch_ > 1) {
      const int64_t was = read_batch_;
      read_batch_ = std::max<int64_t>(1, read_batch_ / 2);
      KLOG_WARN("postgres input: a read of {} rows ran past statement_timeout_secs ({} s); "
                "reading {} at a time", was, timeout_secs_, read_batch_);
      return Status::Unavailable("postgres input: a read of " + std::to_string(was) +
                                 " rows ran past statement_timeout_secs (" +
                                 std::to_string(timeout_secs_) + " s); reading " +
                                 std::to_string(read_batch_) + " at a time");
    }
    return Status::Unavailable("postgres input: a read of one row runs past "
                               "statement_timeout_secs (" + std::to_string(timeout_secs_) +
                               " s): raise it, or index the watermark (" + st.message() + ")");
  }

  // The query's columns, once per connection's first use: a query that does
  // not run, or a watermark or tiebreak it lacks, stops the input naming the
  // option.
  Status Describe() {
    pg::Result r;
    Status st = conn_.Exec("SELECT * FROM (" + o_.query + ") AS kayak_q LIMIT 0", {}, &r);
    if (!st.ok()) {
      return st.retryable() ? st : Status::Invalid("query: " + st.message());
    }
    KAYAK_RETURN_IF_ERROR(Learn(r.get()));
    described_ = true;
    return Status::Ok();
  }

  // Every result is read by its own columns: a table altered while the
  // input runs (SELECT * with a column added or dropped) changes them, and
  // the rows are then read, and the cursor taken, by the new ones.
  Status Shape(const PGresult* r) {
    const int n = PQnfields(r);
    bool same = static_cast<size_t>(n) == types_.size();
    for (int i = 0; same && i < n; ++i) {
      same = PQftype(r, i) == types_[i] && fields_[i] == PQfname(r, i);
    }
    if (same) return Status::Ok();
    std::vector<std::string> before = fields_;
    KAYAK_RETURN_IF_ERROR(Learn(r));
    std::string was, now;
    for (const auto& f : before) was += (was.empty() ? "" : ", ") + f;
    for (const auto& f : fields_) now += (now.empty() ? "" : ", ") + f;
    KLOG_INFO("postgres input: the query's columns changed from ({}) to ({})", was, now);
    return Status::Ok();
  }

  // The columns of a result: their names (as JSON keys) and types, and
  // where the watermark and tiebreak are.
  Status Learn(const PGresult* r) {
    const int n = PQnfields(r);
    types_.clear();
    names_.clear();
    fields_.clear();
    wm_col_ = tb_col_ = -1;
    std::string cols;
    for (int i = 0; i < n; ++i) {
      const std::string name = PQfname(r, i);
      types_.push_back(PQftype(r, i));
      std::string key;
      jtext::AppendString(&key, name);
      names_.push_back(key);
      fields_.push_back(name);
      if (name == o_.watermark) wm_col_ = i;
      if (name == o_.tiebreak) tb_col_ = i;
      cols += (i ? ", " : "") + name;
    }
    if (incremental()) {
      if (wm_col_ < 0) {
        return Status::Invalid("watermark: '" + o_.watermark +
                               "' is not a column of the query (its columns: " + cols + ")");
      }
      if (!o_.tiebreak.empty() && tb_col_ < 0) {
        return Status::Invalid("tiebreak: '" + o_.tiebreak +
                               "' is not a column of the query (its columns: " + cols + ")");
      }
      const unsigned t = types_[wm_col_];
      if (o_.lag_secs > 0 && t != kTimestampOid && t != kTimestampTzOid && t != kDateOid) {
        return Status::Invalid("lag_secs: the watermark '" + o_.watermark +
                               "' is not a timestamp or date column, so it has no age");
      }
    }
    return Status::Ok();
  }

  void AppendRow(const PGresult* r, int row, std::string* out) const {
    out->push_back('{');
    const int n = PQnfields(r);
    for (int c = 0; c < n; ++c) {
      if (c) out->push_back(',');
      out->append(names_[c]);
      out->push_back(':');
      if (PQgetisnull(r, row, c)) {
        out->append("null");
      } else {
        pg::AppendValue(types_[c], std::string_view(PQgetvalue(r, row, c), PQgetlength(r, row, c)),
                        out);
      }
    }
    out->push_back('}');
  }

  void Emit(const PGresult* r, int rows, Batch* out) {
    const int64_t ts = clock_->NowMs();
    out->messages.reserve(out->messages.size() + rows);
    size_t guess = 64;
    for (int i = 0; i < rows; ++i) {
      std::string payload;
      payload.reserve(guess);
      AppendRow(r, i, &payload);
      guess = payload.size() + 16;
      Message m(std::move(payload), ts);
      m.MarkJson();
      out->messages.push_back(std::move(m));
    }
  }

  std::string Col(const std::string& name) const { return "kayak_q." + pg::QuoteIdent(name); }

  Status ReadIncremental(Batch* out) {
    const std::string wm = Col(o_.watermark);
    const bool tb = !o_.tiebreak.empty();
    std::vector<const char*> params;
    std::string where = wm + " IS NOT NULL";
    if (tb) where += " AND " + Col(o_.tiebreak) + " IS NOT NULL";
    if (has_cursor_) {
      params.push_back(cursor_wm_.c_str());
      if (tb) {
        params.push_back(cursor_tb_.c_str());
        where += " AND (" + wm + ", " + Col(o_.tiebreak) + ") > ($1, $2)";
      } else {
        where += " AND " + wm + " > $1";
      }
    } else if (!o_.start_from.empty()) {
      params.push_back(o_.start_from.c_str());
      where += " AND " + wm + " >= $1";
    }
    const std::string lag = std::to_string(o_.lag_secs);
    if (o_.lag_secs > 0) {
      params.push_back(lag.c_str());
      where += " AND " + wm + " <= now() - $" + std::to_string(params.size()) +
               "::float8 * interval '1 second'";
    }
    const std::string order = wm + (tb ? ", " + Col(o_.tiebreak) : "");
    const std::string sql = "SELECT * FROM (" + o_.query + ") AS kayak_q WHERE " + where +
                            " ORDER BY " + order + " LIMIT " + std::to_string(read_batch_);
    pg::Result r;
    KAYAK_RETURN_IF_ERROR(conn_.Exec(sql, params, &r));
    KAYAK_RETURN_IF_ERROR(Shape(r.get()));
    int rows = PQntuples(r.get());
    const bool full = rows >= read_batch_;
    if (!tb && full) {
      // Without a tiebreak the cursor cannot stop inside a group of equal
      // watermarks: leave the last group for the next read, or, when the whole
      // batch is one group, read all of it now.
      const std::string_view last = PQgetvalue(r.get(), rows - 1, wm_col_);
      int keep = rows;
      while (keep > 0 && last == PQgetvalue(r.get(), keep - 1, wm_col_)) --keep;
      if (keep == 0) return ReadGroup(std::string(last), out);
      rows = keep;
    }
    if (rows > 0) {
      Emit(r.get(), rows, out);
      cursor_wm_ = PQgetvalue(r.get(), rows - 1, wm_col_);
      if (tb) cursor_tb_ = PQgetvalue(r.get(), rows - 1, tb_col_);
      has_cursor_ = true;
    }
    // Caught up: wait for the next poll; otherwise read on at once.
    if (!full) next_poll_ms_ = MonotonicMs() + o_.poll_ms;
    return Status::Ok();
  }

  // Every row whose watermark equals `value` (no tiebreak: one batch).
  Status ReadGroup(const std::string& value, Batch* out) {
    const std::string sql = "SELECT * FROM (" + o_.query + ") AS kayak_q WHERE " +
                            Col(o_.watermark) + " = $1";
    pg::Result r;
    KAYAK_RETURN_IF_ERROR(conn_.Exec(sql, {value.c_str()}, &r));
    KAYAK_RETURN_IF_ERROR(Shape(r.get()));
    Emit(r.get(), PQntuples(r.get()), out);
    cursor_wm_ = value;
    has_cursor_ = true;
    return Status::Ok();
  }

  // One pass reads the whole result through a server-side cursor in one
  // read-only transaction (one consistent snapshot), a batch at a time.
  Status ReadSnapshot(Batch* out) {
    if (!in_snapshot_) {
      KAYAK_RETURN_IF_ERROR(conn_.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
      Status st = conn_.Exec("DECLARE kayak_snapshot NO SCROLL CURSOR FOR SELECT * FROM (" +
                             o_.query + ") AS kayak_q");
      if (!st.ok()) {
        (void)conn_.Exec("ROLLBACK");
        return st;
      }
      in_snapshot_ = true;
      pass_rows_ = 0;
    }
    pg::Result r;
    KAYAK_RETURN_IF_ERROR(conn_.Exec(
        "FETCH " + std::to_string(read_batch_) + " FROM kayak_snapshot", {}, &r));
    KAYAK_RETURN_IF_ERROR(Shape(r.get()));
    const int rows = PQntuples(r.get());
    Emit(r.get(), rows, out);
    pass_rows_ += static_cast<uint64_t>(rows);
    if (rows < read_batch_) {
      in_snapshot_ = false;
      ++passes_;
      KAYAK_RETURN_IF_ERROR(conn_.Exec("COMMIT"));
      next_poll_ms_ = MonotonicMs() + o_.poll_ms;
    }
    return Status::Ok();
  }
};

}  // namespace

ComponentDef PostgresInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "postgres";
  d.help =
      "Reads the rows of `query` from PostgreSQL (libpq), one JSON object a row, its columns as "
      "fields. `incremental` reads in (`watermark`, `tiebreak`) order after a cursor, a batch at "
      "a time, then polls for new rows; `snapshot` reads the whole result on every poll. Types: "
      "integers and numeric as exact numbers, floats as numbers (NaN and the infinities as "
      "strings), bool, json and jsonb as nested JSON, timestamps as RFC 3339 strings in UTC, "
      "bytea as base64, NULL as null, anything else as its text. Without `tiebreak`, rows that "
      "share a watermark are read in one batch and a row committed later with a watermark "
      "already read is missed; rows that commit late with an older watermark are read only "
      "with `lag_secs` covering the delay.";
  d.checkpoint = "incremental: the cursor (the last row's watermark and tiebreak), so a restart "
                 "resumes after it rather than from `start_from`; snapshot: nothing (a restart "
                 "reads the whole result again)";
  d.bad_input = "an unreachable server, a lost connection, a login refused or rights taken "
                "away for a while (SQLSTATE class 28, 42501) are retried with backoff (the card "
                "shows retrying); a query that does not run, or a watermark, tiebreak or "
                "lag_secs that does not fit the query's columns, stops the input naming the "
                "option; every result is read by its own columns, so a table altered while "
                "the input runs (a column added or dropped under SELECT *) gives rows of the "
                "new columns, with a log line; rows whose watermark or tiebreak is NULL are not "
                "read";
  d.props = {
      PropDef{"url", PropType::kString, true, "",
              "libpq connection string or URI (postgresql://user@host:port/db); a password "
              "as ${ENV}"}.NonEmpty().Secret().Address(),
      PropDef{"statement_timeout_secs", PropType::kInt, false, "60",
              "the server cancels a statement that runs longer; a read cancelled so is "
              "tried again with half as many rows, down to one",
              PropRole::kTuning}
          .Range(1, 86400),
      TlsPropDef(),
  };
  for (auto& p : SqlSourceProps("PostgreSQL")) d.props.push_back(std::move(p));
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    SqlSourceOptions so = ReadSqlSourceOptions(o);
    TlsOptions tls = ReadTlsOptions(o);
    if (o.failed()) return nullptr;
    return std::make_unique<PgInput>(o.String("url"), std::move(so),
                                     o.Int("statement_timeout_secs"), std::move(tls), ctx);
  };
  return d;
}

}  // namespace kayak
