// `kayak state DIR ...`: a state directory, offline (state_cmd.cc).
#pragma once

#include <string>
#include <vector>

namespace kayak {

// The command's arguments after "state"; its exit code.
int StateCommand(const std::vector<std::string>& args);

}  // namespace kayak
