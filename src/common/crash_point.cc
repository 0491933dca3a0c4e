#include "common/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kayak {

namespace {

// Whether `want` (<step>[:<n>], or null) names `step`, counting this call in
// `reached`: true on the n-th (default the first) and every later one.
bool Reached(const char* want, const char* step, std::atomic<int>* reached) {
  if (want == nullptr) return false;
  const char* colon = std::strchr(want, ':');
  const size_t len = colon != nullptr ? static_cast<size_t>(colon - want) : std::strlen(want);
  if (len != std::strlen(step) || std::strncmp(want, step, len) != 0) return false;
  const int nth = colon != nullptr ? std::atoi(colon + 1) : 1;
  return ++*reached >= nth;
}

}  // namespace

void CrashPoint(const char* step) {
  static const char* crash = std::getenv("KAYAK_CRASH_POINT");
  static const char* stop = std::getenv("KAYAK_STOP_POINT");
  static std::atomic<int> crashes{0}, stops{0};
  if (crash == nullptr && stop == nullptr) return;
  if (Reached(crash, step, &crashes)) {
    std::fprintf(stderr, "kayak: crash point %s reached\n", step);
    ::kill(::getpid(), SIGKILL);
  }
  static std::atomic<bool> stopped{false};
  if (Reached(stop, step, &stops) && !stopped.exchange(true)) {
    std::fprintf(stderr, "kayak: stop point %s reached\n", step);
    ::kill(::getpid(), SIGSTOP);  // until SIGCONT; once only
  }
}

bool Mutation(const char* rule) {
  static const char* want = std::getenv("KAYAK_MUTATION");
  if (want == nullptr) return false;
  if (std::strcmp(want, rule) != 0) return false;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) std::fprintf(stderr, "kayak: KAYAK_MUTATION=%s: breaking it\n", rule);
  return true;
}

const char* CrashOnPayloadText() {
  static const char* text = std::getenv("KAYAK_CRASH_ON_PAYLOAD");
  return text;
}

void CrashOnPayload(std::string_view payload, const char* text) {
  if (payload.find(text) == std::string_view::npos) return;
  std::fprintf(stderr, "kayak: a message holds KAYAK_CRASH_ON_PAYLOAD's text; dying\n");
  ::kill(::getpid(), SIGKILL);
}

}  // namespace kayak
