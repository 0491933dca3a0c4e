// `kayak state DIR ...`: a state directory, offline (state_cmd.cc).
#pragma once

#include <string>
#include <vector>

namespace kayak {

// The command's arguments after "state"; its exit code.
int StateCommand(const std::vector<std::string>& args);

// Takes the state directory's lock shared, held until exit, so no server
// starts on it while it is read. A running server's directory is refused
// (0 ok; 1 with `error` saying why) unless `force`.
int LockShared(const std::string& dir, bool force, std::string* error);

}  // namespace kayak
