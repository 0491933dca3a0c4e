#include "common/io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

namespace kayak {

Status WriteAll(int fd, const char* data, size_t n, const std::string& what) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write " + what, errno);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open directory " + dir, errno);
  Status st;
  if (::fsync(fd) != 0) st = Status::FromErrno("fsync directory " + dir, errno);
  ::close(fd);
  return st;
}

Status CreateDirsDurably(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> created;
  for (fs::path p = fs::path(dir).lexically_normal(); !p.empty() && !fs::exists(p, ec);
       p = p.parent_path()) {
    created.push_back(p);
    if (p == p.parent_path()) break;
  }
  fs::create_directories(dir, ec);
  if (ec) return Status::Io("cannot create directory " + dir + ": " + ec.message());
  for (const auto& p : created) {
    const fs::path parent = p.parent_path();
    if (Status st = SyncDir(parent.empty() ? "." : parent.string()); !st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace kayak
