#include "checkpoint/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/format.h"
#include "common/crash_point.h"
#include "common/io.h"
#include "common/json_util.h"
#include "common/log.h"

namespace kayak::checkpoint {

namespace {

constexpr size_t kManifestsKept = 2;
constexpr size_t kKeyBytes = 32;
constexpr const char* kSealedPrefix = "k1:";  // the newest and the one to fall back to

// The directory's entries; an error when it cannot be listed (callers that
// only tidy up ignore it).
Status ListDir(const std::string& dir, std::vector<std::string>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno("list " + dir, errno);
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out->push_back(name);
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return Status::FromErrno("list " + dir, err);
  return Status::Ok();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  (void)ListDir(dir, &out);
  return out;
}

// "MANIFEST-<region>-<id 20 digits>.kym" -> region, id.
bool ParseManifestName(const std::string& name, std::string* region, uint64_t* id) {
  const std::string prefix = "MANIFEST-", suffix = ".kym";
  if (name.size() < prefix.size() + suffix.size() + 22 || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string core = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t dash = core.rfind('-');
  if (dash == std::string::npos || core.size() - dash - 1 != 20) return false;
  *region = core.substr(0, dash);
  char* end = nullptr;
  *id = std::strtoull(core.c_str() + dash + 1, &end, 10);
  return *end == '\0';
}

// The bytes of a unit's full chunk and its deltas.
uint64_t ChainBytes(const auto& r) {
  uint64_t n = r.full.bytes;
  for (const auto& d : r.deltas) n += d.bytes;
  return n;
}

}  // namespace

std::string ChunkName(uint64_t id, const std::string& unit) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRIu64, id);
  return "chunk-" + std::string(buf) + "-" + unit + ".kyc";
}

std::string ManifestName(const std::string& region, uint64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRIu64, id);
  return "MANIFEST-" + region + "-" + buf + ".kym";
}

Result<Store::Manifest> Store::ReadManifest(const std::string& file) {
  auto bytes = ReadWholeFile(dir_ + "/" + file);
  if (!bytes.ok()) return bytes.status();
  uint32_t version = 0;
  auto payload = Unframe(FileKind::kManifest, *bytes, &version);
  if (!payload.ok()) return Status::Corruption(file + ": " + payload.status().message());
  nlohmann::json j = nlohmann::json::parse(*payload, nullptr, false);
  if (!j.is_object() || !j["checkpoint"].is_number_unsigned() || !j["region"].is_string() ||
      !j["units"].is_object()) {
    return Status::Corruption(file + ": not a manifest");
  }
  auto link = [](const nlohmann::json& r) {
    return r.is_object() && r.contains("chunk") && r["chunk"].is_string() &&
           r.contains("bytes") && r["bytes"].is_number_unsigned() && r.contains("crc") &&
           r["crc"].is_number_unsigned();
  };
  Manifest m;
  m.file = file;
  m.id = j["checkpoint"].get<uint64_t>();
  m.region = j["region"].get<std::string>();
  m.created_ms = j.value("created_ms", int64_t{0});
  for (const auto& [unit, r] : j["units"].items()) {
    if (!link(r) || !r.contains("fingerprint") || !r["fingerprint"].is_string()) {
      return Status::Corruption(file + ": bad entry for unit " + unit);
    }
    auto to_link = [](const nlohmann::json& l) {
      return Link{l["chunk"].get<std::string>(), l["bytes"].get<uint64_t>(),
                  l["crc"].get<uint32_t>()};
    };
    Record rec{r["fingerprint"].get<std::string>(), to_link(r), {}};
    // Written before fingerprints were sealed: the canonical text itself,
    // sealed here so that a component whose canonical text is unchanged keeps
    // its state (the next commit writes it sealed).
    if (rec.fingerprint.rfind(kSealedPrefix, 0) != 0) rec.fingerprint = Seal(rec.fingerprint);
    if (r.contains("deltas")) {
      // Only a version-2 manifest may name deltas; a version-1 reader would
      // have restored the base alone.
      if (version < kManifestWithDeltasVersion || !r["deltas"].is_array()) {
        return Status::Corruption(file + ": bad deltas for unit " + unit);
      }
      for (const auto& d : r["deltas"]) {
        if (!link(d)) return Status::Corruption(file + ": bad delta for unit " + unit);
        rec.deltas.push_back(to_link(d));
      }
    }
    m.units[unit] = std::move(rec);
  }
  return m;
}

Result<ChunkBytes> ChunkBytes::Map(int fd, size_t file_bytes, const std::string& path) {
  void* base = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) return Status::FromErrno("mmap " + path, errno);
  ChunkBytes b;
  b.map_ = std::shared_ptr<const char>(static_cast<const char*>(base), [file_bytes](const char* p) {
    ::munmap(const_cast<char*>(p), file_bytes);
  });
  b.size_ = file_bytes;
  return b;
}

void ChunkBytes::Narrow(size_t at, size_t n) {
  if (map_) {
    at_ += at;
    size_ = n;
  } else {
    str_.erase(0, at);
    str_.resize(n);
  }
}

namespace {

// A chunk file this big is mapped rather than read into the heap.
constexpr size_t kMapFrom = size_t{1} << 20;

Result<ChunkBytes> ReadChunkFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::FromErrno("open " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= kMapFrom) {
    auto mapped = ChunkBytes::Map(fd, static_cast<size_t>(st.st_size), path);
    ::close(fd);
    return mapped;
  }
  ::close(fd);
  auto bytes = ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status();
  return ChunkBytes(std::move(*bytes));
}

}  // namespace

Status Store::CheckChunk(const Link& r, ChunkBytes* data) {
  auto bytes = ReadChunkFile(dir_ + "/" + r.chunk);
  if (!bytes.ok()) return Status::Corruption(bytes.status().message());
  uint32_t crc = 0;
  auto payload = Unframe(FileKind::kChunk, bytes->view(), nullptr, &crc);
  if (!payload.ok()) return Status::Corruption(r.chunk + ": " + payload.status().message());
  // Unframe checked the payload against the CRC in the file's header.
  if (payload->size() != r.bytes || crc != r.crc) {
    return Status::Corruption(r.chunk + ": does not match its manifest entry");
  }
  if (data != nullptr) {  // the payload kept in view, not copied
    const size_t at = static_cast<size_t>(payload->data() - bytes->data());
    *data = std::move(*bytes);
    data->Narrow(at, payload->size());
  }
  return Status::Ok();
}

Status Store::ReadChunks(const Manifest& m, std::map<std::string, RestoredUnit>* data) {
  for (const auto& [unit, rec] : m.units) KAYAK_RETURN_IF_ERROR(ReadRecord(rec, &(*data)[unit]));
  return Status::Ok();
}

Status Store::ReadRecord(const Record& rec, RestoredUnit* u) {
  u->fingerprint = rec.fingerprint;
  KAYAK_RETURN_IF_ERROR(CheckChunk(rec.full, &u->data));
  u->deltas.resize(rec.deltas.size());
  for (size_t i = 0; i < rec.deltas.size(); ++i) {
    KAYAK_RETURN_IF_ERROR(CheckChunk(rec.deltas[i], &u->deltas[i]));
  }
  return Status::Ok();
}

Status Store::Unreadable(const std::string& region, uint64_t id, const Status& why) const {
  return Status::Corruption(
      "checkpoint " + std::to_string(id) + " of region " + region + " in " + dir_ +
      " cannot be read (" + why.message() + "); kayak does not start on state it cannot "
      "read and keeps every file. Repair the file, or start with --discard-state " + region +
      " to start that region empty (its inputs then begin from their configured start)");
}

Status Store::LoadKeyReadOnly() { return LoadKey(/*create=*/false); }

Status Store::LoadKey(bool create) {
  const std::string path = dir_ + "/KEY";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    auto bytes = ReadWholeFile(path);
    if (!bytes.ok()) return bytes.status();
    auto payload = Unframe(FileKind::kKey, *bytes);
    if (!payload.ok() || payload->size() != kKeyBytes) {
      return Status::Corruption(path + ": not a fingerprint key (" +
                                (payload.ok() ? "wrong length" : payload.status().message()) +
                                "); without it no checkpoint's fingerprints can be checked");
    }
    key_.assign(payload->data(), payload->size());
    return Status::Ok();
  }
  if (errno != ENOENT) return Status::FromErrno("stat " + path, errno);
  if (!create) return Status::Ok();
  std::string key(kKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) !=
      1) {
    return Status::Internal("no random bytes for " + path);
  }
  KAYAK_RETURN_IF_ERROR(WriteFileSynced(path + ".tmp", Frame(FileKind::kKey, key)));
  KAYAK_RETURN_IF_ERROR(RenameSynced(path + ".tmp", path, dir_));
  key_ = std::move(key);
  return Status::Ok();
}

namespace {

// Where in a file its frame's fault lies, for a reader with a hex viewer.
std::string FaultPlace(const std::string& reason, uint64_t file_bytes) {
  if (reason.find("header") != std::string::npos || reason.find("magic") != std::string::npos ||
      reason.find("kind") != std::string::npos || reason.find("version") != std::string::npos) {
    return " (in the header, bytes 0-" + std::to_string(kHeaderBytes - 1) + ")";
  }
  if (reason.find("truncated") != std::string::npos) {
    return " (the file ends at byte " + std::to_string(file_bytes) + ")";
  }
  if (reason.find("payload checksum") != std::string::npos && file_bytes > kHeaderBytes) {
    return " (in the payload, bytes " + std::to_string(kHeaderBytes) + "-" +
           std::to_string(file_bytes - 1) + ")";
  }
  return "";
}

uint64_t FileBytes(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

Status Store::Inspect(bool verify, Inventory* out) {
  std::vector<std::string> names;
  KAYAK_RETURN_IF_ERROR(ListDir(dir_, &names));
  std::sort(names.begin(), names.end());
  std::set<std::string> named;
  std::map<std::string, std::vector<Inventory::Checkpoint>> by_region;
  for (const auto& name : names) {
    std::string region;
    uint64_t id = 0;
    if (!ParseManifestName(name, &region, &id)) continue;
    const uint64_t file_bytes = FileBytes(dir_ + "/" + name);
    auto m = ReadManifest(name);
    if (!m.ok()) {
      const std::string why = m.status().message();
      out->faults.push_back(why + FaultPlace(why, file_bytes));
      named.insert(name);  // a manifest, if a broken one: not left over
      continue;
    }
    named.insert(name);
    Inventory::Checkpoint c{name, m->region, m->id, m->created_ms, file_bytes, {}};
    for (const auto& [unit, rec] : m->units) {
      Inventory::Unit u{unit, rec.fingerprint, {rec.full.chunk, rec.full.bytes}, {}};
      for (const auto& d : rec.deltas) u.deltas.push_back({d.chunk, d.bytes});
      c.units.push_back(std::move(u));
      named.insert(rec.full.chunk);
      for (const auto& d : rec.deltas) named.insert(d.chunk);
      if (!verify) continue;
      std::vector<const Link*> links{&rec.full};
      for (const auto& d : rec.deltas) links.push_back(&d);
      for (const Link* l : links) {
        ++out->chunks_checked;
        const Status st = CheckChunk(*l, nullptr);
        if (!st.ok()) {
          out->faults.push_back(st.message() + FaultPlace(st.message(),
                                                          FileBytes(dir_ + "/" + l->chunk)) +
                                ", named by " + name + " for unit " + unit);
        }
      }
    }
    by_region[c.region].push_back(std::move(c));
  }
  for (auto& [region, list] : by_region) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.id > b.id; });
    for (auto& c : list) out->checkpoints.push_back(std::move(c));
  }
  for (const auto& name : names) {
    const bool ours = name.rfind("chunk-", 0) == 0 || name.rfind("MANIFEST-", 0) == 0;
    if (ours && named.count(name) == 0) {
      out->unreferenced.emplace_back(name, FileBytes(dir_ + "/" + name));
    }
  }
  return Status::Ok();
}

CommittedUnits CommittedUnitsOf(const Inventory& inv) {
  CommittedUnits out;
  std::set<std::string> seen_region;
  for (const auto& c : inv.checkpoints) {  // newest first within a region
    if (!seen_region.insert(c.region).second) continue;
    for (const auto& u : c.units) {
      auto it = out.find(u.unit);
      if (it != out.end() && it->second.checkpoint_id > c.id) continue;
      uint64_t bytes = u.full.bytes;
      for (const auto& d : u.deltas) bytes += d.bytes;
      out[u.unit] = CommittedUnit{u.fingerprint, c.region, c.id, c.created_ms, bytes};
    }
  }
  return out;
}

CommittedUnits Store::Committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  CommittedUnits out;
  for (const auto& [region, kept] : manifests_) {
    if (kept.empty()) continue;
    const Manifest& m = kept.back();
    for (const auto& [unit, rec] : m.units) {
      auto it = out.find(unit);
      if (it != out.end() && it->second.checkpoint_id > m.id) continue;
      uint64_t bytes = rec.full.bytes;
      for (const auto& d : rec.deltas) bytes += d.bytes;
      out[unit] = CommittedUnit{rec.fingerprint, m.region, m.id, m.created_ms, bytes};
    }
  }
  return out;
}

Status Store::DropRegion(const std::string& region, std::vector<std::string>* removed) {
  std::vector<std::string> names;
  KAYAK_RETURN_IF_ERROR(ListDir(dir_, &names));
  for (const auto& name : names) {
    std::string r;
    uint64_t id = 0;
    if (!ParseManifestName(name, &r, &id) || r != region) continue;
    if (::unlink((dir_ + "/" + name).c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno("remove " + dir_ + "/" + name, errno);
    }
    removed->push_back(name);
  }
  return removed->empty() ? Status::Ok() : SyncDir(dir_);
}

Status Store::ReadUnit(const std::string& manifest_file, const std::string& unit,
                       RestoredUnit* out) {
  auto m = ReadManifest(manifest_file);
  if (!m.ok()) return m.status();
  auto it = m->units.find(unit);
  if (it == m->units.end()) return Status::NotFound(manifest_file + " has no unit " + unit);
  out->checkpoint_id = m->id;
  out->region = m->region;
  return ReadRecord(it->second, out);
}

std::string Store::Seal(std::string_view canonical) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(canonical.data()), canonical.size(), mac, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = kSealedPrefix;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

namespace {

constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;

std::string ToHex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

bool FromHex(std::string_view hex, std::string* out) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

}  // namespace

std::string Store::SealText(std::string_view text) const {
  // The cipher's key: not the fingerprint key itself, one derived from it.
  const std::string key = Seal("kayak graph secrets 1").substr(3);
  std::string raw_key;
  FromHex(key, &raw_key);
  std::string nonce(kNonceBytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size()));
  std::string out = nonce;
  out.resize(kNonceBytes + text.size() + kTagBytes);
  auto* dst = reinterpret_cast<unsigned char*>(out.data()) + kNonceBytes;
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0, total = 0;
  EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr,
                     reinterpret_cast<const unsigned char*>(raw_key.data()),
                     reinterpret_cast<const unsigned char*>(nonce.data()));
  EVP_EncryptUpdate(ctx, dst, &len, reinterpret_cast<const unsigned char*>(text.data()),
                    static_cast<int>(text.size()));
  total = len;
  EVP_EncryptFinal_ex(ctx, dst + total, &len);
  total += len;
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), dst + total);
  EVP_CIPHER_CTX_free(ctx);
  return ToHex(out);
}

Result<std::string> Store::OpenText(std::string_view sealed) const {
  std::string raw, raw_key;
  if (!FromHex(sealed, &raw) || raw.size() < kNonceBytes + kTagBytes) {
    return Status::Corruption("a sealed text that is not one");
  }
  FromHex(Seal("kayak graph secrets 1").substr(3), &raw_key);
  const size_t n = raw.size() - kNonceBytes - kTagBytes;
  std::string out(n, '\0');
  auto* src = reinterpret_cast<unsigned char*>(raw.data());
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr,
                     reinterpret_cast<const unsigned char*>(raw_key.data()), src);
  EVP_DecryptUpdate(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, src + kNonceBytes,
                    static_cast<int>(n));
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes),
                      src + kNonceBytes + n);
  unsigned char end[16];
  const bool ok = EVP_DecryptFinal_ex(ctx, end, &len) == 1;
  EVP_CIPHER_CTX_free(ctx);
  if (!ok) {
    return Status::Corruption("a sealed text that does not open with " + dir_ +
                              "/KEY (another directory's, or changed)");
  }
  return out;
}

Status Store::Recover(std::map<std::string, RestoredUnit>* out, uint64_t* max_id,
                      const std::set<std::string>& discard) {
  std::lock_guard lock(mu_);
  *max_id = 0;
  KAYAK_RETURN_IF_ERROR(LoadKey());
  std::vector<std::string> names;
  KAYAK_RETURN_IF_ERROR(ListDir(dir_, &names));
  std::map<std::string, std::vector<std::pair<uint64_t, std::string>>> by_region;
  for (const auto& name : names) {
    std::string region;
    uint64_t id = 0;
    if (ParseManifestName(name, &region, &id)) {
      by_region[region].emplace_back(id, name);
      *max_id = std::max(*max_id, id);
    }
  }
  for (const auto& region : discard) {
    if (!by_region.count(region)) {
      KLOG_WARN("--discard-state {}: {} holds no checkpoint of that region; nothing discarded",
                region, dir_);
    }
  }
  for (auto& [region, files] : by_region) {
    std::sort(files.rbegin(), files.rend());  // newest first
    if (discard.count(region)) {
      // The operator's choice (--discard-state): the region starts empty.
      for (const auto& [id, file] : files) {
        if (::unlink((dir_ + "/" + file).c_str()) != 0 && errno != ENOENT) {
          return Status::FromErrno("remove " + dir_ + "/" + file, errno);
        }
      }
      KAYAK_RETURN_IF_ERROR(SyncDir(dir_));
      KLOG_WARN("--discard-state {}: discarded the region's checkpoints (newest {}, {} "
                "manifests); the region starts empty and its inputs start from their "
                "configured beginning",
                region, files.front().first, files.size());
      continue;
    }
    // The newest committed checkpoint is the only one to restore: inputs may
    // have released what came before it (the http log its posts, kafka its
    // group offsets), so an older one could lose data and starting empty
    // would. One that cannot be read stops the start, with every file kept.
    const auto& [id, file] = files.front();
    auto m = ReadManifest(file);
    Status st = m.ok() ? Status::Ok() : m.status();
    std::map<std::string, RestoredUnit> data;
    if (st.ok()) st = ReadChunks(*m, &data);
    if (!st.ok()) return Unreadable(region, id, st);
    KLOG_INFO("restoring region {} from checkpoint {}", region, id);
    for (auto& [unit, d] : data) {
      auto& slot = (*out)[unit];
      if (slot.checkpoint_id <= id) {
        slot = std::move(d);
        slot.checkpoint_id = id;
        slot.region = region;
        latest_[unit] = m->units[unit];
      }
    }
    auto& kept = manifests_[region];
    // The one before stays, its chunks unchecked until FallBack needs it;
    // older ones are garbage.
    if (files.size() > 1) {
      auto before = ReadManifest(files[1].second);
      if (!before.ok()) return Unreadable(region, files[1].first, before.status());
      kept.push_back(std::move(before.value()));
    }
    kept.push_back(std::move(m.value()));
  }
  next_id_ = *max_id + 1;
  CollectGarbage();
  return Status::Ok();
}

Status Store::ReadLatest(const std::set<std::string>& skip,
                         std::map<std::string, RestoredUnit>* out) {
  std::lock_guard lock(mu_);
  for (const auto& [region, kept] : manifests_) {
    if (kept.empty() || skip.count(region)) continue;
    const Manifest& m = kept.back();
    std::map<std::string, RestoredUnit> data;
    if (Status st = ReadChunks(m, &data); !st.ok()) return Unreadable(region, m.id, st);
    for (auto& [unit, d] : data) {
      auto& slot = (*out)[unit];
      if (slot.checkpoint_id <= m.id) {
        slot = std::move(d);
        slot.checkpoint_id = m.id;
        slot.region = region;
      }
    }
  }
  return Status::Ok();
}

Status Store::FallBack(const std::string& region, std::map<std::string, RestoredUnit>* out) {
  std::lock_guard lock(mu_);
  auto it = manifests_.find(region);
  if (it == manifests_.end() || it->second.empty()) return Status::Ok();
  auto& kept = it->second;
  const Manifest& newest = kept.back();
  // The checkpoint before is read first: one that cannot be read stops the
  // start with every file kept (never a reason to start empty).
  std::map<std::string, RestoredUnit> data;
  const Manifest* before = kept.size() > 1 ? &kept[kept.size() - 2] : nullptr;
  if (before != nullptr) {
    if (Status st = ReadChunks(*before, &data); !st.ok()) return Unreadable(region, before->id, st);
  }
  for (const auto& [unit, r] : newest.units) {
    auto o = out->find(unit);
    if (o != out->end() && o->second.checkpoint_id == newest.id) out->erase(o);
    latest_.erase(unit);
  }
  // Gone from disk too, so a restart before the next commit does not pick it.
  if (::unlink((dir_ + "/" + newest.file).c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno("remove " + dir_ + "/" + newest.file, errno);
  }
  KAYAK_RETURN_IF_ERROR(SyncDir(dir_));
  const uint64_t newest_id = newest.id;
  kept.pop_back();
  if (before == nullptr) {
    KLOG_WARN("region {}: no checkpoint before {} is left; the region starts empty", region,
              newest_id);
  } else {
    const Manifest& b = kept.back();
    KLOG_INFO("restoring region {} from checkpoint {} instead of {}", region, b.id, newest_id);
    for (auto& [unit, d] : data) {
      RestoredUnit& slot = (*out)[unit] = std::move(d);
      slot.checkpoint_id = b.id;
      slot.region = region;
      latest_[unit] = b.units.at(unit);
    }
  }
  CollectGarbage();
  return Status::Ok();
}

bool Store::LatestChain(const std::string& unit, const std::string& fingerprint, uint64_t* base,
                        uint64_t* deltas) {
  std::lock_guard lock(mu_);
  auto it = latest_.find(unit);
  if (it == latest_.end() || it->second.fingerprint != fingerprint) return false;
  *base = it->second.full.bytes;
  *deltas = ChainBytes(it->second) - *base;
  return true;
}

Status Store::ReadChain(const std::string& unit, const std::string& fingerprint,
                        RestoredUnit* out) {
  Record rec;
  {
    std::lock_guard lock(mu_);
    auto it = latest_.find(unit);
    if (it == latest_.end() || it->second.fingerprint != fingerprint) {
      return Status::Internal("unit " + unit + " has no committed chain to compact");
    }
    rec = it->second;
  }
  // Outside the lock (other regions commit meanwhile): the chunks of a
  // unit's newest record stay until this region commits a newer one.
  return ReadRecord(rec, out);
}

Status Store::DropRegionsExcept(const std::set<std::string>& live) {
  std::lock_guard lock(mu_);
  for (const auto& name : ListDir(dir_)) {
    std::string region;
    uint64_t id = 0;
    if (!ParseManifestName(name, &region, &id) || live.count(region)) continue;
    if (::unlink((dir_ + "/" + name).c_str()) != 0 && errno != ENOENT) {
      return Status::FromErrno("remove " + dir_ + "/" + name, errno);
    }
    KLOG_INFO("removed {}: its region no longer exists", name);
    manifests_.erase(region);
  }
  CollectGarbage();
  return SyncDir(dir_);
}

void Store::CollectGarbage() {
  std::set<std::string> keep = {"LOCK"};
  for (const auto& [region, ms] : manifests_) {
    for (const auto& m : ms) {
      keep.insert(m.file);
      for (const auto& [unit, r] : m.units) {
        keep.insert(r.full.chunk);
        for (const auto& d : r.deltas) keep.insert(d.chunk);
      }
    }
  }
  for (const auto& name : ListDir(dir_)) {
    const bool ours = name.rfind("chunk-", 0) == 0 || name.rfind("MANIFEST-", 0) == 0;
    if (!ours || keep.count(name)) continue;
    if (::unlink((dir_ + "/" + name).c_str()) == 0) {
      KLOG_DEBUG("removed {}, which no manifest names", name);
    }
  }
}

Status Store::Commit(const std::string& region, uint64_t id, int64_t now_ms,
                     const std::vector<UnitState>& units, CommitStats* stats) {
  std::lock_guard lock(mu_);
  std::vector<std::string> written;
  auto fail = [&](Status st) {
    for (const auto& f : written) ::unlink((dir_ + "/" + f).c_str());
    return st;
  };
  Manifest m;
  m.id = id;
  m.region = region;
  m.created_ms = now_ms;
  std::map<std::string, Record> fresh;
  for (const auto& u : units) {
    auto last = latest_.find(u.unit);
    const bool chained = last != latest_.end() && last->second.fingerprint == u.fingerprint;
    if (!u.data) {
      if (chained) {
        m.units[u.unit] = last->second;
        stats->bytes_reused += ChainBytes(last->second);
        continue;
      }
      return fail(Status::Internal("unit " + u.unit + " is unchanged but has no committed chunk"));
    }
    if (u.delta && !chained) {
      return fail(Status::Internal("unit " + u.unit + " has a delta but no committed chunk"));
    }
    // One pass for the CRC, named by the manifest and the chunk's header
    // alike, and no framed copy of the payload (a chunk may be hundreds of MB).
    const Link link{ChunkName(id, u.unit), u.data->size(), Crc32c(u.data->data(), u.data->size())};
    Status st = WriteFileSynced(dir_ + "/" + link.chunk,
                                FrameHeader(FileKind::kChunk, link.bytes, link.crc), *u.data);
    written.push_back(link.chunk);
    if (!st.ok()) return fail(st);
    stats->bytes_written += kHeaderBytes + link.bytes;
    stats->chunks_written++;
    Record r;
    if (u.delta) {
      r = last->second;
      stats->bytes_reused += ChainBytes(r);
      r.deltas.push_back(link);
    } else {
      r = Record{u.fingerprint, link, {}};
    }
    m.units[u.unit] = r;
    fresh[u.unit] = std::move(r);
  }
  CrashPoint("after_chunks");
  // The chunks' directory entries are durable before any manifest names them.
  if (!written.empty()) {
    if (Status st = SyncDir(dir_); !st.ok()) return fail(st);
  }
  nlohmann::json j;
  bool deltas = false;
  for (const auto& [unit, r] : m.units) deltas = deltas || !r.deltas.empty();
  const uint32_t version = deltas ? kManifestWithDeltasVersion : kFormatVersion;
  j["format"] = version;
  j["checkpoint"] = id;
  j["region"] = region;
  j["created_ms"] = now_ms;
  j["units"] = nlohmann::json::object();
  for (const auto& [unit, r] : m.units) {
    auto& entry = j["units"][unit] = {{"fingerprint", r.fingerprint}, {"chunk", r.full.chunk},
                                      {"bytes", r.full.bytes}, {"crc", r.full.crc}};
    for (const auto& d : r.deltas) {
      entry["deltas"].push_back({{"chunk", d.chunk}, {"bytes", d.bytes}, {"crc", d.crc}});
    }
  }
  m.file = ManifestName(region, id);
  const std::string tmp = m.file + ".tmp";
  const std::string framed = Frame(FileKind::kManifest, DumpJson(j), version);
  Status st = WriteFileSynced(dir_ + "/" + tmp, framed);
  written.push_back(tmp);
  if (!st.ok()) return fail(st);
  CrashPoint("before_rename");
  if (::rename((dir_ + "/" + tmp).c_str(), (dir_ + "/" + m.file).c_str()) != 0) {
    st = Status::FromErrno("rename " + tmp, errno);
  } else {
    CrashPoint("before_dir_fsync");
    st = SyncDir(dir_);
  }
  CrashPoint("after_dir_fsync");
  if (!st.ok()) {
    // The rename may or may not have happened; the manifest is whole either
    // way, and the directory fsync that failed is retried by the next one.
    written.push_back(m.file);
    return fail(st);
  }
  stats->bytes_written += framed.size();
  for (auto& [unit, r] : fresh) latest_[unit] = r;
  auto& kept = manifests_[region];
  kept.push_back(std::move(m));
  while (kept.size() > kManifestsKept) kept.erase(kept.begin());
  CollectGarbage();
  return Status::Ok();
}

}  // namespace kayak::checkpoint
