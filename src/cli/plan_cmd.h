// `kayak plan NEW.yaml --state-dir DIR`: a change planned offline
// (plan_cmd.cc).
#pragma once

#include <string>
#include <vector>

namespace kayak {

// The command's arguments after "plan"; its exit code.
int PlanCommand(const std::vector<std::string>& args);

}  // namespace kayak
