// stdout: each message as one line on standard output.
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "common/io.h"
#include "kayak/component.h"

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
    return WriteAll(STDOUT_FILENO, buf_.data(), buf_.size(), "stdout");
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
  d.bad_input =
      "a failed write (a closed pipe) is retried by `retry` and, without a state dir, then dropped and counted";
  d.make_output = [](const Options&, const ComponentContext&) -> std::unique_ptr<Output> {
    return std::make_unique<StdoutOutput>();
  };
  return d;
}

}  // namespace kayak
