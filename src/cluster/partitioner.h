// Where a Kafka producer's partitioner puts a key.
//
// A cluster shard is (region, input partition), and a bucket's entries move
// with their partition, so kayak must know which partition a key belongs to
// exactly as the producers decided it. Two hashes are in use:
//   - murmur2: Kafka's Java client (DefaultPartitioner, BuiltInPartitioner),
//     Kafka Streams, and librdkafka's `murmur2` and `murmur2_random`: the
//     hash made positive by masking the sign bit, modulo the partition count;
//   - crc32: librdkafka's default `consistent_random` (and `consistent`):
//     the CRC-32 (IEEE, zlib's) of the key modulo the partition count. kcat,
//     kayak's own kafka output and most C, Go, Python and Node clients that
//     wrap librdkafka partition so unless told otherwise.
#pragma once

#include <cstdint>
#include <string_view>

namespace kayak::cluster {

// Kafka's murmur2 (seed 0x9747b28c) of `key`, as the Java client's
// Utils.murmur2 returns it: a signed 32-bit value.
int32_t KafkaMurmur2(std::string_view key);

// The partition, of `partitions` (> 0), that Kafka's default partitioner
// gives a record whose key is `key` (non-empty: records without a key are
// spread, not hashed).
int32_t KafkaPartitionOf(std::string_view key, int32_t partitions);

enum class Partitioner { kMurmur2, kCrc32 };

// The partition, of `partitions` (> 0), that `partitioner` gives `key`.
int32_t PartitionOf(Partitioner partitioner, std::string_view key, int32_t partitions);

// "murmur2" or "crc32" (the names a cluster's config uses); false for any
// other.
bool ParsePartitioner(std::string_view name, Partitioner* out);

// librdkafka's name of the producer partitioner that hashes as `partitioner`
// does: "murmur2_random" or "consistent_random".
const char* ProducerPartitioner(Partitioner partitioner);

}  // namespace kayak::cluster
