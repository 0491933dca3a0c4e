#include "cluster/shard_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "common/format.h"

namespace kayak::cluster {
namespace {

using checkpoint::Crc32c;
using checkpoint::FileKind;

// 2: an entry with `outputs`. Entries without them are written as 1, which
// every reader of 1 still reads.
constexpr uint32_t kShardFormat = 1;
constexpr uint32_t kShardFormatOutputs = 2;

std::string Digits20(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%020llu", static_cast<unsigned long long>(v));
  return b;
}

std::string LogName(uint64_t seq) { return "LOG-" + Digits20(seq) + ".kys"; }

// "LOG-<20 digits>.kys" -> seq.
bool ParseLogName(std::string_view name, uint64_t* seq) {
  constexpr std::string_view kHead = "LOG-";
  constexpr std::string_view kTail = ".kys";
  if (name.size() != kHead.size() + 20 + kTail.size()) return false;
  if (name.substr(0, kHead.size()) != kHead || name.substr(name.size() - kTail.size()) != kTail) {
    return false;
  }
  uint64_t out = 0;
  for (char c : name.substr(kHead.size(), 20)) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<uint64_t>(c - '0');
  }
  *seq = out;
  return true;
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Encode(const ShardId& shard, uint64_t seq, const ShardManifest& m) {
  nlohmann::json units = nlohmann::json::object();
  for (const auto& [name, u] : m.units) {
    units[name] = {{"chunk", u.chunk}, {"bytes", u.bytes}, {"crc", u.crc}};
  }
  nlohmann::json j = {{"format", m.outputs.empty() ? kShardFormat : kShardFormatOutputs},
                            {"seq", seq}, {"region", shard.region},
                            {"topic", shard.topic},     {"partition", shard.partition},
                            {"epoch", m.epoch},         {"checkpoint", m.checkpoint},
                            {"owner", m.owner},         {"next_offset", m.next_offset},
                            {"created_ms", m.created_ms}, {"units", units}};
  if (m.claim) j["claim"] = true;
  if (!m.outputs.empty()) j["outputs"] = m.outputs;
  return checkpoint::Frame(FileKind::kShardManifest, j.dump());
}

Result<ShardManifest> Decode(const ShardId& shard, std::string_view file, uint64_t seq) {
  auto payload = checkpoint::Unframe(FileKind::kShardManifest, file);
  if (!payload.ok()) return payload.status();
  const auto j = nlohmann::json::parse(payload->begin(), payload->end(), nullptr, false);
  if (!j.is_object()) return Status::Corruption("payload is not a JSON object");
  try {
    const uint32_t format = j.at("format").get<uint32_t>();
    if (format != kShardFormat && format != kShardFormatOutputs) {
      return Status::Corruption("shard manifest format " + j.at("format").dump() +
                                " is not supported");
    }
    ShardManifest m;
    m.epoch = j.at("epoch").get<uint64_t>();
    m.checkpoint = j.at("checkpoint").get<uint64_t>();
    if (j.at("seq").get<uint64_t>() != seq || j.at("region").get<std::string>() != shard.region ||
        j.at("topic").get<std::string>() != shard.topic ||
        j.at("partition").get<int32_t>() != shard.partition) {
      return Status::Corruption("its contents do not match its name and place");
    }
    m.owner = j.at("owner").get<std::string>();
    m.next_offset = j.at("next_offset").get<int64_t>();
    m.created_ms = j.at("created_ms").get<int64_t>();
    m.claim = j.value("claim", false);
    if (format == kShardFormatOutputs) {
      for (const auto& [unit, state] : j.at("outputs").items()) {
        m.outputs.emplace(unit, state.get<std::string>());
      }
      if (m.outputs.empty()) return Status::Corruption("format 2 without outputs");
    }
    for (const auto& [name, u] : j.at("units").items()) {
      ShardUnit unit{u.at("chunk").get<std::string>(), u.at("bytes").get<uint64_t>(),
                     u.at("crc").get<uint32_t>()};
      if (!ShardStore::SafeName(unit.chunk)) return Status::Corruption("a chunk name is unsafe");
      m.units.emplace(name, std::move(unit));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(std::string("malformed: ") + e.what());
  }
}

// Whether `a`, read from the log, is the commit `b` (not a claim of it).
bool SameCommit(const ShardManifest& a, const ShardManifest& b) {
  if (a.claim || b.claim || a.epoch != b.epoch || a.checkpoint != b.checkpoint ||
      a.owner != b.owner || a.next_offset != b.next_offset || a.units.size() != b.units.size() ||
      a.outputs != b.outputs) {
    return false;
  }
  for (const auto& [name, u] : a.units) {
    auto it = b.units.find(name);
    if (it == b.units.end() || it->second.chunk != u.chunk || it->second.bytes != u.bytes ||
        it->second.crc != u.crc) {
      return false;
    }
  }
  return true;
}

// How many times a commit tries the next sequence number when another
// writer takes it first (each loss is another writer's commit: a shard has
// one owner, and at most a stale one beside it).
constexpr int kCommitTries = 64;

}  // namespace

std::string ShardId::Path() const { return region + "/" + topic + "." + std::to_string(partition); }

ShardStore::ShardStore(std::string root) : ShardStore(DirectoryBlobs(std::move(root)), "") {}

ShardStore::ShardStore(std::shared_ptr<Blobs> blobs, std::string prefix)
    : blobs_(std::move(blobs)), prefix_(std::move(prefix)) {}

bool ShardStore::SafeName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 249) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

Result<std::string> ShardStore::DirOf(const ShardId& shard) const {
  if (!SafeName(shard.region) || !SafeName(shard.topic) || shard.partition < 0) {
    return Status::Invalid("shard '" + shard.Path() +
                           "': a region or topic name that cannot be a directory's");
  }
  return prefix_.empty() ? shard.Path() : prefix_ + "/" + shard.Path();
}

Result<std::vector<ShardStore::Entry>> ShardStore::ReadLog(const ShardId& shard,
                                                          const std::string& dir) const {
  std::vector<Entry> out;
  std::vector<std::string> names;
  KAYAK_RETURN_IF_ERROR(blobs_->List(dir, &names));
  for (std::string& name : names) {
    Entry e;
    e.file = std::move(name);
    if (ParseLogName(e.file, &e.seq)) out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
  uint64_t high = 0;  // the highest epoch of a readable entry so far
  for (Entry& e : out) {
    auto file = blobs_->Read(dir + "/" + e.file);
    if (!file.ok()) {
      e.why = file.status().message();
      continue;
    }
    auto m = Decode(shard, *file, e.seq);
    if (!m.ok()) {
      e.why = m.status().message();
      continue;
    }
    e.counts = m->epoch >= high;
    if (!e.counts) {
      e.why = "epoch " + std::to_string(m->epoch) + " was fenced by epoch " +
              std::to_string(high) + " before it";
    }
    high = std::max(high, m->epoch);
    e.m = std::move(*m);
  }
  return out;
}

Result<ShardUnit> ShardStore::WriteChunk(const ShardId& shard, uint64_t epoch, uint64_t checkpoint,
                                         std::string_view unit, std::string_view state) {
  auto dir = DirOf(shard);
  if (!dir.ok()) return dir.status();
  if (!SafeName(unit)) return Status::Invalid("unit name '" + std::string(unit) + "' is unsafe");
  ShardUnit out;
  out.chunk = "chunk-" + Digits20(epoch) + "-" + Digits20(checkpoint) + "-" + std::string(unit) +
              ".kyc";
  out.bytes = state.size();
  out.crc = Crc32c(state.data(), state.size());
  KAYAK_RETURN_IF_ERROR(blobs_->Write(*dir + "/" + out.chunk,
                                     checkpoint::FrameHeader(FileKind::kChunk, out.bytes, out.crc),
                                     state, /*durable=*/true));
  return out;
}

Result<std::string> ShardStore::ReadChunk(const ShardId& shard, const ShardUnit& unit) const {
  auto dir = DirOf(shard);
  if (!dir.ok()) return dir.status();
  auto file = blobs_->Read(*dir + "/" + unit.chunk);
  if (!file.ok()) return file.status();
  uint32_t crc = 0;
  auto payload = checkpoint::Unframe(FileKind::kChunk, *file, nullptr, &crc);
  if (!payload.ok()) {
    return Status::Corruption("shard " + shard.Path() + " chunk " + unit.chunk + ": " +
                              payload.status().message());
  }
  if (payload->size() != unit.bytes || crc != unit.crc) {
    return Status::Corruption("shard " + shard.Path() + " chunk " + unit.chunk +
                              " is not the one its manifest names");
  }
  return std::string(*payload);
}

Result<CommitOutcome> ShardStore::Append(
    const ShardId& shard, const std::string& dir,
    const std::function<std::optional<ShardManifest>(std::vector<Entry>*)>& make) {
  for (int attempt = 0; attempt < kCommitTries; ++attempt) {
    auto log = ReadLog(shard, dir);
    if (!log.ok()) return log.status();
    const uint64_t tail = log->empty() ? 0 : log->back().seq;
    std::optional<ShardManifest> m = make(&*log);
    if (!m) return CommitOutcome::kFenced;
    if (m->created_ms == 0) m->created_ms = WallMs();
    auto placed = blobs_->WriteNew(dir + "/" + LogName(tail + 1), Encode(shard, tail + 1, *m));
    if (!placed.ok()) return placed.status();
    if (*placed) return CommitOutcome::kCommitted;
    // Another writer took that number: read the log again, and decide again
    // on what it now holds.
  }
  return Status::Unavailable("shard " + shard.Path() + ": the log's next entry was taken " +
                             std::to_string(kCommitTries) + " times in a row");
}

const ShardStore::Entry* ShardStore::NewestOf(const std::string& dir, std::vector<Entry>* log,
                                              std::vector<std::string>* notes,
                                              const Usable& usable) const {
  for (auto it = log->rbegin(); it != log->rend(); ++it) {
    std::string why = it->why;
    if (it->counts) {
      // Every chunk it names is there, of the length it says (its CRC is
      // checked when it is read).
      for (const auto& [unit, u] : it->m->units) {
        auto size = blobs_->Size(dir + "/" + u.chunk);
        if (!size.ok() || *size != static_cast<int64_t>(u.bytes + checkpoint::kHeaderBytes)) {
          why = "its chunk " + u.chunk + " is missing or of another length";
          break;
        }
      }
      if (why.empty() && usable && !it->m->outputs.empty() && !usable(*it->m)) {
        why = "the commit of its outputs (checkpoint " + std::to_string(it->m->checkpoint) +
              " of " + it->m->owner + ") did not take place";
      }
      if (why.empty()) return &*it;
    }
    if (notes != nullptr) notes->push_back(it->file + " passed over: " + why);
  }
  return nullptr;
}

Result<CommitOutcome> ShardStore::Commit(const ShardId& shard, const ShardManifest& m) {
  auto dir = DirOf(shard);
  if (!dir.ok()) return dir.status();
  bool placed_before = false;
  auto outcome =
      Append(shard, *dir, [&](std::vector<Entry>* log) -> std::optional<ShardManifest> {
    // A claim restates another owner's checkpoint under that owner's
    // numbering: only a commit of this checkpoint is a repeat.
    for (const Entry& e : *log) {
      // This very entry, placed by an earlier try whose answer was lost
      // (an S3 PUT, a directory's fsync that failed after the link).
      if (e.m && SameCommit(*e.m, m)) {
        placed_before = true;
        return std::nullopt;
      }
      if (e.m && (e.m->epoch > m.epoch ||
                  (e.m->epoch == m.epoch && !e.m->claim && e.m->checkpoint == m.checkpoint))) {
        return std::nullopt;
      }
    }
    return m;
  });
  if (outcome.ok() && placed_before) return CommitOutcome::kCommitted;
  return outcome;
}

Result<CommitOutcome> ShardStore::Claim(const ShardId& shard, uint64_t epoch,
                                        const std::string& owner, int64_t next_offset,
                                        ShardManifest* claimed) {
  if (epoch == 0) return Status::Invalid("a shard's epoch starts at 1");
  return ClaimAt(shard, epoch, owner, next_offset, claimed, nullptr);
}

Result<CommitOutcome> ShardStore::ClaimNext(const ShardId& shard, const std::string& owner,
                                            int64_t next_offset, ShardManifest* claimed,
                                            uint64_t* epoch, const Usable& usable) {
  ShardManifest m;
  auto outcome = ClaimAt(shard, 0, owner, next_offset, &m, usable);
  if (outcome.ok() && *outcome == CommitOutcome::kCommitted) {
    if (epoch != nullptr) *epoch = m.epoch;
    if (claimed != nullptr) *claimed = std::move(m);
  }
  return outcome;
}

Result<CommitOutcome> ShardStore::ClaimAt(const ShardId& shard, uint64_t epoch,
                                          const std::string& owner, int64_t next_offset,
                                          ShardManifest* claimed, const Usable& usable) {
  auto dir = DirOf(shard);
  if (!dir.ok()) return dir.status();
  // What is restated is decided on the same reading of the log as the
  // number the claim takes: a commit of the old owner that lands first is
  // in it.
  auto outcome =
      Append(shard, *dir, [&](std::vector<Entry>* log) -> std::optional<ShardManifest> {
        uint64_t highest = 0;
        for (const Entry& e : *log) {
          if (e.m) highest = std::max(highest, e.m->epoch);
        }
        const uint64_t at = epoch == 0 ? highest + 1 : epoch;
        if (highest >= at) return std::nullopt;
        ShardManifest m;
        if (const Entry* newest = NewestOf(*dir, log, nullptr, usable)) {
          m = *newest->m;
          m.outputs.clear();  // decided
        } else {
          m.next_offset = next_offset;
        }
        m.epoch = at;
        m.owner = owner;
        m.created_ms = 0;
        m.claim = true;
        if (claimed != nullptr) *claimed = m;
        return m;
      });
  return outcome;
}

Result<std::optional<ShardManifest>> ShardStore::Newest(const ShardId& shard,
                                                        std::vector<std::string>* notes) const {
  auto dir = DirOf(shard);
  if (!dir.ok()) return dir.status();
  auto log = ReadLog(shard, *dir);
  if (!log.ok()) return log.status();
  std::vector<std::string> passed;
  const Entry* newest = NewestOf(*dir, &*log, &passed);
  if (notes != nullptr) {
    for (const std::string& p : passed) notes->push_back("shard " + shard.Path() + ": " + p);
  }
  if (newest == nullptr) return std::optional<ShardManifest>();
  return std::optional<ShardManifest>(*newest->m);
}

Status ShardStore::Prune(const ShardId& shard, size_t keep) {
  auto dir = DirOf(shard);
  if (!dir.ok()) return dir.status();
  keep = std::max<size_t>(keep, 1);
  auto log = ReadLog(shard, *dir);
  if (!log.ok()) return log.status();
  // The log from the keep-th newest entry that counts on stays (an entry
  // after it that does not count stays too: it is judged by what is kept,
  // which still fences it).
  size_t cut = log->size();
  size_t counted = 0;
  for (size_t i = log->size(); i-- > 0;) {
    if ((*log)[i].counts && ++counted == keep) {
      cut = i;
      break;
    }
  }
  if (counted < keep || cut == 0) return Status::Ok();
  std::set<std::string> named;
  for (size_t i = cut; i < log->size(); ++i) {
    if (!(*log)[i].m) continue;
    for (const auto& [unit, u] : (*log)[i].m->units) named.insert(u.chunk);
  }
  for (size_t i = 0; i < cut; ++i) {
    KAYAK_RETURN_IF_ERROR(blobs_->Remove(*dir + "/" + (*log)[i].file));
  }
  // Chunks of checkpoints before the oldest kept entry that no kept entry
  // names. A later one may belong to a checkpoint being written.
  const ShardManifest& oldest = *(*log)[cut].m;
  const std::string limit = "chunk-" + Digits20(oldest.epoch) + "-" + Digits20(oldest.checkpoint);
  std::vector<std::string> names;
  KAYAK_RETURN_IF_ERROR(blobs_->List(*dir, &names));
  for (const std::string& name : names) {
    if (name.rfind("chunk-", 0) == 0 && name.compare(0, limit.size(), limit) < 0 &&
        named.count(name) == 0) {
      KAYAK_RETURN_IF_ERROR(blobs_->Remove(*dir + "/" + name));
    }
  }
  // What a writer killed before it placed an entry or a chunk left.
  blobs_->Tidy(*dir);
  return Status::Ok();
}

}  // namespace kayak::cluster
