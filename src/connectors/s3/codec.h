// The s3 output's compression: each part is compressed on its own, as one
// gzip member or one zstd frame, so an object is a valid .gz or .zst file
// (both formats are defined to be concatenations of members/frames) and a
// part uploaded again after a restore is the same bytes. docs/durability.md,
// "s3".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kayak/status.h"

namespace kayak::s3 {

enum class Compression { kNone, kGzip, kZstd };

// Parses "none", "gzip" or "zstd"; false for anything else.
bool ParseCompression(std::string_view name, Compression* out);

// Compresses whole parts. One per output: the library's context is reused,
// so a part costs no allocation beyond its output.
class Compressor {
 public:
  virtual ~Compressor() = default;
  // `raw` compressed as one member/frame into `out` (replaced).
  virtual Status Compress(std::string_view raw, std::string* out) = 0;
};
// nullptr for kNone.
std::unique_ptr<Compressor> MakeCompressor(Compression c);

// Counts the uncompressed bytes of a stream of members/frames fed in chunks
// of any size, without keeping them (the restore reads a completed object's
// size this way); `on_raw`, when given, sees the uncompressed bytes as they
// come out.
class RawCounter {
 public:
  virtual ~RawCounter() = default;
  virtual Status Feed(std::string_view chunk) = 0;
  // The total, once the stream ended on a member/frame boundary.
  virtual Status Finish(uint64_t* raw_bytes) = 0;
};
std::unique_ptr<RawCounter> MakeRawCounter(Compression c,
                                           std::function<void(std::string_view)> on_raw = {});

}  // namespace kayak::s3
