// The parts of the component SDK (include/kayak/component.h) that are code:
// the card every component reports on.
#include "kayak/component.h"

#include "common/clock.h"
#include "common/redact.h"

namespace kayak {

const char* PropTypeName(PropType t) {
  switch (t) {
    case PropType::kString: return "string";
    case PropType::kInt: return "integer";
    case PropType::kNumber: return "number";
    case PropType::kBool: return "bool";
    case PropType::kStringList: return "list of strings";
    case PropType::kStringMap: return "map of strings";
    case PropType::kExpr: return "expression";
    case PropType::kAny: return "any";
  }
  return "?";
}

namespace {

std::string NumberText(double x) {
  if (x == static_cast<double>(static_cast<int64_t>(x))) {
    return std::to_string(static_cast<int64_t>(x));
  }
  std::string s = std::to_string(x);
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

}  // namespace

std::string PropDef::RulesText() const {
  if (!choices.empty()) {
    std::string s = "one of: ";
    for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : "") + choices[i];
    return s;
  }
  if (min && max) return "between " + NumberText(*min) + " and " + NumberText(*max);
  if (min) return (min_open ? "> " : ">= ") + NumberText(*min);
  if (max) return "<= " + NumberText(*max);
  if (non_empty) return "not empty";
  return "";
}

const char* ComponentStateName(ComponentState s) {
  switch (s) {
    case ComponentState::kStarting: return "starting";
    case ComponentState::kRunning: return "running";
    case ComponentState::kRetrying: return "retrying";
    case ComponentState::kFailed: return "failed";
    case ComponentState::kStopped: return "stopped";
    case ComponentState::kFinished: return "finished";
  }
  return "unknown";
}

void ComponentStats::SetState(ComponentState s) {
  if (state_.exchange(static_cast<int>(s)) != static_cast<int>(s)) {
    state_since_ms_.store(SystemClock::Get()->NowMs(), std::memory_order_relaxed);
  }
}

void ComponentStats::RecordError(const std::string& message, uint64_t count) {
  errors_.fetch_add(count, std::memory_order_relaxed);
  const int64_t now = SystemClock::Get()->NowMs();
  std::string text = Redact(message);  // shown by /ready, the overview and cards
  MutexLock lock(mu_);
  last_error_ = std::move(text);
  last_error_ms_ = now;
}

std::string ComponentStats::last_error() const {
  MutexLock lock(mu_);
  return last_error_;
}

int64_t ComponentStats::last_error_ms() const {
  MutexLock lock(mu_);
  return last_error_ms_;
}

void ComponentStats::SetPosition(std::string position) {
  MutexLock lock(mu_);
  position_ = std::move(position);
}

std::string ComponentStats::position() const {
  MutexLock lock(mu_);
  return position_;
}

}  // namespace kayak
