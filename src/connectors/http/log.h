// The http input's write-ahead log (SPEC 5.5, docs/state_format.md).
//
// Every accepted post becomes one record with a sequence number. With a
// directory, records are appended to segment files by one writer thread and
// a post is acknowledged only after an fdatasync that covers it; every post
// that arrived while the previous fdatasync ran shares the next one (group
// commit), and under load the writer waits a little for more to share it
// (at most 250 µs, and only while posts keep coming). Without a directory
// the log is a bounded queue in memory.
//
// The pipeline thread reads records in sequence order; after a restart it
// starts after the sequence its checkpoint recorded, so every acknowledged
// post after that is replayed. Segments wholly covered by a committed
// checkpoint are deleted.
//
// Threading: Append from any thread (the listener's); Read from one reader
// thread; Release from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "kayak/status.h"
#include "kayak/thread_annotations.h"

namespace kayak {

struct LogRecord {
  uint64_t seq = 0;
  std::string payload;  // NDJSON: one message a line
};

class HttpLog {
 public:
  // Called once per Append, from the writer thread (or at once): the
  // record's sequence number, or why it is not logged.
  using Done = std::function<void(Status, uint64_t seq)>;

  struct Options {
    std::string dir;               // "" = in memory, nothing durable
    uint64_t max_backlog_bytes = 64 << 20;  // appended but not yet read
    uint64_t segment_bytes = 64 << 20;      // a segment is rolled past this
    metrics::Histogram* fsync_seconds = nullptr;  // each batch's fdatasync, when set
  };

  // Opens the log: scans the segments in `dir` (a torn last record is cut
  // off), and continues numbering after the larger of the last logged
  // sequence and `restored_seq` (what the checkpoint says was consumed).
  static Result<std::unique_ptr<HttpLog>> Open(Options options, uint64_t restored_seq);
  ~HttpLog();

  // Queues `payload` for the log. False (and `done` not called) when the
  // backlog is full: the caller answers 503.
  bool Append(std::string payload, Done done);

  // Appends to `out` the durable records after `after_seq`, in order, up to
  // `max_records` or `max_bytes` (at least one record if any), waiting up to
  // `wait_ms` for the first, then up to `linger_ms` more for `max_records`
  // (so a busy input hands over full batches, not one post at a time).
  Status Read(uint64_t after_seq, size_t max_records, size_t max_bytes, int64_t wait_ms,
              std::vector<LogRecord>* out, int64_t linger_ms = 0);

  // A checkpoint holding `seq` as consumed is durable: segments whose every
  // record is at or below it are deleted.
  void Release(uint64_t seq);

  // For the card and the API.
  uint64_t last_seq() const;
  // Why the last batch could not be logged (a full disk, an I/O error), or
  // Ok once one is logged again.
  Status write_status() const;
  uint64_t backlog_bytes() const;
  size_t segments() const;

  // Stops the writer; queued posts are refused (503). Idempotent.
  void Close();

 private:
  struct Segment {
    uint64_t first_seq = 0;
    uint64_t last_seq = 0;   // 0: no record yet
    uint64_t end = 0;        // bytes that hold whole, durable records
    std::string path;
  };
  struct Pending {
    std::string payload;
    Done done;
  };

  explicit HttpLog(Options options);
  Status Scan(uint64_t restored_seq) KAYAK_REQUIRES(mu_);
  void WriterLoop();
  Status WriteBatch(std::vector<Pending>* batch, uint64_t first_seq);
  Status NewSegment(uint64_t first_seq);
  // Zero-fills the open segment, synced, to at least `need` bytes.
  Status WriteAhead(uint64_t need, const std::string& path);
  Status ReadFromDisk(uint64_t after_seq, size_t max_records, size_t max_bytes,
                      std::vector<LogRecord>* out);

  const Options opt_;
  mutable Mutex mu_;
  std::condition_variable writer_cv_;
  std::condition_variable reader_cv_;
  std::vector<Pending> pending_ KAYAK_GUARDED_BY(mu_);
  uint64_t backlog_ KAYAK_GUARDED_BY(mu_) = 0;  // appended, not yet read
  uint64_t next_seq_ KAYAK_GUARDED_BY(mu_) = 1;
  uint64_t durable_seq_ KAYAK_GUARDED_BY(mu_) = 0;  // the last acknowledged record
  Status write_status_ KAYAK_GUARDED_BY(mu_);  // the last batch's write
  int64_t warned_ms_ = 0;               // writer thread: the last warning of a failed write
  uint64_t unwarned_failures_ = 0;      // writer thread: failed batches since that warning
  std::deque<LogRecord> memory_ KAYAK_GUARDED_BY(mu_);  // the in-memory log, or
                                       // with a directory the records logged
                                       // since Open and not yet read
  std::vector<Segment> segments_ KAYAK_GUARDED_BY(mu_);
  bool closed_ KAYAK_GUARDED_BY(mu_) = false;
  bool writer_idle_ KAYAK_GUARDED_BY(mu_) = false;  // the writer waits for posts
  size_t writer_wants_ KAYAK_GUARDED_BY(mu_) = 1;  // ... until this many are queued
  uint64_t reader_wants_ KAYAK_GUARDED_BY(mu_) = UINT64_MAX;  // wake the reader at this sequence
  int write_fd_ = -1;                  // writer thread only
  bool roll_ = true;                   // writer thread only: next batch starts a segment
  uint64_t written_ahead_ = 0;         // writer thread only: zero-filled, synced length
  std::string buf_;                    // writer thread only: the batch being encoded
  int read_fd_ = -1;                   // reader only
  std::string read_path_;              // reader only
  uint64_t read_off_ = 0;              // reader only: where record read_next_ starts
  uint64_t read_next_ = 0;             // reader only
  std::thread writer_;
};

}  // namespace kayak
