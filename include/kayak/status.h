// Status and Result<T>: the return type of every fallible call in kayak.
// Third-party exceptions are caught at one boundary and turned into a Status.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kayak {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // the user's input is wrong; a retry will not help
  kNotFound,
  kIoError,          // the environment failed; a retry may help
  kCorruption,       // a file's checksum or framing is wrong
  kUnavailable,      // a peer or resource is temporarily away; retry
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Invalid(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Io(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
  // An I/O error carrying errno's text: "what: strerror(err)".
  static Status FromErrno(const std::string& what, int err);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // True when trying again later may succeed.
  bool retryable() const { return code_ == Code::kIoError || code_ == Code::kUnavailable; }
  std::string ToString() const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) std::abort();  // a Result error must not be OK
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kayak

#define KAYAK_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::kayak::Status _st = (expr);              \
    if (!_st.ok()) return _st;                 \
  } while (0)

// Invariants crash loudly; corrupt input is never an invariant.
#define KAYAK_CHECK(cond)                                                        \
  do {                                                                           \
    if (!(cond)) ::kayak::CheckFailed(__FILE__, __LINE__, #cond);                \
  } while (0)

namespace kayak {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}
