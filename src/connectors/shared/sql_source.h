// What the database inputs (postgres, clickhouse) share: the options of a
// query read incrementally after a (watermark, tiebreak) cursor or whole on
// every poll, and the cursor's form in a checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kayak/component.h"
#include "kayak/status.h"

namespace kayak {

struct SqlSourceOptions {
  std::string query, mode, watermark, tiebreak, start_from;
  double lag_secs = 0;
  int64_t poll_ms = 1000;
  int64_t batch_size = 1000;
  bool incremental() const { return mode == "incremental"; }
};

// The property rows of those options (`query` ... `batch_size`), for a
// component whose database is `db` (in the help texts).
std::vector<PropDef> SqlSourceProps(const std::string& db);

// Reads them, recording an error for combinations the table cannot say
// (incremental without a watermark, snapshot with cursor options).
SqlSourceOptions ReadSqlSourceOptions(const Options& o);

// The cursor in a checkpoint: {"watermark": W, "tiebreak": T}, each the JSON
// text of the last row's value (T absent without a tiebreak column).
std::string EncodeCursor(std::string_view watermark_json, std::string_view tiebreak_json);
// The JSON texts back; Corruption for anything else.
Status DecodeCursor(std::string_view position, std::string* watermark_json,
                    std::string* tiebreak_json);

// The log line of an incremental input without a tiebreak: what it cannot
// promise.
std::string NoTiebreakWarning(const std::string& pipeline, const std::string& type);

}  // namespace kayak
