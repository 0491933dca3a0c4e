// Keeping a message's index of members in its batch (Batch::KeepFields) from
// the members jtext or the input's JSON check found.
#pragma once

#include <cstdint>
#include <vector>

#include "common/json_text.h"
#include "kayak/message.h"

namespace kayak {

// `m` (a message of `batch`) is an object at byte `root` with `members`.
inline void KeepMembers(Batch* batch, Message* m, size_t root,
                        const std::vector<jtext::Member>& members) {
  FieldSpan* f = batch->KeepFields(m, root, members.size());
  if (f == nullptr) return;
  for (const jtext::Member& k : members) {
    *f++ = FieldSpan{static_cast<uint32_t>(k.key.begin), static_cast<uint32_t>(k.key.end),
                     static_cast<uint32_t>(k.value.begin), static_cast<uint32_t>(k.value.end)};
  }
}

}  // namespace kayak
