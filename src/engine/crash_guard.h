// What a pipeline's transforms were doing when the process died, so that a
// message that kills the process (a crash in a library, an abort, the kernel's
// OOM killer) does not kill it again on every restart.
//
// The pipeline thread marks, in one page of a file mapped into memory, what
// enters its transforms: a batch (its size), or while it is careful one
// message (its hash). The mark costs two stores and a checksum; the page
// outlives the process, so the next start reads what was in the transforms
// when it died. A death with a batch in them makes the next start careful
// where the batch was: the replay (in the order it brings messages again)
// passes the messages before it as usual, then takes the batch's messages,
// with one batch's worth either side, one at a time. A death with
// one message in them names that message; when the same message was alone
// in the transforms at kDeathsToSetAside deaths in a row (three deaths in
// all, counting the batch one), the next start sets it aside instead of
// processing it. File format: docs/state_format.md ("Crash marks").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kayak/status.h"

namespace kayak {

class CrashGuard {
 public:
  // Deaths with the same message alone in the transforms before it is set
  // aside.
  static constexpr uint32_t kDeathsToSetAside = 2;

  CrashGuard() = default;
  ~CrashGuard();
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;

  // What the file said of the last process.
  struct LastRun {
    bool died = false;          // it died with messages in the transforms
    bool alone = false;         // ...one message, careful (else a batch)
    uint32_t stage = 0;         // the transform it was in
    uint32_t batch = 0;         // the batch's size
    uint64_t hash = 0;          // the message's hash (alone)
    uint32_t deaths = 0;        // deaths in a row with that message alone
    uint64_t skip = 0;          // messages this start passes as usual first
    uint64_t careful_for = 0;   // messages it then goes through one at a time
    bool damaged = false;       // the page did not check (read as a clean stop)
  };
  // Opens (or creates) the mark file at `path` and reads it. An error leaves
  // the guard off (every call a no-op).
  Status Open(const std::string& path, LastRun* last);
  bool on() const { return page_ != nullptr; }

  // Whether messages go through one at a time (after a death, once the
  // messages before the careful ones have passed).
  bool careful() const { return careful_left_ > 0 && skip_left_ == 0; }
  // Messages still to pass as usual before the careful ones.
  uint64_t to_skip() const { return skip_left_; }
  void Skipped(uint64_t n);
  // True when `hash` is the message that died alone kDeathsToSetAside times:
  // it is not to be processed. Forgets it (a message with the same bytes
  // later is processed).
  bool SetAside(uint64_t hash);

  // A batch of `n` enters the transforms at transform `stage`; `before` is
  // how many messages a restart now would bring again before it (where the
  // next start is careful, should this one die).
  void EnterBatch(uint32_t n, uint32_t stage, uint64_t before);
  // One message (careful) enters the transforms.
  void EnterOne(uint64_t hash, uint32_t stage, uint64_t before);
  // The transform now working on what entered.
  void AtStage(uint32_t stage);
  // What entered has left the transforms (whatever they made of it). After
  // a careful message, counts it towards the careful span.
  void Left();

  static uint64_t Hash(std::string_view bytes);

 private:
  struct Page;
  void Seal();

  Page* page_ = nullptr;
  uint64_t careful_left_ = 0;
  uint64_t skip_left_ = 0;
  bool one_in_ = false;  // the message inside is a careful one
};

}  // namespace kayak
