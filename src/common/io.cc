#include "common/io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

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

}  // namespace kayak
