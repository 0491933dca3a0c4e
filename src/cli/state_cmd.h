// `kayak state DIR [ls|verify] [--json] [--force-read]` (state_cmd.cc).
#pragma once

#include <string>
#include <vector>

namespace kayak {

// The command's arguments after "state"; its exit code.
int StateCommand(const std::vector<std::string>& args);

}  // namespace kayak
