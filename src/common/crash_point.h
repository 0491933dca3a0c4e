// Testing aid (docs/testing.md): with KAYAK_CRASH_POINT=<step>[:<n>] in the
// environment, the n-th time (default: the first) the process reaches
// CrashPoint("<step>") it kills itself with SIGKILL. With
// KAYAK_STOP_POINT=<step>[:<n>] it stops itself there instead (SIGSTOP),
// once, until a SIGCONT: a process paused at the worst moment. Without the
// variables a call costs two comparisons.
#pragma once

#include <string_view>

namespace kayak {

void CrashPoint(const char* step);

// Testing aid: with KAYAK_CRASH_ON_PAYLOAD=<text>, a message whose payload
// holds <text> kills the process (SIGKILL) as it enters a transform: the
// poison message of the crash guard's tests (engine/crash_guard.h). The
// variable is read once; without it a call costs one comparison.
const char* CrashOnPayloadText();
void CrashOnPayload(std::string_view payload, const char* text);

// Testing aid: true when KAYAK_MUTATION names `rule`, a promise the process
// then breaks on purpose, so that the suite can show the conformance kit
// fails without it (tests/connectors/mutation_check.py). Rules:
//   ack_on_read  inputs are told their position is committed as soon as
//                they read, before any checkpoint holds it
// The variable is read once; without it a call costs one comparison.
bool Mutation(const char* rule);

}  // namespace kayak
