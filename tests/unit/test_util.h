// Helpers for unit tests: build one component from a YAML snippet.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "components.h"
#include "config/loader.h"
#include "state/bucket.h"

namespace kayak::testing {

// Builds the transform described by `yaml` ("filter: 'x > 1'"). On a config
// error returns nullptr and, if given, fills `errors`.
// With `partitions`, as in a pipeline of a cluster that reads them.
std::unique_ptr<Transform> MakeTransform(const std::string& yaml, const Clock* clock,
                                         BucketRegistry* buckets = nullptr,
                                         std::string* errors = nullptr,
                                         PartitionOwner* partitions = nullptr);

// A batch of messages from JSON texts, stamped with `ts_ms`.
Batch MakeBatch(const std::vector<std::string>& payloads, int64_t ts_ms = 0);

// Payloads of a batch (sealed first).
std::vector<std::string> Payloads(Batch& b);

// Parsed payload of a message.
Json FieldsOf(Message& m);

// Whether this kernel lets this process use io_uring: 0 in
// kernel.io_uring_disabled lets everyone, 1 only privileged processes (root
// here; or members of io_uring_group, not looked at), 2 no one.
bool KernelAllowsIoUring();

// A loopback port free for a socket of `socktype` (SOCK_STREAM, SOCK_DGRAM)
// at the time of the call.
int FreeLoopbackPort(int socktype);

}  // namespace kayak::testing
