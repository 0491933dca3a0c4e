// Small file helpers shared by inputs and outputs.
#pragma once

#include <cstddef>
#include <string>

#include "kayak/status.h"

namespace kayak {

// Writes all `n` bytes to `fd`, retrying short writes and EINTR. `what`
// names the destination in the error.
Status WriteAll(int fd, const char* data, size_t n, const std::string& what);

// fsyncs the directory `dir`, so that entries created, renamed or removed
// in it survive a power loss.
Status SyncDir(const std::string& dir);

// Creates `dir` and its missing parents, fsyncing the parent of each one
// created, so the directory survives a power loss with what is put in it.
Status CreateDirsDurably(const std::string& dir);

}  // namespace kayak
