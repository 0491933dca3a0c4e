#include "cli/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kayak {

StateDirLock::~StateDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

StateDirLock::Outcome StateDirLock::Acquire(const std::string& dir, long* holder_pid,
                                            std::string* error) {
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) {
    ::chmod(dir.c_str(), 0700);  // state is private to the server
  }
  if (ec) {
    *error = "cannot create state directory " + dir + ": " + ec.message();
    return Outcome::kError;
  }
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "state directory " + dir + " is not a directory";
    return Outcome::kError;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    *error = "state directory " + dir +
             " is writable by group or others; make it private (chmod 700)";
    return Outcome::kError;
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    *error = "state directory " + dir + " is not writable: " + std::strerror(errno);
    return Outcome::kError;
  }
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return Outcome::kError;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      *holder_pid = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
      return Outcome::kHeldByOther;
    }
    *error = "cannot lock " + path + ": " + std::strerror(err);
    return Outcome::kError;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    ::close(fd);
    return Outcome::kError;
  }
  fd_ = fd;
  return Outcome::kLocked;
}

}  // namespace kayak
