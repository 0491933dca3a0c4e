#include "common/format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/io.h"

namespace kayak::checkpoint {

namespace {

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = MakeTable();

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
const char* KindTag(FileKind k) {
  switch (k) {
    case FileKind::kChunk:
      return "CHNK";
    case FileKind::kManifest:
      return "MNFT";
    case FileKind::kGraph:
      return "GRPH";
    case FileKind::kKey:
      return "FKEY";
    case FileKind::kShardManifest:
      return "SHRD";
  }
  return "????";
}

}  // namespace

namespace {

uint32_t Crc32cTable(const uint8_t* p, size_t n, uint32_t crc) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// SSE 4.2's crc32 instruction computes the same polynomial 8 bytes at a time.
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const uint8_t* p, size_t n,
                                                        uint32_t crc) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (kHaveSse42) return ~Crc32cSse42(p, n, ~crc);
#endif
  return ~Crc32cTable(p, n, ~crc);
}

std::string FrameHeader(FileKind kind, uint64_t bytes, uint32_t crc, uint32_t version) {
  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), "KYAK", 4);
  std::memcpy(out.data() + 4, KindTag(kind), 4);
  PutU32(out.data() + 8, version);
  PutU64(out.data() + 12, bytes);
  PutU32(out.data() + 20, crc);
  PutU32(out.data() + 28, Crc32c(out.data(), 28));
  return out;
}

std::string Frame(FileKind kind, std::string_view payload, uint32_t version) {
  std::string out =
      FrameHeader(kind, payload.size(), Crc32c(payload.data(), payload.size()), version);
  out.append(payload);
  return out;
}

Result<std::string_view> Unframe(FileKind kind, std::string_view file, uint32_t* version_out,
                                 uint32_t* crc_out) {
  if (file.size() < kHeaderBytes) return Status::Corruption("shorter than its header");
  if (std::memcmp(file.data(), "KYAK", 4) != 0) return Status::Corruption("bad magic");
  if (GetU32(file.data() + 28) != Crc32c(file.data(), 28)) {
    return Status::Corruption("header checksum mismatch");
  }
  if (std::memcmp(file.data() + 4, KindTag(kind), 4) != 0) {
    return Status::Corruption("wrong kind of file");
  }
  const uint32_t version = GetU32(file.data() + 8);
  const uint32_t newest = kind == FileKind::kManifest ? kManifestWithDeltasVersion : kFormatVersion;
  if (version < kFormatVersion || version > newest) {
    return Status::Corruption("format version " + std::to_string(version) + " is not supported");
  }
  const uint64_t len = GetU64(file.data() + 12);
  if (file.size() - kHeaderBytes != len) return Status::Corruption("truncated or padded payload");
  std::string_view payload = file.substr(kHeaderBytes);
  if (GetU32(file.data() + 20) != Crc32c(payload.data(), payload.size())) {
    return Status::Corruption("payload checksum mismatch");
  }
  if (version_out != nullptr) *version_out = version;
  if (crc_out != nullptr) *crc_out = GetU32(file.data() + 20);
  return payload;
}

Status WriteFileSynced(const std::string& path, std::string_view bytes) {
  return WriteFileSynced(path, bytes, {});
}

Status WriteFileSynced(const std::string& path, std::string_view head, std::string_view body) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::FromErrno("open " + path, errno);
  Status st = WriteAll(fd, head.data(), head.size(), path);
  if (st.ok()) st = WriteAll(fd, body.data(), body.size(), path);
  if (st.ok() && ::fsync(fd) != 0) st = Status::FromErrno("fsync " + path, errno);
  if (::close(fd) != 0 && st.ok()) st = Status::FromErrno("close " + path, errno);
  return st;
}

Status RenameSynced(const std::string& from, const std::string& to, const std::string& dir) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Status::FromErrno("rename " + from + " to " + to, errno);
  }
  return SyncDir(dir);
}

Result<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::FromErrno("open " + path, errno);
  // Sized once from fstat and read in place (a chunk of a big bucket is
  // hundreds of MB: no growth by doubling); what a growing file has past
  // that size is appended as it comes.
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.resize(static_cast<size_t>(st.st_size));
  size_t have = 0;
  char buf[1 << 16];
  while (true) {
    const bool in_place = have < out.size();
    const ssize_t n = in_place ? ::read(fd, out.data() + have, out.size() - have)
                               : ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::FromErrno("read " + path, err);
    }
    if (n == 0) break;
    if (!in_place) {
      out.resize(have);
      out.append(buf, static_cast<size_t>(n));
    }
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(have);
  return out;
}

void Encoder::PatchU64(size_t at, uint64_t v) { PutU64(out_.data() + at, v); }

}  // namespace kayak::checkpoint
