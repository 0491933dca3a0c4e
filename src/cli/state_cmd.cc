// `kayak state DIR [ls|verify|show BUCKET [KEY]|export BUCKET|drop REGION
// [--yes]] [--json] [--force-read]`: a state directory read offline, without
// changing it, or a region's state dropped (docs/operations.md).
//
//   ls      its regions' checkpoints (id, age, units, bytes), each unit's
//           chunk and delta chain, and the files no checkpoint names
//   verify  every manifest and every chunk they name checked (frame,
//           CRC-32C, size and CRC against the manifest); exit 1 with each
//           fault's file and where in it
//   show    a bucket as its newest checkpoint holds it: its size and first
//           entries, or one key's entry
//   export  every entry of a bucket, one JSON object a line, in key order
//   drop    a region's checkpoints removed, as --discard-state does at a
//           start, after the region's name is typed (or --yes); it takes
//           the lock as a server does
//
// The reading commands take the directory's lock shared, so a server cannot
// start on the directory while they read, and they refuse a running
// server's unless --force-read: it writes and removes files under them.
#include "cli/state_cmd.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/store.h"
#include "cli/state_dir.h"
#include "common/human.h"
#include "common/json_util.h"
#include "state/bucket.h"

namespace kayak {

namespace {

constexpr int kOk = 0, kFault = 1, kUsage = 2;

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "kayak state: %s\nusage: kayak state DIR [ls | verify | show BUCKET [KEY] | "
               "export BUCKET | drop REGION [--yes]] [--json] [--force-read]\n",
               problem.c_str());
  return kUsage;
}

std::string Size(uint64_t bytes) { return HumanBytes(bytes); }

std::string Age(int64_t created_ms, int64_t now_ms) {
  if (created_ms <= 0) return "age unknown";
  const int64_t s = (now_ms - created_ms) / 1000;
  if (s < 120) return std::to_string(s) + " s ago";
  if (s < 7200) return std::to_string(s / 60) + " min ago";
  if (s < 172800) return std::to_string(s / 3600) + " h ago";
  return std::to_string(s / 86400) + " days ago";
}

uint64_t UnitBytes(const checkpoint::Inventory::Unit& u) {
  uint64_t n = u.full.bytes;
  for (const auto& d : u.deltas) n += d.bytes;
  return n;
}

}  // namespace

// The lock a server takes exclusively, taken shared. Held until exit.
int LockShared(const std::string& dir, bool force, std::string* error) {
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return kOk;  // no server ever ran on it
    *error = path + ": " + std::strerror(errno);
    return kFault;
  }
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) return kOk;  // kept: released at exit
  const int err = errno;
  char buf[32] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  ::close(fd);
  if (err != EWOULDBLOCK) {
    *error = "cannot lock " + path + ": " + std::strerror(err);
    return kFault;
  }
  if (force) return kOk;
  const long pid = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
  *error = "a server is running on " + dir +
           (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) +
           " and changes it while it runs; stop it, or read anyway with --force-read";
  return kFault;
}

namespace {

nlohmann::json ToJson(const checkpoint::Inventory& inv, const std::string& dir, bool verify) {
  nlohmann::json j;
  j["dir"] = dir;
  j["checkpoints"] = nlohmann::json::array();
  for (const auto& c : inv.checkpoints) {
    nlohmann::json units = nlohmann::json::array();
    for (const auto& u : c.units) {
      nlohmann::json deltas = nlohmann::json::array();
      for (const auto& d : u.deltas) deltas.push_back({{"file", d.file}, {"bytes", d.bytes}});
      units.push_back({{"unit", u.unit},
                       {"chunk", {{"file", u.full.file}, {"bytes", u.full.bytes}}},
                       {"deltas", deltas},
                       {"bytes", UnitBytes(u)}});
    }
    j["checkpoints"].push_back({{"region", c.region},
                                {"id", c.id},
                                {"created_ms", c.created_ms},
                                {"manifest", c.file},
                                {"units", units}});
  }
  j["unreferenced"] = nlohmann::json::array();
  for (const auto& [file, bytes] : inv.unreferenced) {
    j["unreferenced"].push_back({{"file", file}, {"bytes", bytes}});
  }
  if (verify) {
    j["chunks_checked"] = inv.chunks_checked;
    j["faults"] = inv.faults;
    j["ok"] = inv.faults.empty();
  }
  return j;
}

void PrintList(const checkpoint::Inventory& inv, const std::string& dir, int64_t now_ms) {
  std::set<std::string> regions;
  for (const auto& c : inv.checkpoints) regions.insert(c.region);
  std::printf("%s: %zu regions, %zu checkpoints, %zu unreferenced files\n", dir.c_str(),
              regions.size(), inv.checkpoints.size(), inv.unreferenced.size());
  std::string last_region;
  for (const auto& c : inv.checkpoints) {
    if (c.region != last_region) {
      std::printf("region %s\n", c.region.c_str());
      last_region = c.region;
    }
    uint64_t bytes = 0;
    for (const auto& u : c.units) bytes += UnitBytes(u);
    std::printf("  checkpoint %llu  %s  %zu units  %s  %s\n",
                static_cast<unsigned long long>(c.id), Age(c.created_ms, now_ms).c_str(),
                c.units.size(), Size(bytes).c_str(), c.file.c_str());
    for (const auto& u : c.units) {
      std::string deltas;
      if (!u.deltas.empty()) {
        uint64_t d = 0;
        for (const auto& x : u.deltas) d += x.bytes;
        deltas = " + " + std::to_string(u.deltas.size()) + " deltas of " + Size(d);
      }
      std::printf("    %-28s %s%s  %s\n", u.unit.c_str(), Size(u.full.bytes).c_str(),
                  deltas.c_str(), u.full.file.c_str());
    }
  }
  for (const auto& [file, bytes] : inv.unreferenced) {
    std::printf("unreferenced %s (%s): left by a checkpoint that did not commit; the next start "
                "removes it\n",
                file.c_str(), Size(bytes).c_str());
  }
}

// {"key":...,"value":...,"last_write_ms":...}, as the API answers for a key.
std::string EntryJson(const std::string& key, const Bucket::Entry& e) {
  return "{\"key\":" + nlohmann::json(key).dump() + ",\"value\":" + DumpJson(e.value) +
         ",\"last_write_ms\":" + std::to_string(e.last_write_ms) + "}";
}

// The bucket `name` as the newest checkpoint holding it has it (its full
// chunk and deltas applied, nothing expired).
int LoadBucket(checkpoint::Store* store, const checkpoint::Inventory& inv,
               const std::string& name, std::unique_ptr<Bucket>* out, std::string* where) {
  const std::string unit = "b." + name;
  const checkpoint::Inventory::Checkpoint* newest = nullptr;
  std::set<std::string> buckets;
  for (const auto& c : inv.checkpoints) {
    for (const auto& u : c.units) {
      if (u.unit.rfind("b.", 0) == 0) buckets.insert(u.unit.substr(2));
      if (u.unit == unit && (newest == nullptr || c.id > newest->id)) newest = &c;
    }
  }
  if (newest == nullptr) {
    std::string known;
    for (const auto& b : buckets) known += (known.empty() ? "" : ", ") + b;
    std::fprintf(stderr, "kayak state: no checkpoint holds bucket '%s' (buckets: %s)\n",
                 name.c_str(), known.empty() ? "none" : known.c_str());
    return kFault;
  }
  checkpoint::RestoredUnit u;
  Status st = store->ReadUnit(newest->file, unit, &u);
  auto bucket = std::make_unique<Bucket>(name, 0);  // offline: nothing expires
  if (st.ok()) st = bucket->RestoreState(u.data);
  for (size_t i = 0; st.ok() && i < u.deltas.size(); ++i) st = bucket->ApplyDelta(u.deltas[i]);
  if (!st.ok()) {
    std::fprintf(stderr, "kayak state: bucket '%s' cannot be read: %s\n", name.c_str(),
                 st.message().c_str());
    return kFault;
  }
  *where = "checkpoint " + std::to_string(newest->id) + " of region " + newest->region;
  *out = std::move(bucket);
  return kOk;
}

int Show(checkpoint::Store* store, const checkpoint::Inventory& inv,
         const std::vector<std::string>& rest, bool json) {
  std::unique_ptr<Bucket> bucket;
  std::string where;
  if (int rc = LoadBucket(store, inv, rest[0], &bucket, &where); rc != kOk) return rc;
  if (rest.size() == 2) {
    auto e = bucket->Get(rest[1], 0);
    if (!e) {
      std::fprintf(stderr, "kayak state: bucket '%s' has no key '%s' (%s)\n", rest[0].c_str(),
                   rest[1].c_str(), where.c_str());
      return kFault;
    }
    std::printf("%s\n", EntryJson(rest[1], *e).c_str());
    return kOk;
  }
  constexpr size_t kShown = 20;
  const auto page = bucket->Page("", kShown, 0);
  if (json) {
    std::string out = "{\"bucket\":" + nlohmann::json(rest[0]).dump() +
                      ",\"keys\":" + std::to_string(bucket->Size()) +
                      ",\"from\":" + nlohmann::json(where).dump() + ",\"first\":[";
    for (size_t i = 0; i < page.size(); ++i) {
      out += (i ? "," : "") + EntryJson(page[i].first, page[i].second);
    }
    std::printf("%s]}\n", out.c_str());
    return kOk;
  }
  std::printf("bucket %s: %zu keys (%s)\n", rest[0].c_str(), bucket->Size(), where.c_str());
  for (const auto& [key, e] : page) std::printf("%s\n", EntryJson(key, e).c_str());
  if (bucket->Size() > page.size()) {
    std::printf("... %zu more (export gives them all)\n", bucket->Size() - page.size());
  }
  return kOk;
}

int Export(checkpoint::Store* store, const checkpoint::Inventory& inv, const std::string& name) {
  std::unique_ptr<Bucket> bucket;
  std::string where;
  if (int rc = LoadBucket(store, inv, name, &bucket, &where); rc != kOk) return rc;
  for (const auto& [key, e] : bucket->Page("", bucket->Size(), 0)) {
    const std::string line = EntryJson(key, e) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return std::fflush(stdout) == 0 ? kOk : kFault;
}

int Drop(const std::string& dir, const std::string& region, bool yes) {
  StateDirLock lock;
  long holder = 0;
  std::string error;
  switch (lock.Acquire(dir, &holder, &error)) {
    case StateDirLock::Outcome::kLocked:
      break;
    case StateDirLock::Outcome::kHeldByOther:
      std::fprintf(stderr,
                   "kayak state: a server is running on %s (pid %ld); stop it before dropping "
                   "a region\n",
                   dir.c_str(), holder);
      return kFault;
    default:
      std::fprintf(stderr, "kayak state: %s\n", error.c_str());
      return kFault;
  }
  checkpoint::Store store(dir);
  checkpoint::Inventory inv;
  if (Status s = store.Inspect(false, &inv); !s.ok()) {
    std::fprintf(stderr, "kayak state: %s\n", s.message().c_str());
    return kFault;
  }
  std::set<std::string> regions, units;
  uint64_t newest = 0;
  for (const auto& c : inv.checkpoints) {
    regions.insert(c.region);
    if (c.region != region) continue;
    newest = std::max(newest, c.id);
    for (const auto& u : c.units) units.insert(u.unit);
  }
  if (!regions.count(region)) {
    std::string known;
    for (const auto& r : regions) known += (known.empty() ? "" : ", ") + r;
    std::fprintf(stderr, "kayak state: %s holds no checkpoint of region '%s' (regions: %s)\n",
                 dir.c_str(), region.c_str(), known.empty() ? "none" : known.c_str());
    return kFault;
  }
  std::string unit_list;
  for (const auto& u : units) unit_list += (unit_list.empty() ? "" : ", ") + u;
  if (!yes) {
    std::printf("drop region %s: its checkpoints up to %llu and the state of %s. The region "
                "starts empty and its inputs start from their configured beginning.\n"
                "Type the region's name to drop it: ",
                region.c_str(), static_cast<unsigned long long>(newest), unit_list.c_str());
    std::fflush(stdout);
    char line[512] = {0};
    const bool got = std::fgets(line, sizeof line, stdin) != nullptr;
    std::string typed = got ? line : "";
    while (!typed.empty() && (typed.back() == '\n' || typed.back() == '\r')) typed.pop_back();
    if (typed != region) {
      std::fprintf(stderr, "kayak state: not confirmed; nothing dropped\n");
      return kFault;
    }
  }
  std::vector<std::string> removed;
  if (Status s = store.DropRegion(region, &removed); !s.ok()) {
    std::fprintf(stderr, "kayak state: %s\n", s.message().c_str());
    return kFault;
  }
  for (const auto& f : removed) std::printf("removed %s\n", f.c_str());
  std::printf("dropped region %s (%zu checkpoints); its chunks go at the next start\n",
              region.c_str(), removed.size());
  return kOk;
}

}  // namespace

int StateCommand(const std::vector<std::string>& args) {
  std::string dir, command;
  std::vector<std::string> rest;  // a command's own arguments
  bool json = false, force = false, yes = false;
  for (const auto& a : args) {
    if (a == "--json") {
      json = true;
    } else if (a == "--yes") {
      yes = true;
    } else if (a == "--force-read") {
      force = true;
    } else if (a.rfind("-", 0) == 0) {
      return Usage("unknown option '" + a + "'");
    } else if (dir.empty()) {
      dir = a;
    } else if (command.empty()) {
      command = a;
    } else {
      rest.push_back(a);
    }
  }
  if (dir.empty()) return Usage("give the state directory");
  if (command.empty()) command = "ls";
  if (command != "ls" && command != "verify" && command != "show" && command != "export" &&
      command != "drop") {
    return Usage("no command '" + command + "'");
  }
  const bool named = command == "show" || command == "export" || command == "drop";
  const size_t most = command == "show" ? 2 : named ? 1 : 0;
  if (named && rest.empty()) {
    return Usage(command + (command == "drop" ? " needs a region's name" : " needs a bucket's name"));
  }
  if (rest.size() > most) return Usage("unexpected '" + rest[most] + "'");
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "kayak state: %s is not a directory\n", dir.c_str());
    return kFault;
  }
  if (command == "drop") return Drop(dir, rest[0], yes);
  std::string error;
  if (LockShared(dir, force, &error) != kOk) {
    std::fprintf(stderr, "kayak state: %s\n", error.c_str());
    return kFault;
  }
  const bool verify = command == "verify";
  checkpoint::Inventory inv;
  checkpoint::Store store(dir);
  if (Status s = store.Inspect(verify, &inv); !s.ok()) {
    std::fprintf(stderr, "kayak state: %s\n", s.message().c_str());
    return kFault;
  }
  if (command == "show") return Show(&store, inv, rest, json);
  if (command == "export") return Export(&store, inv, rest[0]);
  if (json) {
    std::printf("%s\n", ToJson(inv, dir, verify).dump(2).c_str());
  } else if (!verify) {
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    PrintList(inv, dir, now_ms);
  } else if (inv.faults.empty()) {
    std::printf("%s: %zu checkpoints and %llu chunks verified: every checksum matches\n",
                dir.c_str(), inv.checkpoints.size(),
                static_cast<unsigned long long>(inv.chunks_checked));
  } else {
    for (const auto& f : inv.faults) std::printf("fault: %s\n", f.c_str());
    std::printf("%s: %zu faults in %zu checkpoints and %llu chunks\n", dir.c_str(),
                inv.faults.size(), inv.checkpoints.size(),
                static_cast<unsigned long long>(inv.chunks_checked));
  }
  return verify && !inv.faults.empty() ? kFault : kOk;
}

}  // namespace kayak
