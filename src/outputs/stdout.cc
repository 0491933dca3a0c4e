// stdout: each message as one line on standard output.
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "components.h"

namespace kayak {

namespace {

class StdoutOutput final : public Output {
 public:
  Status Write(const Batch& batch) override {
    buf_.clear();
    for (const auto& m : batch.messages) {
      buf_ += m.payload();
      buf_ += '\n';
    }
    // Several outputs may share stdout; a batch's lines stay together.
    static std::mutex stdout_mu;
    std::lock_guard lock(stdout_mu);
    const char* p = buf_.data();
    size_t n = buf_.size();
    while (n > 0) {
      const ssize_t w = ::write(STDOUT_FILENO, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno("write to stdout", errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }

 private:
  std::string buf_;  // reused for every batch
};

}  // namespace

ComponentDef StdoutOutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "stdout";
  d.help = "Writes each message's payload as one line on standard output.";
  d.checkpoint = "nothing";
  d.make_output = [](const Options&, const ComponentContext&) -> std::unique_ptr<Output> {
    return std::make_unique<StdoutOutput>();
  };
  return d;
}

}  // namespace kayak
