// file: NDJSON parts in a directory, named part-NNNNNNNNNN.ndjson so that
// name order is write order; a part is rolled by size or age.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/crash_point.h"
#include "common/io.h"
#include "common/json_util.h"
#include "kayak/component.h"

namespace kayak {

namespace {

// The sequence number in "part-0000000042.ndjson", or -1.
int64_t PartSeq(const std::string& name) {
  unsigned long long seq = 0;
  char tail[16] = {0};
  if (name.size() != 22 || std::sscanf(name.c_str(), "part-%10llu.%6s", &seq, tail) != 2 ||
      std::string(tail) != "ndjson") {
    return -1;
  }
  return static_cast<int64_t>(seq);
}

class FileOutput final : public Output {
 public:
  FileOutput(std::string dir, int64_t max_part_bytes, int64_t max_part_secs, const Clock* clock)
      : dir_(std::move(dir)),
        max_part_bytes_(max_part_bytes),
        max_part_ms_(max_part_secs * 1000),
        clock_(clock) {}

  ~FileOutput() override { (void)ClosePart(); }

  Status Open() override {
    if (Status st = CreateDirsDurably(dir_); !st.ok()) return st;
    std::vector<std::pair<int64_t, std::string>> parts;
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) return Status::FromErrno("open directory " + dir_, errno);
    while (dirent* e = ::readdir(d)) {
      const int64_t seq = PartSeq(e->d_name);
      if (seq >= 0) parts.emplace_back(seq, e->d_name);
    }
    ::closedir(d);
    if (restored_) return ResumeFromCheckpoint(parts);
    // Continue numbering after the parts already there.
    for (const auto& p : parts) next_seq_ = std::max(next_seq_, p.first + 1);
    if (next_seq_ < 1) next_seq_ = 1;
    return Status::Ok();
  }

  Status Checkpoint(uint64_t id, std::string* state) override {
    (void)id;
    // After a failed fdatasync the kernel may have dropped the dirty pages
    // and a later fdatasync can succeed without them (the "fsyncgate"
    // lesson): this output never vouches for a checkpoint again. Its region
    // stops committing; a restart goes back to the last good checkpoint and
    // rewrites from there.
    if (!sync_error_.empty()) return Status::Io(sync_error_);
    if (fd_ >= 0 && ::fdatasync(fd_) != 0) {
      return SyncFailed(Status::FromErrno("fdatasync " + part_path_, errno));
    }
    // A part's directory entry must be as durable as its bytes.
    if (!dir_synced_) {
      if (Status st = SyncDir(dir_); !st.ok()) return SyncFailed(st);
      dir_synced_ = true;
    }
    nlohmann::json j;
    j["part"] = fd_ >= 0 ? part_path_.substr(dir_.size() + 1) : "";
    j["length"] = fd_ >= 0 ? part_bytes_ : 0;
    j["next_seq"] = next_seq_;
    *state = DumpJson(j);
    return Status::Ok();
  }

  Status RestoreState(std::string_view state) override {
    nlohmann::json j = nlohmann::json::parse(state, nullptr, false);
    if (!j.is_object() || !j["part"].is_string() || !j["length"].is_number_unsigned() ||
        !j["next_seq"].is_number_integer()) {
      return Status::Corruption("file output: unreadable checkpointed state");
    }
    restored_ = true;
    restore_part_ = j["part"].get<std::string>();
    restore_length_ = j["length"].get<uint64_t>();
    next_seq_ = j["next_seq"].get<int64_t>();
    return Status::Ok();
  }

  Status Write(const Batch& batch) override {
    buf_.clear();
    for (const auto& m : batch.messages) {
      buf_ += m.payload();
      buf_ += '\n';
    }
    const int64_t now = clock_->NowMs();
    if (fd_ >= 0 && ((part_bytes_ > 0 && part_bytes_ + buf_.size() > static_cast<size_t>(max_part_bytes_)) ||
                     (max_part_ms_ > 0 && now - part_opened_ms_ >= max_part_ms_))) {
      KAYAK_RETURN_IF_ERROR(ClosePart());
    }
    if (fd_ < 0) KAYAK_RETURN_IF_ERROR(OpenPart(now));
    // A write that failed part way left a torn batch after the last good
    // byte; it is cut off (durably) before anything is appended again, so a
    // part only ever holds whole lines of whole batches.
    if (torn_) KAYAK_RETURN_IF_ERROR(CutBack());
    if (Status st = WriteAll(fd_, buf_.data(), buf_.size(), part_path_); !st.ok()) {
      torn_ = true;
      (void)CutBack();  // tried again before the next write if it fails now
      return st;
    }
    part_bytes_ += buf_.size();
    return Status::Ok();
  }

  void Tick(int64_t now_ms) override {
    if (fd_ >= 0 && max_part_ms_ > 0 && now_ms - part_opened_ms_ >= max_part_ms_) {
      (void)ClosePart();
    }
  }

  Status Close() override { return ClosePart(); }

 private:
  // Back to the checkpoint: parts begun after it are removed, the part open
  // at it is cut to its checkpointed length and appended to again, so the
  // replay writes the same bytes in the same places.
  Status ResumeFromCheckpoint(const std::vector<std::pair<int64_t, std::string>>& parts) {
    for (const auto& [seq, name] : parts) {
      if (seq >= next_seq_) {
        const std::string path = dir_ + "/" + name;
        if (::unlink(path.c_str()) != 0) return Status::FromErrno("remove " + path, errno);
      }
    }
    if (restore_part_.empty()) return Status::Ok();
    part_path_ = dir_ + "/" + restore_part_;
    const int fd = ::open(part_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno("open " + part_path_, errno);
    struct stat st{};
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < restore_length_) {
      ::close(fd);
      return Status::Corruption("file output: " + part_path_ + " is shorter than the " +
                                std::to_string(restore_length_) +
                                " bytes the checkpoint recorded; bytes it counted as durable "
                                "are gone");
    }
    // KAYAK_MUTATION=file_keep_tail breaks the promise on purpose, keeping
    // what was written after the checkpoint (the crash tools must see it).
    const bool keep_tail = Mutation("file_keep_tail");
    if (!keep_tail && ::ftruncate(fd, static_cast<off_t>(restore_length_)) != 0) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno("truncate " + part_path_, err);
    }
    fd_ = fd;
    part_bytes_ = keep_tail ? static_cast<uint64_t>(st.st_size) : restore_length_;
    part_opened_ms_ = clock_->NowMs();
    return Status::Ok();
  }

  // Truncates the open part to the bytes of whole batches written to it and
  // makes that length durable: an fsync after the cut, so a power loss
  // cannot bring the torn bytes back in front of the retried batch.
  Status CutBack() {
    if (::ftruncate(fd_, static_cast<off_t>(part_bytes_)) != 0) {
      return Status::FromErrno("cut " + part_path_ + " back to " + std::to_string(part_bytes_) +
                                   " bytes after a failed write",
                               errno);
    }
    if (::fdatasync(fd_) != 0) {
      return SyncFailed(Status::FromErrno("fdatasync " + part_path_ + " after cutting it back",
                                          errno));
    }
    torn_ = false;
    return Status::Ok();
  }

  Status OpenPart(int64_t now) {
    char name[32];
    std::snprintf(name, sizeof(name), "part-%010lld.ndjson", static_cast<long long>(next_seq_));
    part_path_ = dir_ + "/" + name;
    const int fd = ::open(part_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno("open " + part_path_, errno);
    fd_ = fd;
    dir_synced_ = false;
    ++next_seq_;
    part_bytes_ = 0;
    part_opened_ms_ = now;
    return Status::Ok();
  }

  Status ClosePart() {
    if (fd_ < 0) return Status::Ok();
    if (torn_) KAYAK_RETURN_IF_ERROR(CutBack());
    // A finished part is made durable before the next one starts, so a
    // reader that sees part N+1 can trust part N.
    const int rc = ::fdatasync(fd_);
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (rc != 0) return SyncFailed(Status::FromErrno("fdatasync " + part_path_, err));
    return Status::Ok();
  }

  Status SyncFailed(Status st) {
    if (sync_error_.empty()) {
      sync_error_ = st.message() + " (this output takes part in no further checkpoint; restart "
                    "kayak to resume from the last committed one)";
    }
    return st;
  }

  const std::string dir_;
  const int64_t max_part_bytes_;
  const int64_t max_part_ms_;
  const Clock* clock_;
  int fd_ = -1;
  std::string part_path_;
  int64_t next_seq_ = 1;
  size_t part_bytes_ = 0;
  int64_t part_opened_ms_ = 0;
  std::string buf_;  // reused for every batch
  bool restored_ = false;
  bool torn_ = false;        // a write failed part way; the part is longer than part_bytes_
  bool dir_synced_ = true;   // false from a part's creation to the next directory fsync
  std::string sync_error_;   // set by the first failed fdatasync; sticky
  std::string restore_part_;
  uint64_t restore_length_ = 0;
};

}  // namespace

ComponentDef FileOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "file";
  d.help = "Writes each message as one NDJSON line into parts `part-0000000001.ndjson`, ... in "
           "the directory `path`; names sort in write order. A part is closed (and fsynced) "
           "when the next batch would take it past `max_part_bytes`, or `max_part_secs` after "
           "it was opened. A restart continues after the highest part number present.";
  d.checkpoint = "the open part's name and its fsynced length";
  d.bad_input =
      "a failed write is retried by `retry` and, without a state dir, then dropped and counted; a directory that cannot be created fails the output at start (its card shows it and batches sent to it are counted as errors)";
  d.props = {
      PropDef{"path", PropType::kString, true, "", "the directory of parts (created if missing)"}.NonEmpty(),
      PropDef{"max_part_bytes", PropType::kInt, false, "67108864", "roll a part at this size",
       PropRole::kTuning}.AtLeast(1).Unit("bytes"),
      PropDef{"max_part_secs", PropType::kInt, false, "3600", "roll a part at this age; 0 = never",
       PropRole::kTuning}.AtLeast(0).Unit("s"),
  };
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    if (o.failed()) return nullptr;
    return std::make_unique<FileOutput>(o.String("path"), o.Int("max_part_bytes"),
                                        o.Int("max_part_secs"), ctx.clock);
  };
  return d;
}

}  // namespace kayak
