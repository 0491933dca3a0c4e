// `kayak crashtest CONFIG --input PIPELINE=FILE...`: the user's graph on
// their recorded input, with and without kill -9s, compared
// (crashtest_cmd.cc).
#pragma once

#include <string>
#include <vector>

namespace kayak {

// The command's arguments after "crashtest"; its exit code.
int CrashtestCommand(const std::vector<std::string>& args);

}  // namespace kayak
