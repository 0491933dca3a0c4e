// Every default of the server config and the engine, in one table: the
// server config (SPEC section 1, docs/configuration.md) starts from these,
// and an engine built without a server config (tests, `kayak check`) gets
// the same values.
#pragma once

#include <cstdint>

namespace kayak::defaults {

// listen
inline constexpr const char* kListenHost = "127.0.0.1";
inline constexpr uint16_t kListenPort = 7070;
inline constexpr const char* kLogLevel = "info";
// checkpoint
inline constexpr int64_t kCheckpointIntervalSecs = 10;
inline constexpr int64_t kCheckpointTimeoutSecs = 60;
inline constexpr int64_t kStopTimeoutSecs = 30;  // a graceful stop's wait for its savepoint
// limits of the listener
inline constexpr int64_t kMaxBodyBytes = 10 * 1024 * 1024;
inline constexpr int64_t kMaxHeaderBytes = 16 * 1024;
inline constexpr int64_t kReadTimeoutSecs = 30;
inline constexpr int64_t kIdleTimeoutSecs = 60;
inline constexpr int64_t kMaxConnections = 512;
inline constexpr int64_t kHeaderTimeoutSecs = 10;
inline constexpr int64_t kMaxConnectionsPerClient = 256;
inline constexpr int64_t kMaxBodyBytesInFlight = 256ll * 1024 * 1024;
// queues of the engine, in batches
inline constexpr int64_t kEdgeQueueBatches = 8;    // per edge lane
inline constexpr int64_t kOutputQueueBatches = 8;  // in front of each output

}  // namespace kayak::defaults
