// kayak's in-memory bucket against RocksDB as the store of a bucket's keys,
// on the same keys and the same operations (docs/decisions/0004-state-backend.md):
//
//   load     N keys written once by `op: add` (a read, an add, a write)
//   update   N more adds over random keys already there
//   full     the first checkpoint: every key
//   1%       a checkpoint after 1% of the keys changed
//   restore  the state read back at start
//   memory   heap bytes in use a key (glibc's mallinfo2)
//
// kayak: Bucket::Update; a checkpoint seals the bucket and encodes the changes
// (Bucket::Compact for the full chunk, Bucket::EncodeDelta for the 1%); a
// restore is Bucket::RestoreState of the full chunk.
// RocksDB, as Flink's RocksDB state backend uses it: no write-ahead log
// (the checkpoint is the durability), Get + Put for an add; a checkpoint
// flushes the memtable and hard-links the table files into a directory
// (rocksdb::Checkpoint), and what it writes is the table files not in the
// checkpoint before it (flushed or compacted since: Flink's incremental
// checkpoints upload just those); a restore opens a copy of the checkpoint.
//
//   state_backends [--keys N] [--rounds R] [--dir DIR]
//
// Prints each round and a table of medians.
#include <malloc.h>
#include <rocksdb/db.h>
#include <rocksdb/utilities/checkpoint.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "state/bucket.h"

namespace fs = std::filesystem;

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
size_t HeapInUse() {
  const auto m = mallinfo2();
  return m.uordblks + m.hblkhd;  // small chunks and mmapped ones (a big table, a vector)
}
std::string Key(uint64_t i) { return "key-" + std::to_string(i); }

struct Figures {
  double load_us = 0, update_us = 0;     // a key's add
  double full_ms = 0, full_bytes = 0;    // first checkpoint
  double delta_ms = 0, delta_bytes = 0;  // after 1% changed
  double restore_ms = 0;
  double bytes_per_key = 0;
};

// The adds of the update phase: the same keys for both stores.
std::vector<uint64_t> UpdateKeys(uint64_t n, uint64_t count, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out(count);
  for (auto& k : out) k = rng() % n;
  return out;
}

Figures RunKayak(uint64_t n) {
  Figures f;
  const size_t heap0 = HeapInUse();
  auto b = std::make_unique<kayak::Bucket>("b", 0);
  b->TrackChanges();
  int64_t now = 1000;
  auto add = [&](uint64_t k) {
    (void)b->Update(Key(k), ++now, [](kayak::Json& v, bool existed) {
      v = (existed ? v.get<double>() : 0.0) + 1.5;
      return kayak::Status::Ok();
    });
  };
  double t0 = Seconds();
  for (uint64_t i = 0; i < n; ++i) add(i);
  f.load_us = (Seconds() - t0) * 1e6 / static_cast<double>(n);
  f.bytes_per_key = static_cast<double>(HeapInUse() - heap0) / static_cast<double>(n);
  // The first checkpoint: every key, compacted into a full chunk.
  t0 = Seconds();
  std::vector<std::vector<kayak::Bucket::Change>> changes(1);
  b->Seal();
  b->CollectSealed(&changes[0]);
  std::string full;
  (void)kayak::Bucket::Compact({}, {}, changes, &full);
  f.full_ms = (Seconds() - t0) * 1e3;
  f.full_bytes = static_cast<double>(full.size());
  changes.clear();
  // 1% of the keys changed: a delta.
  for (uint64_t k : UpdateKeys(n, n / 100, 1)) add(k);
  t0 = Seconds();
  changes.assign(1, {});
  b->Seal();
  b->CollectSealed(&changes[0]);
  std::string delta;
  kayak::Bucket::EncodeDelta(changes, &delta);
  f.delta_ms = (Seconds() - t0) * 1e3;
  f.delta_bytes = static_cast<double>(delta.size());
  // Adds over keys already there.
  const auto keys = UpdateKeys(n, n, 2);
  t0 = Seconds();
  for (uint64_t k : keys) add(k);
  f.update_us = (Seconds() - t0) * 1e6 / static_cast<double>(keys.size());
  b.reset();
  kayak::Bucket r("r", 0);
  t0 = Seconds();
  (void)r.RestoreState(full);
  f.restore_ms = (Seconds() - t0) * 1e3;
  return f;
}

uint64_t NewTableBytes(const fs::path& dir, std::set<std::string>* seen) {
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    const bool table = name.size() > 4 && name.substr(name.size() - 4) == ".sst";
    if (table && !seen->insert(name).second) continue;  // shared with the checkpoint before
    bytes += e.file_size();
  }
  return bytes;
}

Figures RunRocks(uint64_t n, const fs::path& work) {
  Figures f;
  fs::remove_all(work);
  fs::create_directories(work);
  const size_t heap0 = HeapInUse();
  rocksdb::Options opt;
  opt.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::Open(opt, (work / "db").string(), &raw).ok()) {
    std::fprintf(stderr, "rocksdb: cannot open %s\n", (work / "db").c_str());
    std::exit(1);
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  rocksdb::ReadOptions ro;
  int64_t now = 1000;
  std::string got, value;
  auto add = [&](uint64_t k) {
    const std::string key = Key(k);
    double v = 0;
    if (db->Get(ro, key, &got).ok() && got.size() > 8) {
      std::from_chars(got.data() + 8, got.data() + got.size(), v);
    }
    v += 1.5;
    char buf[64];
    const int64_t ts = ++now;
    std::memcpy(buf, &ts, 8);  // the last write, as a chunk keeps it
    const auto end = std::to_chars(buf + 8, buf + sizeof buf, v).ptr;
    value.assign(buf, end);
    (void)db->Put(wo, key, value);
  };
  std::set<std::string> seen;
  int checkpoints = 0;
  auto checkpoint = [&](double* ms, double* bytes) {
    const double t0 = Seconds();
    (void)db->Flush(rocksdb::FlushOptions());
    rocksdb::Checkpoint* cp = nullptr;
    (void)rocksdb::Checkpoint::Create(db.get(), &cp);
    const fs::path dir = work / ("cp" + std::to_string(++checkpoints));
    (void)cp->CreateCheckpoint(dir.string());
    delete cp;
    *ms = (Seconds() - t0) * 1e3;
    *bytes = static_cast<double>(NewTableBytes(dir, &seen));
    return dir;
  };
  double t0 = Seconds();
  for (uint64_t i = 0; i < n; ++i) add(i);
  f.load_us = (Seconds() - t0) * 1e6 / static_cast<double>(n);
  const fs::path first = checkpoint(&f.full_ms, &f.full_bytes);
  f.bytes_per_key = static_cast<double>(HeapInUse() - heap0) / static_cast<double>(n);
  for (uint64_t k : UpdateKeys(n, n / 100, 1)) add(k);
  checkpoint(&f.delta_ms, &f.delta_bytes);
  const auto keys = UpdateKeys(n, n, 2);
  t0 = Seconds();
  for (uint64_t k : keys) add(k);
  f.update_us = (Seconds() - t0) * 1e6 / static_cast<double>(keys.size());
  db.reset();
  // Restore: the checkpoint's files copied into place, then opened.
  t0 = Seconds();
  fs::copy(first, work / "restored", fs::copy_options::recursive);
  rocksdb::Options ropt;
  if (!rocksdb::DB::Open(ropt, (work / "restored").string(), &raw).ok()) {
    std::fprintf(stderr, "rocksdb: cannot open the restored copy\n");
    std::exit(1);
  }
  f.restore_ms = (Seconds() - t0) * 1e3;
  delete raw;
  fs::remove_all(work);
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t n = 1'000'000;
  int rounds = 3;
  fs::path dir = fs::temp_directory_path() / "kayak-state-backends";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--keys") n = std::stoull(argv[i + 1]);
    if (a == "--rounds") rounds = std::stoi(argv[i + 1]);
    if (a == "--dir") dir = argv[i + 1];
  }
  std::map<std::string, std::vector<Figures>> runs;
  for (int r = 0; r < rounds; ++r) {
    for (const char* which : {"kayak", "rocksdb"}) {
      Figures f = std::string(which) == "kayak" ? RunKayak(n) : RunRocks(n, dir);
      std::printf(
          "round %d %s: load %.2f us/key, update %.2f us, full %.0f ms %.0f B, 1%% %.0f ms %.0f B, "
          "restore %.0f ms, %.0f B/key\n",
          r + 1, which, f.load_us, f.update_us, f.full_ms, f.full_bytes, f.delta_ms,
          f.delta_bytes, f.restore_ms, f.bytes_per_key);
      std::fflush(stdout);
      runs[which].push_back(f);
    }
  }
  auto med = [&](const std::string& w, double Figures::*m) {
    std::vector<double> v;
    for (const auto& f : runs[w]) v.push_back(f.*m);
    return Median(v);
  };
  const std::pair<const char*, double Figures::*> rows[] = {
      {"add, a new key (us)", &Figures::load_us},
      {"add, a key already there (us)", &Figures::update_us},
      {"first checkpoint, every key (ms)", &Figures::full_ms},
      {"first checkpoint (bytes)", &Figures::full_bytes},
      {"checkpoint after 1% changed (ms)", &Figures::delta_ms},
      {"checkpoint after 1% changed (bytes)", &Figures::delta_bytes},
      {"restore (ms)", &Figures::restore_ms},
      {"heap bytes a key", &Figures::bytes_per_key},
  };
  std::printf("\n%llu keys, medians of %d rounds\n\n| | kayak bucket | RocksDB 7.8 | RocksDB / kayak |\n|---|---|---|---|\n",
              static_cast<unsigned long long>(n), rounds);
  for (const auto& [label, m] : rows) {
    const double k = med("kayak", m), r = med("rocksdb", m);
    std::printf("| %s | %.2f | %.2f | %.2f |\n", label, k, r, k > 0 ? r / k : 0.0);
  }
  return 0;
}
