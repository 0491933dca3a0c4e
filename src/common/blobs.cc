#include "common/blobs.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "common/format.h"
#include "common/io.h"

namespace kayak {
namespace {

namespace fs = std::filesystem;

// A temporary file older than this was left by a writer that died: one
// being written lives for milliseconds.
constexpr std::chrono::seconds kStaleTemp{60};
constexpr std::string_view kTempMark = ".tmp-";

class DirBlobs final : public Blobs {
 public:
  explicit DirBlobs(std::string root) : root_(std::move(root)) {}

  std::string Where(const std::string& path) const override { return Full(path); }

  Status List(const std::string& dir, std::vector<std::string>* names) const override {
    names->clear();
    const std::string at = Full(dir);
    std::error_code ec;
    fs::directory_iterator it(at, ec);
    if (ec == std::errc::no_such_file_or_directory) return Status::Ok();
    if (ec) return Status::Io("listing " + at + ": " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) return Status::Io("listing " + at + ": " + ec.message());
      std::string name = it->path().filename().string();
      if (name.find(kTempMark) == std::string::npos) names->push_back(std::move(name));
    }
    return Status::Ok();
  }

  Result<std::string> Read(const std::string& path) const override {
    const std::string at = Full(path);
    auto file = checkpoint::ReadWholeFile(at);
    if (!file.ok()) {
      std::error_code ec;
      if (!fs::exists(at, ec) && !ec) return Status::NotFound(at + " does not exist");
    }
    return file;
  }

  Result<int64_t> Size(const std::string& path) const override {
    std::error_code ec;
    const auto size = fs::file_size(Full(path), ec);
    if (ec) return int64_t{-1};
    return static_cast<int64_t>(size);
  }

  Status Write(const std::string& path, std::string_view head, std::string_view body,
               bool durable) override {
    const std::string at = Full(path);
    const std::string dir = fs::path(at).parent_path().string();
    KAYAK_RETURN_IF_ERROR(CreateDirsDurably(dir));
    const std::string tmp = TempFor(at);
    Status st = durable ? checkpoint::WriteFileSynced(tmp, head, body) : WritePlain(tmp, head, body);
    if (st.ok() && ::rename(tmp.c_str(), at.c_str()) != 0) {
      st = Status::FromErrno("rename " + tmp + " to " + at, errno);
    }
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
    return durable ? SyncDir(dir) : Status::Ok();
  }

  Result<bool> WriteNew(const std::string& path, std::string_view bytes) override {
    const std::string at = Full(path);
    const std::string dir = fs::path(at).parent_path().string();
    KAYAK_RETURN_IF_ERROR(CreateDirsDurably(dir));
    const std::string tmp = TempFor(at);
    KAYAK_RETURN_IF_ERROR(checkpoint::WriteFileSynced(tmp, bytes));
    // link(2) never replaces a name, on local and network file systems alike.
    const int err = ::link(tmp.c_str(), at.c_str()) == 0 ? 0 : errno;
    ::unlink(tmp.c_str());
    if (err == EEXIST) return false;
    if (err != 0) return Status::FromErrno("placing " + at, err);
    KAYAK_RETURN_IF_ERROR(SyncDir(dir));
    return true;
  }

  Status Remove(const std::string& path) override {
    const std::string at = Full(path);
    if (::unlink(at.c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno("removing " + at, errno);
    }
    return Status::Ok();
  }

  void Tidy(const std::string& dir) override {
    std::error_code ec;
    for (fs::directory_iterator it(Full(dir), ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().find(kTempMark) == std::string::npos) continue;
      std::error_code age_ec;
      const auto written = fs::last_write_time(it->path(), age_ec);
      if (!age_ec && fs::file_time_type::clock::now() - written > kStaleTemp) {
        ::unlink(it->path().c_str());
      }
    }
  }

 private:
  std::string Full(const std::string& path) const {
    return path.empty() ? root_ : root_ + "/" + path;
  }

  // A name of this writer's alone beside `at`: another server may write
  // the same object at this moment.
  static std::string TempFor(const std::string& at) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return at + std::string(kTempMark) + std::to_string(::getpid()) + "-" +
           std::to_string(rng());
  }

  static Status WritePlain(const std::string& path, std::string_view head,
                           std::string_view body) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return Status::FromErrno("open " + path, errno);
    const bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
                    std::fwrite(body.data(), 1, body.size(), f) == body.size();
    const int err = errno;
    if (std::fclose(f) != 0 || !ok) return Status::FromErrno("write " + path, ok ? errno : err);
    return Status::Ok();
  }

  const std::string root_;
};

}  // namespace

std::shared_ptr<Blobs> DirectoryBlobs(std::string root) {
  return std::make_shared<DirBlobs>(std::move(root));
}

}  // namespace kayak
