// file: NDJSON from a file or a glob of files, read in name order; `follow`
// tails the last file and picks up new files that match.
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/format.h"
#include "common/clock.h"
#include "common/json_util.h"
#include "kayak/kept_fields.h"
#include "common/log.h"
#include "common/ndjson.h"
#include "kayak/component.h"

namespace kayak {

namespace {

constexpr size_t kReadChunk = 1 << 20;
constexpr size_t kMaxLineBytes = 16 << 20;  // a longer line is skipped and counted

// A file's identity, kept in the checkpoint: a file replaced by another under
// the same name is read from its start (SPEC 4).
struct FileId {
  uint64_t dev = 0, ino = 0;
  uint64_t head_bytes = 0;  // of the first kHeadBytes, as many as there were
  uint32_t head_crc = 0;
};
constexpr size_t kHeadBytes = 4096;

class FileInput final : public Input {
 public:
  FileInput(std::string pattern, bool follow, int64_t batch_size, int64_t poll_ms,
            const ComponentContext& ctx)
      : pattern_(std::move(pattern)),
        follow_(follow),
        batch_size_(static_cast<size_t>(batch_size)),
        poll_ms_(poll_ms),
        clock_(ctx.clock),
        stats_(ctx.stats),
        keep_fields_(ctx.transforms_follow) {}

  ~FileInput() override { CloseFile(); }

  Status Open() override {
    std::vector<std::string> files;
    KAYAK_RETURN_IF_ERROR(Glob(&files));
    if (files.empty() && !follow_) {
      return Status::Invalid("no file matches '" + pattern_ + "'");
    }
    return Status::Ok();
  }

  Status Read(Batch* out, int64_t wait_ms, bool* finished) override {
    const int64_t deadline = MonotonicMs() + wait_ms;
    read_ms_ = clock_->NowMs();  // the arrival time of this batch's messages
    out->messages.reserve(std::min<size_t>(batch_size_, 4096));  // one allocation a batch, mostly
    while (out->messages.size() < batch_size_) {
      if (fd_ < 0) {
        bool none = false;
        KAYAK_RETURN_IF_ERROR(OpenNext(&none));
        if (none) {
          if (!follow_) {
            *finished = true;
            return Status::Ok();
          }
          if (!out->empty() || MonotonicMs() >= deadline) return Status::Ok();
          Sleep(deadline);
          continue;
        }
      }
      // Hand over complete lines already in the buffer.
      if (TakeLines(out)) continue;
      ssize_t n = ReadMore();
      if (n < 0) return Status::FromErrno("read " + current_, errno);
      if (n > 0) continue;
      // End of this file.
      std::vector<std::string> files;
      KAYAK_RETURN_IF_ERROR(Glob(&files));
      const bool has_next = std::any_of(files.begin(), files.end(),
                                        [&](const std::string& f) { return f > current_; });
      if (has_next || !follow_) {
        // A last line without a newline is a message once the file is done.
        if (!buf_.empty() && !follow_) {
          Emit(std::string_view(buf_), 0, offset_, out);
          offset_ += buf_.size();
          buf_.clear();
        }
        if (has_next) {
          CloseFile();
          continue;
        }
        CloseFile();
        done_with_all_ = true;
        continue;
      }
      // Following: was the file truncated or replaced?
      struct stat st{};
      if (::stat(current_.c_str(), &st) == 0 &&
          (st.st_ino != id_.ino || static_cast<uint64_t>(st.st_size) < read_pos_)) {
        KLOG_INFO("file input: {} was truncated or replaced; reading it from the start", current_);
        const std::string path = current_;
        CloseFile();
        reopen_ = path;
        continue;
      }
      if (!out->empty() || MonotonicMs() >= deadline) return Status::Ok();
      Sleep(deadline);
    }
    return Status::Ok();
  }

  bool Rewindable() const override { return true; }

  std::string SavePosition() const override {
    nlohmann::json j;
    j["done"] = last_done_;
    if (done_id_.has_value()) j["done_id"] = IdJson(*done_id_);
    if (fd_ >= 0) {
      j["file"] = current_;
      j["offset"] = offset_;
      j["id"] = IdJson(id_);
    } else {
      // Not reading yet: still where a restore (or a truncation) put it.
      j["file"] = reopen_;
      j["offset"] = reopen_offset_;
      if (reopen_id_.has_value()) j["id"] = IdJson(*reopen_id_);
    }
    return DumpJson(j);
  }

  Status RestorePosition(std::string_view position) override {
    nlohmann::json j = nlohmann::json::parse(position, nullptr, false);
    if (!j.is_object() || !j["done"].is_string() || !j["file"].is_string() ||
        !j["offset"].is_number_unsigned()) {
      return Status::Corruption("file input: unreadable checkpointed position");
    }
    last_done_ = j["done"].get<std::string>();
    reopen_ = j["file"].get<std::string>();
    reopen_offset_ = j["offset"].get<uint64_t>();
    // The files' identities (positions written before they were kept have none).
    reopen_id_ = IdFrom(j["id"]);
    done_id_ = IdFrom(j["done_id"]);
    // The file read to its end, replaced since by another under its name:
    // that one is read from its start.
    if (reopen_.empty() && !last_done_.empty() && done_id_.has_value()) {
      const int fd = ::open(last_done_.c_str(), O_RDONLY | O_CLOEXEC);
      const std::string why = fd >= 0 ? NotTheSame(fd, *done_id_) : "";  // gone: nothing to read
      if (fd >= 0) ::close(fd);
      if (!why.empty()) {
        KLOG_WARN("file input: {} {}; reading it from the start", last_done_, why);
        reopen_ = last_done_;
        reopen_offset_ = 0;
      }
    }
    return Status::Ok();
  }

  std::string Position() const override {
    if (current_.empty()) return "";
    return current_ + " at byte " + std::to_string(offset_);
  }

  // The bytes of the open file past what was handed over.
  Lag Behind() const override {
    if (fd_ < 0) return done_with_all_ ? Lag{0, "bytes"} : Lag{};  // every file read, or between files
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return {};
    const int64_t size = static_cast<int64_t>(st.st_size);
    return {std::max<int64_t>(0, size - static_cast<int64_t>(offset_)), "bytes"};
  }

 private:
  void Sleep(int64_t deadline) {
    const int64_t left = deadline - MonotonicMs();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(left, 1, poll_ms_)));
  }

  Status Glob(std::vector<std::string>* files) {
    glob_t g{};
    const int rc = ::glob(pattern_.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) files->emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) return Status::Io("cannot list files matching " + pattern_);
    std::sort(files->begin(), files->end());
    return Status::Ok();
  }

  // Opens the first file after the current one; `*none` when there is none.
  Status OpenNext(bool* none) {
    *none = false;
    std::string next;
    if (!reopen_.empty()) {
      next = reopen_;
      reopen_.clear();
    } else {
      if (done_with_all_ && !follow_) {
        *none = true;
        return Status::Ok();
      }
      std::vector<std::string> files;
      KAYAK_RETURN_IF_ERROR(Glob(&files));
      for (const auto& f : files) {
        if (f > last_done_) {
          next = f;
          break;
        }
      }
      if (next.empty()) {
        *none = true;
        return Status::Ok();
      }
    }
    const int fd = ::open(next.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open " + next, errno);
    struct stat st{};
    ::fstat(fd, &st);
    fd_ = fd;
    current_ = next;
    // To know the file again after a restart (SPEC 4: a file replaced by
    // another under the same name is read from its start).
    id_ = IdOf(fd, st);
    offset_ = 0;
    read_pos_ = 0;
    buf_.clear();
    if (reopen_offset_ > 0) {
      // Resuming at a checkpointed offset. A file now shorter than that, or
      // not the file the checkpoint was taken on, was truncated or replaced
      // since: read it from the start.
      std::string why;
      if (static_cast<uint64_t>(st.st_size) < reopen_offset_) {
        why = "is shorter than its checkpointed offset " + std::to_string(reopen_offset_);
      } else if (reopen_id_.has_value()) {
        why = NotTheSame(fd_, *reopen_id_);
      }
      if (why.empty() && ::lseek(fd_, static_cast<off_t>(reopen_offset_), SEEK_SET) >= 0) {
        offset_ = read_pos_ = reopen_offset_;
      } else {
        KLOG_WARN("file input: {} {}; reading it from the start", next,
                  why.empty() ? "cannot be positioned" : why);
      }
      reopen_offset_ = 0;
    }
    reopen_id_.reset();
    done_with_all_ = false;
    return Status::Ok();
  }

  void CloseFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
      last_done_ = current_;
      done_id_ = id_;
    }
  }

  static nlohmann::json IdJson(const FileId& id) {
    return nlohmann::json{{"dev", id.dev}, {"ino", id.ino}, {"head_bytes", id.head_bytes},
                          {"head_crc", id.head_crc}};
  }
  static std::optional<FileId> IdFrom(const nlohmann::json& j) {
    if (!j.is_object() || !j["dev"].is_number_unsigned() || !j["ino"].is_number_unsigned() ||
        !j["head_bytes"].is_number_unsigned() || !j["head_crc"].is_number_unsigned()) {
      return std::nullopt;
    }
    return FileId{j["dev"].get<uint64_t>(), j["ino"].get<uint64_t>(),
                  j["head_bytes"].get<uint64_t>(), j["head_crc"].get<uint32_t>()};
  }

  // The identity of the open file `fd` (`st` its fstat).
  static FileId IdOf(int fd, const struct stat& st) {
    std::string head(kHeadBytes, '\0');
    const ssize_t got = ::pread(fd, head.data(), kHeadBytes, 0);
    const uint64_t n = got > 0 ? static_cast<uint64_t>(got) : 0;
    return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), n,
                  checkpoint::Crc32c(head.data(), n)};
  }

  // Why the open file `fd` is not the one `id` describes, or "" if it is.
  static std::string NotTheSame(int fd, const FileId& id) {
    struct stat st{};
    if (::fstat(fd, &st) != 0 || st.st_dev != id.dev || st.st_ino != id.ino) {
      return "is another file (device and inode) than the one checkpointed";
    }
    std::string head(id.head_bytes, '\0');
    const ssize_t got = ::pread(fd, head.data(), id.head_bytes, 0);
    if (got < 0 || static_cast<uint64_t>(got) < id.head_bytes ||
        checkpoint::Crc32c(head.data(), id.head_bytes) != id.head_crc) {
      return "does not begin with the bytes the checkpointed file began with";
    }
    return "";
  }

  ssize_t ReadMore() {
    const size_t old = buf_.size();
    buf_.resize(old + kReadChunk);
    ssize_t n;
    do {
      n = ::read(fd_, buf_.data() + old, kReadChunk);
    } while (n < 0 && errno == EINTR);
    buf_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) read_pos_ += static_cast<uint64_t>(n);
    if (buf_.size() > kMaxLineBytes && buf_.find('\n') == std::string::npos) {
      stats_->RecordError(current_ + ": a line longer than 16 MiB was skipped");
      offset_ += buf_.size();
      buf_.clear();
    }
    return n;
  }

  // Moves complete lines from the buffer into `out`; true if any was taken.
  bool TakeLines(Batch* out) {
    size_t start = 0;
    bool took = false;
    while (out->messages.size() < batch_size_) {
      const size_t nl = buf_.find('\n', start);
      if (nl == std::string::npos) break;
      Emit(std::string_view(buf_).substr(start, nl - start), buf_.size() - nl, offset_ + start,
           out);
      start = nl + 1;
      took = true;
    }
    if (start > 0) {
      offset_ += start;
      buf_.erase(0, start);
    }
    return took;
  }

  // `at`: the byte offset of the line in the file; `after`: the bytes of the
  // buffer from the line's end on (its newline and what follows).
  void Emit(std::string_view line, size_t after, uint64_t at, Batch* out) {
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
      ++after;
    }
    if (line.find_first_not_of(" \t") == std::string_view::npos) return;
    bool indexed = false;
    size_t root = 0;
    if (!(keep_fields_ ? IsJsonIndexed(line, after, &indexed, &root, &members_)
                       : IsJson(line, after))) {
      const std::string where = current_ + " at byte " + std::to_string(at);
      if (Refuse(line, read_ms_, "not JSON: " + where)) {
        stats_->RecordError(where + ": a line that is not JSON, sent to the dead letters");
      } else {
        stats_->RecordError(where + ": skipped a line that is not JSON");
      }
      return;
    }
    Message& m = out->messages.emplace_back(std::string(line), read_ms_);
    m.MarkJson();
    if (indexed) KeepMembers(out, &m, root, members_);  // for the transforms
  }

  const std::string pattern_;
  const bool follow_;
  const size_t batch_size_;
  const int64_t poll_ms_;
  const Clock* clock_;
  ComponentStats* stats_;
  const bool keep_fields_;  // hand over where each line's fields are

  int fd_ = -1;
  FileId id_;  // of the open file
  std::optional<FileId> reopen_id_;  // the checkpointed file's identity, until reopened
  std::optional<FileId> done_id_;    // last_done_'s identity
  std::string current_;    // the open file
  std::string last_done_;  // the last file read to its end
  std::string reopen_;     // a file to open next (truncated, or restored)
  uint64_t reopen_offset_ = 0;  // where to start in reopen_
  bool done_with_all_ = false;
  uint64_t offset_ = 0;    // bytes of current_ handed over (whole lines)
  uint64_t read_pos_ = 0;  // bytes of current_ read into buf_
  std::string buf_;
  int64_t read_ms_ = 0;  // when the Read under way began
  std::vector<jtext::Member> members_;  // of the line being checked
};

}  // namespace

ComponentDef FileInputDef() {
  ComponentDef d;
  d.kind = "input";
  d.type = "file";
  d.help = "Reads NDJSON (one JSON value per line) from a file or every file matching a glob, "
           "in name order. Lines that are not JSON are skipped and counted as errors.";
  d.checkpoint = "the file being read and the byte offset of the next line";
  d.bad_input =
      "a line that is not JSON goes to the pipeline's dead letters (`dead_letter`), or without them is skipped, and is counted on the card (with its byte offset); a line over 16 MiB is skipped and counted; no file matching `path` without `follow` fails the input at start; a read error is retried with backoff; a followed file that shrinks or is replaced is read again from the start";
  d.props = {
      PropDef{"path", PropType::kString, true, "", "a file or a glob such as data/*.ndjson"}.NonEmpty(),
      {"follow", PropType::kBool, false, "false",
       "keep reading: tail the last file and pick up new matching files"},
      PropDef{"batch_size", PropType::kInt, false, "1000", "most messages per batch", PropRole::kTuning}.Range(1, 100000),
      PropDef{"poll_ms", PropType::kInt, false, "200", "how often a followed file is checked for growth",
       PropRole::kTuning}.Range(1, 60000).Unit("ms"),
  };
  d.make_input = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Input> {
    if (o.failed()) return nullptr;
    return std::make_unique<FileInput>(o.String("path"), o.Bool("follow"), o.Int("batch_size"),
                                       o.Int("poll_ms"), ctx);
  };
  return d;
}

}  // namespace kayak
