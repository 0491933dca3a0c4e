#include "engine/crash_guard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "common/format.h"

namespace kayak {

namespace {

constexpr uint32_t kMagic = 0x4b434d31;  // "KCM1"
constexpr uint16_t kVersion = 1;
constexpr size_t kPageBytes = 4096;

enum : uint16_t { kIdle = 0, kBatchIn = 1, kOneIn = 2 };

}  // namespace

// The page's layout (little-endian, as the machine writes it; the file is
// never read on another machine).
struct CrashGuard::Page {
  uint32_t magic;
  uint16_t version;
  uint16_t state;        // kIdle, kBatchIn, kOneIn
  uint32_t stage;        // the transform working on what is in
  uint32_t batch;        // kBatchIn: how many messages
  uint64_t hash;         // kOneIn: the message's hash
  uint64_t before;       // messages a restart would bring again before it
  uint64_t suspect;      // the message that died alone last
  uint32_t deaths;       // deaths in a row with `suspect` alone
  uint32_t reserved;
  uint64_t careful_left;  // this start's careful span still to go
  uint64_t skip_left;     // ...and the messages to pass as usual before it
  uint32_t crc;           // CRC-32C of the bytes before it
};

CrashGuard::~CrashGuard() {
  static_assert(sizeof(Page) <= kPageBytes);
  if (page_ != nullptr) ::munmap(page_, kPageBytes);
}

uint64_t CrashGuard::Hash(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void CrashGuard::Seal() {
  page_->crc = checkpoint::Crc32c(page_, offsetof(Page, crc));
}

Status CrashGuard::Open(const std::string& path, LastRun* last) {
  *last = LastRun{};
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Io(path + ": " + std::strerror(errno));
  // The page is allocated now, not at the first store into it: on a full
  // disk a store into a hole of a mapped file is a SIGBUS.
  if (int e = ::posix_fallocate(fd, 0, kPageBytes); e != 0) {
    ::close(fd);
    return Status::Io(path + ": " + std::strerror(e));
  }
  void* p = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return Status::Io(path + ": mmap: " + std::strerror(errno));
  page_ = static_cast<Page*>(p);

  Page was{};
  std::memcpy(&was, page_, sizeof(Page));
  const bool blank = was.magic == 0 && was.crc == 0;
  const bool valid = was.magic == kMagic && was.version == kVersion &&
                     was.crc == checkpoint::Crc32c(&was, offsetof(Page, crc));
  uint64_t suspect = 0;
  uint32_t deaths = 0;
  if (valid) {
    suspect = was.suspect;
    deaths = was.deaths;
    if (was.state == kBatchIn) {
      last->died = true;
      last->batch = was.batch;
    } else if (was.state == kOneIn) {
      last->died = true;
      last->alone = true;
      last->hash = was.hash;
      deaths = was.hash == suspect ? deaths + 1 : 1;
      suspect = was.hash;
    } else if (was.careful_left == 0) {
      // A clean stop after the careful span: nothing is suspected.
      suspect = 0;
      deaths = 0;
    }
    last->stage = was.stage;
    if (last->died) {
      // One batch's worth either side of where it died: a replay cut into
      // other batches, or a committed position newer than the one counted.
      const uint64_t n = std::max<uint64_t>(was.batch, 1);
      skip_left_ = was.before > n ? was.before - n : 0;
      careful_left_ = was.before - skip_left_ + 2 * n;
    } else {
      careful_left_ = was.careful_left;  // a clean stop inside the span: the rest of it
      skip_left_ = was.skip_left;
    }
  } else {
    last->damaged = !blank;
  }
  last->deaths = deaths;
  last->skip = skip_left_;
  last->careful_for = careful_left_;
  if (careful_left_ == 0) {
    skip_left_ = 0;
    suspect = 0;
    deaths = 0;
  }
  std::memset(page_, 0, sizeof(Page));
  page_->magic = kMagic;
  page_->version = kVersion;
  page_->state = kIdle;
  page_->suspect = suspect;
  page_->deaths = deaths;
  page_->careful_left = careful_left_;
  page_->skip_left = skip_left_;
  Seal();
  return Status::Ok();
}

void CrashGuard::Skipped(uint64_t n) {
  if (page_ == nullptr || skip_left_ == 0) return;
  skip_left_ = n >= skip_left_ ? 0 : skip_left_ - n;
  page_->skip_left = skip_left_;
  Seal();
}

bool CrashGuard::SetAside(uint64_t hash) {
  if (page_ == nullptr || careful_left_ == 0 || page_->suspect != hash ||
      page_->deaths < kDeathsToSetAside) {
    return false;
  }
  page_->suspect = 0;
  page_->deaths = 0;
  Seal();
  return true;
}

void CrashGuard::EnterBatch(uint32_t n, uint32_t stage, uint64_t before) {
  if (page_ == nullptr) return;
  page_->state = kBatchIn;
  page_->stage = stage;
  page_->batch = n;
  page_->before = before;
  Seal();
}

void CrashGuard::EnterOne(uint64_t hash, uint32_t stage, uint64_t before) {
  if (page_ == nullptr) return;
  one_in_ = true;
  page_->state = kOneIn;
  page_->stage = stage;
  page_->batch = 1;
  page_->hash = hash;
  page_->before = before;
  Seal();
}

void CrashGuard::AtStage(uint32_t stage) {
  if (page_ == nullptr || page_->state == kIdle) return;
  page_->stage = stage;
  Seal();
}

void CrashGuard::Left() {
  if (page_ == nullptr) return;
  if (one_in_) {
    one_in_ = false;
    if (careful_left_ > 0 && --careful_left_ == 0) {
      // Through the span without a death: nothing is suspected any more.
      page_->suspect = 0;
      page_->deaths = 0;
    }
    page_->careful_left = careful_left_;
  }
  page_->state = kIdle;
  Seal();
}

}  // namespace kayak
