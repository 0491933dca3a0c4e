// Keeping a message's index of members in its batch (Batch::KeepFields) from
// the members an input's JSON check found: any list of members whose `key`
// and `value` have byte offsets `begin` and `end` (jtext::Member does).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kayak/message.h"

namespace kayak {

// `m` (a message of `batch`) is an object at byte `root` with `members`.
template <typename Members>
void KeepMembers(Batch* batch, Message* m, size_t root, const Members& members) {
  FieldSpan* f = batch->KeepFields(m, root, members.size());
  if (f == nullptr) return;
  for (const auto& k : members) {
    *f++ = FieldSpan{static_cast<uint32_t>(k.key.begin), static_cast<uint32_t>(k.key.end),
                     static_cast<uint32_t>(k.value.begin), static_cast<uint32_t>(k.value.end)};
  }
}

}  // namespace kayak
