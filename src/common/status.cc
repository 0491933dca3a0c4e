#include "kayak/status.h"

#include <cstdio>
#include <cstring>

namespace kayak {

Status Status::FromErrno(const std::string& what, int err) {
  return Status(Code::kIoError, what + ": " + std::strerror(err));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return message_;
}

void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "kayak: check failed at %s:%d: %s\n", file, line, cond);
  std::abort();
}

}  // namespace kayak
