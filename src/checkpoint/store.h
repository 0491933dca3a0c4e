// The checkpoint store: chunk files and manifests in the state directory.
//
//   DIR/LOCK                                  the server's lock (cli/state_dir)
//   DIR/KEY                                   the key fingerprints are sealed with
//   DIR/chunk-<id>-<unit>.kyc                 one unit's state at checkpoint <id>,
//                                             or what changed in it (a delta)
//   DIR/MANIFEST-<region>-<id>.kym            a region's committed checkpoint <id>
//
// A unit is one piece of state: "p.<pipeline>.input" (an input's position),
// "p.<pipeline>.t<i>" (transform i), "p.<pipeline>.o<i>" (output i),
// "p.<pipeline>.dead" (its dead-letter output),
// "b.<bucket>". A manifest names, for every unit of its region, the chunk
// holding its state (possibly written by an earlier checkpoint) and the delta
// chunks after it, the fingerprint of the component's config, and each
// chunk's length and CRC.
// docs/state_format.md has the byte-level format.
//
// Thread-safety: Recover is called once, before anything else. After it,
// every method may be called from any thread (each region's checkpoint
// coordinator commits through the one store); they take one mutex, so
// commits of different regions are written one after the other.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kayak/status.h"

namespace kayak::checkpoint {

// What a component hands over at a barrier.
struct UnitState {
  std::string unit;
  std::string fingerprint;
  std::optional<std::string> data;  // nullopt: unchanged since the last commit
  // `data` is what changed since the unit's last committed chunks (a
  // bucket's delta), to be read after them, not the whole state.
  bool delta = false;
  // For a delta: merges the committed chain (a full chunk and its deltas,
  // oldest first) into a full chunk, appended to `out`. When set, the
  // coordinator writes that instead of the delta once the chain would pass
  // its share of the full chunk.
  std::function<Status(std::string_view, const std::vector<std::string_view>&, std::string*)>
      compact;
  // For a delta the barrier only sealed (Transform::SealDelta): writes
  // `data`, on the coordinator's thread, before anything reads it.
  std::function<Status(std::string*)> collect;
};

// A chunk's payload as read from its file. A big chunk is the file mapped
// read-only (no zeroed buffer, no copy: a bucket of 10M keys is hundreds of
// MB), a small one a string. The store writes a chunk once under a new name
// and never changes it, so a mapping stays valid while it is held, even after
// the file is deleted.
class ChunkBytes {
 public:
  ChunkBytes() = default;
  ChunkBytes(std::string s) : str_(std::move(s)) {}  // NOLINT: a string is one
  ChunkBytes(const char* s) : str_(s) {}             // NOLINT
  // Maps `fd` (the file at `path`, of `file_bytes`) and holds its bytes.
  static Result<ChunkBytes> Map(int fd, size_t file_bytes, const std::string& path);

  std::string_view view() const {
    return map_ ? std::string_view(map_.get() + at_, size_) : std::string_view(str_);
  }
  operator std::string_view() const { return view(); }  // NOLINT: read as bytes
  const char* data() const { return view().data(); }
  size_t size() const { return view().size(); }
  bool empty() const { return size() == 0; }
  // Only the payload from `at`, `n` bytes of it, is kept in view.
  void Narrow(size_t at, size_t n);
  friend bool operator==(const ChunkBytes& a, std::string_view b) { return a.view() == b; }

 private:
  std::string str_;
  std::shared_ptr<const char> map_;  // unmapped with the last holder
  size_t at_ = 0;
  size_t size_ = 0;
};

// A unit's state as recovered at start.
struct RestoredUnit {
  std::string fingerprint;
  ChunkBytes data;
  std::vector<ChunkBytes> deltas;  // to apply after `data`, oldest first
  uint64_t checkpoint_id = 0;
  std::string region;  // whose manifest it came from
};

// What a state directory holds, read without changing anything
// (Store::Inspect; `kayak state`).
struct Inventory {
  struct Chunk {
    std::string file;
    uint64_t bytes = 0;  // payload bytes, as the manifest says
  };
  struct Unit {
    std::string unit;
    std::string fingerprint;  // sealed (Store::Seal)
    Chunk full;
    std::vector<Chunk> deltas;  // oldest first
  };
  struct Checkpoint {
    std::string file;  // the manifest
    std::string region;
    uint64_t id = 0;
    int64_t created_ms = 0;
    uint64_t file_bytes = 0;
    std::vector<Unit> units;
  };
  std::vector<Checkpoint> checkpoints;  // by region, newest first within one
  // Chunk and manifest files no readable manifest names, with their sizes:
  // what an interrupted checkpoint left (the next start removes them).
  std::vector<std::pair<std::string, uint64_t>> unreferenced;
  // What verification found wrong, in the order met: "file: reason".
  std::vector<std::string> faults;
  uint64_t chunks_checked = 0;
};

// A unit as its newest committed checkpoint holds it: what a start would
// restore, without its bytes (Store::Committed, CommittedUnitsOf).
struct CommittedUnit {
  std::string fingerprint;  // sealed
  std::string region;
  uint64_t checkpoint_id = 0;
  int64_t created_ms = 0;
  uint64_t bytes = 0;  // its full chunk and deltas
};
using CommittedUnits = std::map<std::string, CommittedUnit>;
// For each unit, the newest checkpoint of `inv` holding it.
CommittedUnits CommittedUnitsOf(const Inventory& inv);

struct CommitStats {
  uint64_t bytes_written = 0;
  uint64_t bytes_reused = 0;
  uint64_t chunks_written = 0;
};

class Store {
 public:
  explicit Store(std::string dir) : dir_(std::move(dir)) {}

  // Reads every region's newest manifest and its chunks, checking their
  // checksums; keeps the one before it for FallBack; then removes every file
  // no kept manifest names. A manifest or chunk that cannot be read (bad
  // checksum, I/O error) is an error naming the file, and nothing is
  // removed: state is never silently dropped. The regions in `discard` (the
  // operator's --discard-state) lose their manifests and start empty.
  // `out` gets each unit's state; `max_id` the highest checkpoint id seen.
  Status Recover(std::map<std::string, RestoredUnit>* out, uint64_t* max_id,
                 const std::set<std::string>& discard = {});

  // Lists the directory's checkpoints and reads every manifest, without
  // Recover and without writing or removing anything. With `verify`, reads
  // every chunk a manifest names and checks it (its frame, its CRC-32C, its
  // size and CRC against the manifest entry); each fault goes to
  // out->faults with the file and what is wrong. An error only when the
  // directory cannot be listed.
  Status Inspect(bool verify, Inventory* out);
  // Without Recover, for a directory no server holds: removes every
  // manifest of `region` (what --discard-state does at a start) and fsyncs
  // the directory; their chunks go at the next start. `removed` gets the
  // files; none is not an error.
  Status DropRegion(const std::string& region, std::vector<std::string>* removed);
  // Without Recover: `unit`'s chunks as the manifest `manifest_file` names
  // them, read and checked (its full chunk and deltas into `out`).
  Status ReadUnit(const std::string& manifest_file, const std::string& unit, RestoredUnit* out);

  // After Recover: each unit of the regions' newest committed checkpoints,
  // read from the manifests kept in memory (no file is read).
  CommittedUnits Committed() const;
  // Without Recover, for a directory read and not changed (`kayak plan`):
  // reads DIR/KEY so Seal gives what the server's store would. No key is
  // not an error (nothing was sealed with one; Seal then matches nothing).
  Status LoadKeyReadOnly();

  // After Recover: the region's newest checkpoint is not to be restored (a
  // two-phase output's commit of it did not happen). Removes its manifest
  // and puts the checkpoint before it into `out` instead (none left: the
  // region's units are taken out of `out`; one that cannot be read is an
  // error).
  Status FallBack(const std::string& region, std::map<std::string, RestoredUnit>* out);

  // After Recover, when regions are rebuilt: the state of every region's
  // newest checkpoint except those in `skip` (regions that keep running),
  // read and checked again, into `out` (for each unit, the newest
  // checkpoint that holds it). One that cannot be read is an error, as at
  // start.
  Status ReadLatest(const std::set<std::string>& skip, std::map<std::string, RestoredUnit>* out);

  // The id of the next checkpoint, of whichever region: ids grow across the
  // whole store, so the newest checkpoint holding a unit is the one to
  // restore even when the unit moved from one region to another.
  uint64_t NextId() { return next_id_.fetch_add(1); }

  // Removes the manifests of every region not in `live` (a deleted
  // pipeline's), then every chunk no kept manifest names. Call once every
  // live region has committed.
  Status DropRegionsExcept(const std::set<std::string>& live);

  // Commits checkpoint `id` of `region`: writes and fsyncs the chunks of
  // changed units, fsyncs the directory, then writes the manifest to a
  // temporary file, fsyncs it, renames it into place and fsyncs the
  // directory. Unchanged units refer to their last committed chunk. On any
  // error the checkpoint's new files are removed and the previous manifest
  // stays in force.
  Status Commit(const std::string& region, uint64_t id, int64_t now_ms,
                const std::vector<UnitState>& units, CommitStats* stats);

  // The newest committed chain of `unit` if its fingerprint is
  // `fingerprint`: the payload bytes of its full chunk and of its deltas.
  bool LatestChain(const std::string& unit, const std::string& fingerprint, uint64_t* base,
                   uint64_t* deltas);
  // That chain read and checked again (a compaction writes a new full chunk
  // from it): the full chunk into out->data, the deltas into out->deltas.
  // None, or one that cannot be read, is an error naming the chunk.
  Status ReadChain(const std::string& unit, const std::string& fingerprint, RestoredUnit* out);

  // A component's fingerprint as the manifests keep it (after Recover):
  // "k1:" and the HMAC-SHA256 of `canonical` under the directory's key, so a
  // manifest holds no option value (docs/state_format.md). The engine seals
  // every fingerprint it hands to the store.
  std::string Seal(std::string_view canonical) const;

  // A text that holds a literal secret (a pipeline body with a password in
  // it) as the graph file keeps it (after Recover): AES-256-GCM under a key
  // derived from DIR/KEY, as hex. Open gives the text back, or an error if
  // it was not sealed with this directory's key or was changed.
  std::string SealText(std::string_view text) const;
  Result<std::string> OpenText(std::string_view sealed) const;

  const std::string& dir() const { return dir_; }

 private:
  // Reads DIR/KEY, or (`create`) writes a new random one when there is none.
  Status LoadKey(bool create = true);
  struct Link {
    std::string chunk;
    uint64_t bytes = 0;
    uint32_t crc = 0;
  };
  struct Record {
    std::string fingerprint;
    Link full;                 // the whole state
    std::vector<Link> deltas;  // what changed after it, oldest first
  };
  struct Manifest {
    uint64_t id = 0;
    std::string region;
    int64_t created_ms = 0;
    std::map<std::string, Record> units;
    std::string file;
  };
  Result<Manifest> ReadManifest(const std::string& file);
  Status CheckChunk(const Link& r, ChunkBytes* data);
  // Every chunk `m` names, checked, into `data` by unit (its fingerprint,
  // full chunk and deltas; the id and region are left for the caller).
  Status ReadChunks(const Manifest& m, std::map<std::string, RestoredUnit>* data);
  // One unit's chunks, checked: its fingerprint, full chunk and deltas.
  Status ReadRecord(const Record& rec, RestoredUnit* u);
  // The error that stops a start: checkpoint `id` of `region` cannot be read.
  Status Unreadable(const std::string& region, uint64_t id, const Status& why) const;
  void CollectGarbage();

  const std::string dir_;
  std::string key_;  // set by Recover, then read only
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mu_;  // guards what follows, and orders commits
  // Kept manifests per region, newest last (at most two).
  std::map<std::string, std::vector<Manifest>> manifests_;
  // The newest committed record of each unit, for reuse when unchanged.
  std::map<std::string, Record> latest_;
};

// The chunk file name of `unit` at checkpoint `id`.
std::string ChunkName(uint64_t id, const std::string& unit);
std::string ManifestName(const std::string& region, uint64_t id);

}  // namespace kayak::checkpoint
