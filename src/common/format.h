// On-disk framing of every checkpoint file (docs/state_format.md).
//
// A framed file is a 32-byte header followed by the payload:
//
//   offset size field
//   0      4    magic "KYAK"
//   4      4    kind: "CHNK" (a component's state), "MNFT" (a manifest),
//                "GRPH" (the pipelines and versions made through the API),
//                "FKEY" (the key) or "SHRD" (a cluster shard's manifest)
//   8      4    format version, little-endian u32 (1; a manifest naming
//                delta chunks: 2)
//   12     8    payload length in bytes, little-endian u64
//   20     4    CRC-32C of the payload, little-endian u32
//   24     4    reserved, zero
//   28     4    CRC-32C of bytes 0..27, little-endian u32
//   32     ...  payload
//
// A file whose header or payload checksum does not match, or whose length is
// not exactly 32 + payload length, is corrupt.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "kayak/status.h"

namespace kayak::checkpoint {

constexpr uint32_t kFormatVersion = 1;
// A manifest whose units may name delta chunks after their full one: a
// kayak that knows only version 1 refuses it rather than restore a base
// without its deltas.
constexpr uint32_t kManifestWithDeltasVersion = 2;
constexpr size_t kHeaderBytes = 32;

enum class FileKind { kChunk, kManifest, kGraph, kKey, kShardManifest };

// CRC-32C (Castagnoli), as used by iSCSI, ext4 and LevelDB.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The header followed by the payload.
std::string Frame(FileKind kind, std::string_view payload, uint32_t version = kFormatVersion);
// The header alone, for a payload of `bytes` whose CRC-32C is `crc` (a big
// payload is written after it as it is, not copied into a frame).
std::string FrameHeader(FileKind kind, uint64_t bytes, uint32_t crc,
                        uint32_t version = kFormatVersion);
// Checks a whole file's bytes and returns its payload; `*version` (if
// given) gets its format version (a manifest's may be 2, every other 1),
// `*crc` (if given) the payload's CRC-32C, checked.
Result<std::string_view> Unframe(FileKind kind, std::string_view file,
                                 uint32_t* version = nullptr, uint32_t* crc = nullptr);

// Writes `bytes` to `path` (created or truncated, mode 0600) and fsyncs it.
Status WriteFileSynced(const std::string& path, std::string_view bytes);
// The same for `head` followed by `body`.
Status WriteFileSynced(const std::string& path, std::string_view head, std::string_view body);
// Renames `from` over `to` and fsyncs the directory that holds them.
Status RenameSynced(const std::string& from, const std::string& to, const std::string& dir);
Result<std::string> ReadWholeFile(const std::string& path);

// A little-endian binary encoder for component state.
class Encoder {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  // Inline: a chunk of a big bucket or window is millions of these.
  void U64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));  // little-endian
    out_.append(b, 8);
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    U64(bits);
  }
  void Str(std::string_view s) {
    U64(s.size());
    out_.append(s);
  }
  // Overwrites the U64 written at byte `at` (a count known only at the end).
  void PatchU64(size_t at, uint64_t v);
  std::string& out() { return out_; }
  // Hands what was written to `*to`: moved into an empty string (a chunk of
  // hundreds of MB is not copied), appended to one that holds bytes.
  void AppendTo(std::string* to) {
    if (to->empty()) {
      to->swap(out_);
    } else {
      to->append(out_);
    }
    out_.clear();
  }

 private:
  std::string out_;
};

// Reads what Encoder wrote; every read checks bounds, so a short or
// garbled payload is a Corruption status, never a crash.
class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}
  // Inline, like the encoder's: a compaction or restore of a big state
  // reads millions of these.
  bool U8(uint8_t* v) {
    if (pos_ + 1 > in_.size()) return false;
    *v = static_cast<uint8_t>(in_[pos_++]);
    return true;
  }
  bool U64(uint64_t* v) {
    if (in_.size() - pos_ < 8) return false;
    uint64_t le;
    std::memcpy(&le, in_.data() + pos_, 8);
    if constexpr (std::endian::native == std::endian::big) le = __builtin_bswap64(le);
    *v = le;
    pos_ += 8;
    return true;
  }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!U64(&u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool F64(double* v) {
    uint64_t bits;
    if (!U64(&bits)) return false;
    std::memcpy(v, &bits, 8);
    return true;
  }
  bool Str(std::string* s) {
    std::string_view v;
    if (!View(&v)) return false;
    s->assign(v);
    return true;
  }
  // The string in place (valid while the input is).
  bool View(std::string_view* s) {
    uint64_t n;
    if (!U64(&n) || n > in_.size() - pos_) return false;
    *s = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // Passes over `n` bytes.
  bool Skip(uint64_t n) {
    if (n > in_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }
  size_t pos() const { return pos_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace kayak::checkpoint
