// Testing aid (docs/testing.md): with KAYAK_CRASH_POINT=<step>[:<n>] in the
// environment, the n-th time (default: the first) the process reaches
// CrashPoint("<step>") it kills itself with SIGKILL. Without the variable a
// call costs one comparison.
#pragma once

namespace kayak {

void CrashPoint(const char* step);

}  // namespace kayak
