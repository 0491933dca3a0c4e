#include "cluster/partitioner.h"

#include <cstring>

#include <zlib.h>

namespace kayak::cluster {

int32_t KafkaMurmur2(std::string_view key) {
  constexpr uint32_t kSeed = 0x9747b28cu;
  constexpr uint32_t kM = 0x5bd1e995u;
  constexpr int kR = 24;
  const auto* data = reinterpret_cast<const unsigned char*>(key.data());
  const size_t length = key.size();
  uint32_t h = kSeed ^ static_cast<uint32_t>(length);
  const size_t whole = length / 4;
  for (size_t i = 0; i < whole; ++i) {
    const size_t at = i * 4;
    // Little-endian, whatever the machine: the Java client reads it so.
    uint32_t k = static_cast<uint32_t>(data[at]) | (static_cast<uint32_t>(data[at + 1]) << 8) |
                 (static_cast<uint32_t>(data[at + 2]) << 16) |
                 (static_cast<uint32_t>(data[at + 3]) << 24);
    k *= kM;
    k ^= k >> kR;
    k *= kM;
    h *= kM;
    h ^= k;
  }
  const size_t tail = whole * 4;
  switch (length % 4) {
    case 3:
      h ^= static_cast<uint32_t>(data[tail + 2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<uint32_t>(data[tail + 1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= static_cast<uint32_t>(data[tail]);
      h *= kM;
      break;
    default:
      break;
  }
  h ^= h >> 13;
  h *= kM;
  h ^= h >> 15;
  int32_t out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

int32_t KafkaPartitionOf(std::string_view key, int32_t partitions) {
  const uint32_t positive = static_cast<uint32_t>(KafkaMurmur2(key)) & 0x7fffffffu;
  return static_cast<int32_t>(positive % static_cast<uint32_t>(partitions));
}

int32_t PartitionOf(Partitioner partitioner, std::string_view key, int32_t partitions) {
  if (partitioner == Partitioner::kMurmur2) return KafkaPartitionOf(key, partitions);
  const uLong crc = ::crc32_z(::crc32_z(0L, Z_NULL, 0),
                              reinterpret_cast<const Bytef*>(key.data()), key.size());
  return static_cast<int32_t>(static_cast<uint32_t>(crc) % static_cast<uint32_t>(partitions));
}

bool ParsePartitioner(std::string_view name, Partitioner* out) {
  if (name == "murmur2") {
    *out = Partitioner::kMurmur2;
  } else if (name == "crc32") {
    *out = Partitioner::kCrc32;
  } else {
    return false;
  }
  return true;
}

const char* ProducerPartitioner(Partitioner partitioner) {
  return partitioner == Partitioner::kMurmur2 ? "murmur2_random" : "consistent_random";
}

}  // namespace kayak::cluster
