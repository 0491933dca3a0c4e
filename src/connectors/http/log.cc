#include "connectors/http/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "common/format.h"
#include "common/io.h"
#include "common/log.h"
#include "kayak/ingest.h"

namespace kayak {

namespace {

// docs/state_format.md, "http log segments".
constexpr char kMagic[4] = {'K', 'Y', 'W', 'L'};
constexpr uint32_t kVersion = 1;
constexpr size_t kSegmentHeader = 24;
constexpr size_t kRecordHeader = 16;
constexpr uint32_t kMaxRecord = 1u << 30;

// Group commit (WriterLoop): after a batch of at least kDelayFromBatch posts
// the writer waits for more before the next fdatasync, while they keep
// coming: until twice as many are queued (at most kMaxDelayedBatch), until
// kGap passes without a new one, or for kMaxDelay at most. Lighter load is
// synced at once. (docs/benchmarks.md, "Measured design
// choices".)
constexpr size_t kDelayFromBatch = 8;
constexpr size_t kMaxDelayedBatch = 1024;
constexpr std::chrono::microseconds kMaxDelay{250};
constexpr std::chrono::microseconds kGap{50};

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

uint32_t RecordCrc(uint64_t seq, const char* payload, size_t n) {
  char s[8];
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((seq >> (8 * i)) & 0xff);
  return checkpoint::Crc32c(payload, n, checkpoint::Crc32c(s, 8));
}

void EncodeRecord(std::string* out, uint64_t seq, const std::string& payload) {
  PutU32(out, static_cast<uint32_t>(payload.size()));
  PutU32(out, RecordCrc(seq, payload.data(), payload.size()));
  PutU64(out, seq);
  out->append(payload);
}

std::string SegmentName(uint64_t first_seq) {
  char name[40];
  std::snprintf(name, sizeof(name), "wal-%020" PRIu64 ".log", first_seq);
  return name;
}

bool ParseSegmentName(const std::string& name, uint64_t* first_seq) {
  if (name.size() != 28 || name.rfind("wal-", 0) != 0 || name.substr(24) != ".log") return false;
  uint64_t v = 0;
  for (size_t i = 4; i < 24; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *first_seq = v;
  return true;
}

Status PreadAll(int fd, char* buf, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, buf, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("read " + path, errno);
    }
    if (r == 0) return Status::Corruption(path + ": ends inside a record it should hold");
    buf += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status PwriteAll(int fd, const char* buf, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, buf, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write " + path, errno);
    }
    buf += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

HttpLog::HttpLog(Options options) : opt_(std::move(options)) {}

HttpLog::~HttpLog() {
  Close();
  if (read_fd_ >= 0) ::close(read_fd_);
}

Result<std::unique_ptr<HttpLog>> HttpLog::Open(Options options, uint64_t restored_seq) {
  std::unique_ptr<HttpLog> log(new HttpLog(std::move(options)));
  {
    MutexLock lock(log->mu_);  // no other thread has it yet
    if (log->opt_.dir.empty()) {
      log->next_seq_ = restored_seq + 1;
      log->durable_seq_ = restored_seq;
      return log;
    }
    if (Status st = log->Scan(restored_seq); !st.ok()) return st;
  }
  log->writer_ = std::thread([p = log.get()] { p->WriterLoop(); });
  return log;
}

namespace {

// The offset of a whole, checked record after byte `from` of segment `b`
// whose sequence is `seq` or later, or 0: what tells a damaged record in the
// middle of a segment from a torn one at its end. A byte-by-byte search, so
// a damaged length field does not hide what follows.
uint64_t NextValidRecord(const std::string& b, uint64_t from, uint64_t seq) {
  for (uint64_t at = from + 1; at + kRecordHeader <= b.size(); ++at) {
    const uint64_t s = GetU64(b.data() + at + 8);
    if (s < seq || s > seq + (1u << 20)) continue;
    const uint32_t len = GetU32(b.data() + at);
    if (len > kMaxRecord || at + kRecordHeader + len > b.size()) continue;
    if (GetU32(b.data() + at + 4) == RecordCrc(s, b.data() + at + kRecordHeader, len)) return at;
  }
  return 0;
}

}  // namespace

Status HttpLog::Scan(uint64_t restored_seq) {
  if (Status st = CreateDirsDurably(opt_.dir); !st.ok()) return st;
  std::vector<std::pair<uint64_t, std::string>> found;
  DIR* d = ::opendir(opt_.dir.c_str());
  if (d == nullptr) return Status::FromErrno("open directory " + opt_.dir, errno);
  while (dirent* e = ::readdir(d)) {
    uint64_t first = 0;
    if (ParseSegmentName(e->d_name, &first)) found.emplace_back(first, e->d_name);
  }
  ::closedir(d);
  std::sort(found.begin(), found.end());
  uint64_t last = 0;
  for (size_t i = 0; i < found.size(); ++i) {
    const bool newest = i + 1 == found.size();
    const uint64_t limit = newest ? UINT64_MAX : found[i + 1].first;  // a later segment wins
    Segment seg;
    seg.first_seq = found[i].first;
    seg.path = opt_.dir + "/" + found[i].second;
    auto bytes = checkpoint::ReadWholeFile(seg.path);
    if (!bytes.ok()) return bytes.status();
    const std::string& b = *bytes;
    const bool header_ok = b.size() >= kSegmentHeader && std::memcmp(b.data(), kMagic, 4) == 0 &&
                           GetU32(b.data() + 4) == kVersion &&
                           GetU64(b.data() + 8) == seg.first_seq &&
                           GetU32(b.data() + 16) == checkpoint::Crc32c(b.data(), 16);
    if (!header_ok) {
      if (!newest) {
        return Status::Corruption(seg.path + ": the segment header is damaged; posts in it would "
                                  "be lost, so the input does not start");
      }
      // A segment whose creation was cut short holds nothing acknowledged.
      KLOG_WARN("http log {}: removing {}, whose header was never completed", opt_.dir, seg.path);
      ::unlink(seg.path.c_str());
      continue;
    }
    uint64_t off = kSegmentHeader;
    uint64_t expect = seg.first_seq;
    while (off + kRecordHeader <= b.size() && expect < limit) {
      const uint32_t len = GetU32(b.data() + off);
      const uint32_t crc = GetU32(b.data() + off + 4);
      const uint64_t seq = GetU64(b.data() + off + 8);
      if (len > kMaxRecord || off + kRecordHeader + len > b.size() || seq != expect ||
          crc != RecordCrc(seq, b.data() + off + kRecordHeader, len)) {
        break;
      }
      off += kRecordHeader + len;
      seg.last_seq = seq;
      // The backlog is what is logged and not yet handed over: the payloads
      // of the records a restart replays, as reads subtract them.
      if (seq > restored_seq) backlog_ += len;
      ++expect;
    }
    seg.end = off;
    if (off < b.size() && expect < limit) {
      // A record that does not check out with a valid one after it is
      // corruption (a flipped bit, a bad sector), not a torn tail: the posts
      // after it were acknowledged, so the input does not start and every
      // file stays (docs/state_format.md, "the http log").
      if (const uint64_t at = NextValidRecord(b, off, expect); at != 0) {
        return Status::Corruption(
            seg.path + ": the record of post " + std::to_string(expect) + " at byte " +
            std::to_string(off) + " is damaged, and acknowledged posts follow it (at byte " +
            std::to_string(at) + "); the input does not start; --discard-state starts its "
            "region empty");
      }
      if (!newest) {
        return Status::Corruption(
            seg.path + ": the record of post " + std::to_string(expect) + " at byte " +
            std::to_string(off) + " is damaged, and later segments hold acknowledged posts; "
            "the input does not start; --discard-state starts its region empty");
      }
    }
    if (newest && off < b.size()) {
      // Zeros are space written ahead of the records. Anything else is a
      // torn last record: the append was cut by a crash before its fsync
      // returned, so it was never acknowledged.
      if (std::all_of(b.begin() + static_cast<std::ptrdiff_t>(off), b.end(),
                      [](char c) { return c == 0; })) {
        KLOG_DEBUG("http log {}: cutting {} zero bytes written ahead in {}", opt_.dir,
                   b.size() - off, seg.path);
      } else {
        KLOG_WARN("http log {}: dropping {} bytes of a torn record at the end of {}", opt_.dir,
                  b.size() - off, seg.path);
      }
      const int fd = ::open(seg.path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(off)) != 0 || ::fdatasync(fd) != 0) {
        const int err = errno;
        if (fd >= 0) ::close(fd);
        return Status::FromErrno("truncate " + seg.path, err);
      }
      ::close(fd);
    }
    if (seg.last_seq != 0) last = std::max(last, seg.last_seq);
    segments_.push_back(std::move(seg));
  }
  durable_seq_ = last;
  next_seq_ = std::max(last, restored_seq) + 1;
  if (restored_seq > last) durable_seq_ = restored_seq;
  KLOG_INFO("http log {}: {} segments, last sequence {}, resuming after {}", opt_.dir,
            segments_.size(), last, restored_seq);
  return Status::Ok();
}

bool HttpLog::Append(std::string payload, Done done) {
  MutexLock lock(mu_);
  if (closed_ || backlog_ + payload.size() > opt_.max_backlog_bytes) return false;
  backlog_ += payload.size();
  if (!opt_.dir.empty()) {
    pending_.push_back({std::move(payload), std::move(done)});
    // While the writer writes or syncs it takes everything queued when it
    // is done: only an idle writer needs waking (a futex call per post
    // otherwise), and one waiting for a larger batch only once it is there.
    if (writer_idle_ && pending_.size() >= writer_wants_) writer_cv_.notify_one();
    return true;
  }
  const uint64_t seq = next_seq_++;
  memory_.push_back({seq, std::move(payload)});
  durable_seq_ = seq;
  const bool wake = durable_seq_ >= reader_wants_;
  lock.Unlock();
  if (wake) reader_cv_.notify_all();
  done(Status::Ok(), seq);
  return true;
}

void HttpLog::WriterLoop() {
  pthread_setname_np(pthread_self(), "kayak-httplog");  // in top -H and /proc
  std::vector<Pending> batch;
  size_t last_batch = 0;
  for (;;) {
    uint64_t first = 0;
    {
      MutexLock lock(mu_);
      writer_idle_ = true;
      while (!closed_ && pending_.empty()) lock.Wait(writer_cv_);
      // Group commit under load: when the last batch was shared by many
      // posts, more are on their way (clients answered by it post again).
      // Wait for them while they keep coming, so that one fdatasync covers
      // up to twice as many: until a gap with no new post, or the delay.
      if (!closed_ && last_batch >= kDelayFromBatch && pending_.size() < 2 * last_batch) {
        writer_wants_ = std::min<size_t>(2 * last_batch, kMaxDelayedBatch);
        const auto start = std::chrono::steady_clock::now();
        const auto until = start + kMaxDelay;
        size_t seen = pending_.size();
        for (auto now = start; now < until; now = std::chrono::steady_clock::now()) {
          if (lock.WaitUntil(writer_cv_, std::min(now + kGap, until), [&]() KAYAK_REQUIRES(mu_) {
                return closed_ || pending_.size() >= writer_wants_;
              })) {
            break;
          }
          if (pending_.size() == seen) break;  // a gap: the burst is over
          seen = pending_.size();
        }
        writer_wants_ = 1;
      }
      writer_idle_ = false;
      if (closed_) break;
      batch.swap(pending_);
      first = next_seq_;
      next_seq_ += batch.size();
    }
    Status st = WriteBatch(&batch, first);
    uint64_t failed_bytes = 0;
    bool wake_reader = false;
    if (!st.ok()) {
      // One line per 10 s however often posts fail (a full disk under load).
      ++unwarned_failures_;
      if (MonotonicMs() - warned_ms_ >= 10000) {
        KLOG_WARN("http log {}: {} batch{} of posts could not be logged and got 503: {}",
                  opt_.dir, unwarned_failures_, unwarned_failures_ == 1 ? "" : "es",
                  st.message());
        warned_ms_ = MonotonicMs();
        unwarned_failures_ = 0;
      }
    }
    {
      MutexLock lock(mu_);
      write_status_ = st;
      if (st.ok()) {
        durable_seq_ = first + batch.size() - 1;
        wake_reader = durable_seq_ >= reader_wants_;
        // Kept for the reader too, so that it need not read back what was
        // just written (the backlog bound covers these bytes).
        for (size_t i = 0; i < batch.size(); ++i) {
          memory_.push_back({first + i, std::move(batch[i].payload)});
        }
      } else {
        next_seq_ = first;  // nothing of the batch is in the log: its numbers are reused
        for (const auto& p : batch) failed_bytes += p.payload.size();
        backlog_ -= failed_bytes;
      }
    }
    // Only a reader waiting for these records is woken (one lingering for a
    // full batch is not, at every fsync).
    if (wake_reader) reader_cv_.notify_all();
    {
      IngestAnswerScope answers;  // the batch's answers reach the listener together
      for (size_t i = 0; i < batch.size(); ++i) batch[i].done(st, st.ok() ? first + i : 0);
    }
    last_batch = batch.size();
    batch.clear();
  }
  if (write_fd_ >= 0) ::close(write_fd_);
  write_fd_ = -1;
  std::vector<Pending> left;
  {
    MutexLock lock(mu_);
    left.swap(pending_);
  }
  for (auto& p : left) p.done(Status::Unavailable("the server is stopping"), 0);
}

Status HttpLog::NewSegment(uint64_t first_seq) {
  if (write_fd_ >= 0) ::close(write_fd_);
  write_fd_ = -1;
  Segment seg;
  seg.first_seq = first_seq;
  seg.path = opt_.dir + "/" + SegmentName(first_seq);
  const int fd = ::open(seg.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("create " + seg.path, errno);
  std::string header(kMagic, 4);
  PutU32(&header, kVersion);
  PutU64(&header, first_seq);
  PutU32(&header, checkpoint::Crc32c(header.data(), 16));
  PutU32(&header, 0);
  Status st = PwriteAll(fd, header.data(), header.size(), 0, seg.path);
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  write_fd_ = fd;
  written_ahead_ = header.size();
  seg.end = kSegmentHeader;
  MutexLock lock(mu_);
  // A segment left empty by a failed write has the same name: it is replaced.
  if (!segments_.empty() && segments_.back().first_seq == first_seq) segments_.pop_back();
  segments_.push_back(std::move(seg));
  return Status::Ok();
}

Status HttpLog::WriteAhead(uint64_t need, const std::string& path) {
  if (need <= written_ahead_) return Status::Ok();
  constexpr uint64_t kStep = 1 << 20;
  const uint64_t target = (need + kStep - 1) / kStep * kStep;
  static const std::string zeros(kStep, '\0');
  // Steps of n, not kStep: from a start that is not a multiple of kStep,
  // kStep steps would leave unwritten holes (which the batch's fdatasync
  // would then have to allocate).
  for (uint64_t off = written_ahead_; off < target;) {
    const uint64_t n = std::min<uint64_t>(kStep, target - off);
    KAYAK_RETURN_IF_ERROR(PwriteAll(write_fd_, zeros.data(), n, off, path));
    off += n;
  }
  if (::fdatasync(write_fd_) != 0) return Status::FromErrno("fdatasync " + path, errno);
  written_ahead_ = target;
  return Status::Ok();
}

Status HttpLog::WriteBatch(std::vector<Pending>* batch, uint64_t first_seq) {
  bool created = false;
  uint64_t end = 0;
  {
    MutexLock lock(mu_);
    if (!segments_.empty()) end = segments_.back().end;
  }
  if (roll_ || write_fd_ < 0 || end >= opt_.segment_bytes) {
    if (Status st = NewSegment(first_seq); !st.ok()) return st;
    roll_ = false;
    created = true;
    end = kSegmentHeader;
  }
  buf_.clear();
  size_t total = 0;
  for (const auto& p : *batch) total += kRecordHeader + p.payload.size();
  buf_.reserve(total);
  for (size_t i = 0; i < batch->size(); ++i) {
    EncodeRecord(&buf_, first_seq + i, (*batch)[i].payload);
  }
  std::string path;
  {
    MutexLock lock(mu_);
    path = segments_.back().path;
  }
  // Records overwrite zeros written (and synced) ahead of them, so the
  // fdatasync that acknowledges them writes data only, not the inode too:
  // the file's size does not change (docs/benchmarks.md).
  Status st = WriteAhead(end + buf_.size(), path);
  if (st.ok()) st = PwriteAll(write_fd_, buf_.data(), buf_.size(), end, path);
  if (st.ok()) {
    const auto t0 = std::chrono::steady_clock::now();
    if (::fdatasync(write_fd_) != 0) st = Status::FromErrno("fdatasync " + path, errno);
    if (opt_.fsync_seconds != nullptr) {
      opt_.fsync_seconds->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (st.ok() && created) st = SyncDir(opt_.dir);
  if (!st.ok()) {
    // Whatever reached the file is cut off and the segment abandoned: a
    // fresh one takes the next batch (after a failed fdatasync the kernel
    // may report the next one clean without the data, so the file is not
    // trusted again). On replay, a later segment's first sequence ends the
    // earlier one, so nothing of this batch can come back.
    // The cut is made durable too: otherwise a power loss before the next
    // segment is durable could bring back records whose posts were answered
    // 503 (a client that sent them again would see them twice).
    if (::ftruncate(write_fd_, static_cast<off_t>(end)) != 0 || ::fdatasync(write_fd_) != 0) {
      KLOG_WARN("http log {}: cannot cut the failed batch off {} durably: {}", opt_.dir, path,
                std::strerror(errno));
    }
    ::close(write_fd_);
    write_fd_ = -1;
    roll_ = true;
    return st;
  }
  MutexLock lock(mu_);
  Segment& seg = segments_.back();
  seg.end = end + buf_.size();
  seg.last_seq = first_seq + batch->size() - 1;
  if (buf_.capacity() > (4u << 20)) std::string().swap(buf_);  // after a burst
  return Status::Ok();
}

Status HttpLog::Read(uint64_t after_seq, size_t max_records, size_t max_bytes, int64_t wait_ms,
                     std::vector<LogRecord>* out, int64_t linger_ms) {
  MutexLock lock(mu_);
  auto wait_until_seq = [&](uint64_t want, int64_t ms) KAYAK_REQUIRES(mu_) {
    if (closed_ || durable_seq_ >= want || ms <= 0) return;
    reader_wants_ = want;
    lock.WaitFor(reader_cv_, std::chrono::milliseconds(ms),
                        [&]() KAYAK_REQUIRES(mu_) { return closed_ || durable_seq_ >= want; });
    reader_wants_ = UINT64_MAX;
  };
  wait_until_seq(after_seq + 1, wait_ms);
  if (durable_seq_ > after_seq) wait_until_seq(after_seq + max_records, linger_ms);
  if (durable_seq_ <= after_seq) return Status::Ok();
  // Records logged by this process are in memory until read; what came
  // before (a replay after a restart, or a rewind) is read from the files.
  while (!opt_.dir.empty() && !memory_.empty() && memory_.front().seq <= after_seq) {
    memory_.pop_front();  // read from the files already
  }
  if (opt_.dir.empty() || (!memory_.empty() && memory_.front().seq == after_seq + 1)) {
    size_t bytes = 0;
    while (!memory_.empty() && out->size() < max_records && (out->empty() || bytes < max_bytes)) {
      LogRecord& r = memory_.front();
      if (r.seq > after_seq) {
        bytes += r.payload.size();
        backlog_ -= r.payload.size();
        out->push_back(std::move(r));
      }
      memory_.pop_front();
    }
    return Status::Ok();
  }
  lock.Unlock();
  const size_t before = out->size();
  Status st = ReadFromDisk(after_seq, max_records, max_bytes, out);
  lock.Lock();
  for (size_t i = before; i < out->size(); ++i) {
    backlog_ -= std::min<uint64_t>(backlog_, (*out)[i].payload.size());
  }
  return st;
}

Status HttpLog::ReadFromDisk(uint64_t after_seq, size_t max_records, size_t max_bytes,
                             std::vector<LogRecord>* out) {
  // The segment holding after_seq + 1 (or the first one after it).
  Segment seg;
  {
    MutexLock lock(mu_);
    const Segment* pick = nullptr;
    for (const auto& s : segments_) {
      if (s.last_seq != 0 && s.last_seq > after_seq) {
        pick = &s;
        break;
      }
    }
    if (pick == nullptr) return Status::Ok();
    seg = *pick;
  }
  if (seg.first_seq > after_seq + 1) {
    KLOG_WARN("http log {}: posts {} to {} are no longer in the log; continuing at {}", opt_.dir,
              after_seq + 1, seg.first_seq - 1, seg.first_seq);
  }
  if (read_path_ != seg.path) {
    if (read_fd_ >= 0) ::close(read_fd_);
    read_fd_ = ::open(seg.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (read_fd_ < 0) {
      read_path_.clear();
      return Status::FromErrno("open " + seg.path, errno);
    }
    read_path_ = seg.path;
    read_next_ = 0;
  }
  // Reading on from where the last read stopped skips the scan.
  uint64_t off = read_next_ == after_seq + 1 && read_next_ >= seg.first_seq ? read_off_
                                                                             : kSegmentHeader;
  size_t bytes = 0;
  char head[kRecordHeader];
  while (off + kRecordHeader <= seg.end && out->size() < max_records &&
         (bytes == 0 || bytes < max_bytes)) {
    if (Status st = PreadAll(read_fd_, head, kRecordHeader, off, seg.path); !st.ok()) return st;
    const uint32_t len = GetU32(head);
    const uint64_t seq = GetU64(head + 8);
    if (len > kMaxRecord || off + kRecordHeader + len > seg.end) {
      return Status::Corruption(seg.path + ": a record overruns the logged end at offset " +
                                std::to_string(off));
    }
    if (seq > after_seq) {
      LogRecord r;
      r.seq = seq;
      r.payload.resize(len);
      if (Status st = PreadAll(read_fd_, r.payload.data(), len, off + kRecordHeader, seg.path);
          !st.ok()) {
        return st;
      }
      if (GetU32(head + 4) != RecordCrc(seq, r.payload.data(), len)) {
        return Status::Corruption(seg.path + ": checksum mismatch in post " + std::to_string(seq));
      }
      bytes += len;
      out->push_back(std::move(r));
    }
    off += kRecordHeader + len;
    read_off_ = off;
    read_next_ = seq + 1;
  }
  return Status::Ok();
}

void HttpLog::Release(uint64_t seq) {
  MutexLock lock(mu_);
  // The newest segment is the one being written: never removed here.
  while (segments_.size() > 1 && segments_.front().last_seq <= seq) {
    const Segment& s = segments_.front();
    if (::unlink(s.path.c_str()) == 0) {
      KLOG_DEBUG("http log {}: removed {}, covered by a committed checkpoint", opt_.dir, s.path);
    }
    segments_.erase(segments_.begin());
  }
}

Status HttpLog::write_status() const {
  MutexLock lock(mu_);
  return write_status_;
}

uint64_t HttpLog::last_seq() const {
  MutexLock lock(mu_);
  return durable_seq_;
}

uint64_t HttpLog::backlog_bytes() const {
  MutexLock lock(mu_);
  return backlog_;
}

size_t HttpLog::segments() const {
  MutexLock lock(mu_);
  return segments_.size();
}

void HttpLog::Close() {
  {
    MutexLock lock(mu_);
    if (closed_ && !writer_.joinable()) return;
    closed_ = true;
  }
  writer_cv_.notify_all();
  reader_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

}  // namespace kayak
