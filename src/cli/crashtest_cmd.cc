// `kayak crashtest CONFIG --input PIPELINE=FILE... [--kills N] [--seed S]
// [--dir DIR] [--no-commit-kills] [--json]`: the user's own graph on their
// recorded input, once without interruption and once with N kill -9s at
// random instants and then killed at each step of a commit, each run a kayak
// server of this binary with its own state directory; then the buckets and
// the outputs of the two are compared (docs/operations.md).
//
// The graph is run as written except at its edges, so that nothing reaches
// the user's systems and every run reads the same thing:
//   - each source pipeline named by --input reads FILE (a `file` input, to
//     its end); one not named keeps its input only if that is a `file`
//     input or a `dummy` with a `count` (finite and rewindable);
//   - every output, and every dead-letter output, becomes a `file` output
//     under DIR/<run>/out/<pipeline>.<place>.
// A run is done when every source pipeline has finished and a checkpoint
// taken after that has committed (every output then holds all it will).
//
// Exit: 0 the two runs agree; 1 they differ (the report says where) or a
// run failed; 2 usage or a config error.
#include "cli/crashtest_cmd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/config_file.h"
#include "common/json_util.h"
#include "components.h"
#include "config/loader.h"
#include "engine/engine.h"

namespace kayak {

namespace {

namespace fs = std::filesystem;
using JsonDoc = nlohmann::json;
constexpr int kSame = 0, kDiffers = 1, kUsage = 2;

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "kayak crashtest: %s\nusage: kayak crashtest CONFIG --input PIPELINE=FILE... "
               "[--kills N] [--seed S] [--feed-secs T] [--dir DIR] [--no-commit-kills] "
               "[--json]\n",
               problem.c_str());
  return kUsage;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One blocking HTTP/1.1 exchange with the server on 127.0.0.1:`port`;
// false when it cannot be had.
bool Call(int port, const std::string& method, const std::string& path, int* status,
          std::string* body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{120, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return false;
  }
  const std::string req = method + " " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
                          "Connection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return false;
  }
  std::string in;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) in.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t head = in.find("\r\n\r\n");
  if (in.rfind("HTTP/1.1 ", 0) != 0 || head == std::string::npos) return false;
  *status = std::atoi(in.c_str() + 9);
  *body = in.substr(head + 4);
  return true;
}

// A server of this binary on the rewritten config, in `dir`.
struct Child {
  pid_t pid = -1;
  int port = 0;
  std::string log;
};

// `crash_point`: a commit step (common/crash_point.h) the server kills
// itself at, the second time it reaches it; "" for none.
bool StartServer(const std::string& dir, const std::string& crash_point, Child* c,
                 std::string* error) {
  c->log = dir + "/server-" + std::to_string(NowMs()) + ".log";
  const pid_t pid = ::fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(127);
    if (!crash_point.empty()) ::setenv("KAYAK_CRASH_POINT", (crash_point + ":2").c_str(), 1);
    const int fd = ::open(c->log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(127);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const char* argv[] = {"kayak", "--config", "graph.yaml", "--state-dir", "state",
                          "--server-config", "server.yaml", nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  c->pid = pid;
  const int64_t deadline = NowMs() + 120000;
  const std::string mark = "API listening on http://127.0.0.1:";
  while (NowMs() < deadline) {
    std::ifstream f(c->log);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    if (const size_t at = text.find(mark); at != std::string::npos) {
      c->port = std::atoi(text.c_str() + at + mark.size());
      return true;
    }
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      *error = "the server exited before it served (its log: " + c->log + "):\n" + text;
      c->pid = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  *error = "the server did not serve within 120 s (its log: " + c->log + ")";
  return false;
}

void Kill(Child* c, int sig) {
  if (c->pid <= 0) return;
  ::kill(c->pid, sig);
  int st = 0;
  ::waitpid(c->pid, &st, 0);
  c->pid = -1;
}

// What one run left: each output file's lines, each bucket's entries.
struct RunResult {
  std::map<std::string, std::vector<std::string>> outputs;  // by output, sorted
  std::map<std::string, std::map<std::string, std::string>> buckets;  // name -> key -> value
  uint64_t messages = 0;
};

// Waits until every source pipeline finished (one fed by the run: its
// recorded input all written and read), takes a checkpoint, reads the
// buckets, and stops the server.
bool Finish(Child* c, const std::vector<std::string>& sources, const std::set<std::string>& fed,
            const std::atomic<bool>& fed_all, const std::vector<std::string>& buckets,
            RunResult* r, std::string* error) {
  const int64_t deadline = NowMs() + 30 * 60 * 1000;
  for (;;) {
    int status = 0;
    std::string body;
    if (NowMs() > deadline) {
      *error = "the graph did not finish reading its input within 30 minutes";
      return false;
    }
    if (Call(c->port, "GET", "/api/v1/pipelines", &status, &body) && status == 200) {
      JsonDoc j = JsonDoc::parse(body, nullptr, false);
      size_t finished = 0;
      for (const auto& p : j.value("pipelines", JsonDoc::array())) {
        const std::string id = p.value("id", "");
        if (std::find(sources.begin(), sources.end(), id) == sources.end()) continue;
        const std::string st = p.value("status", "");
        if (st == "failed") {
          *error = "pipeline " + id + " failed (its log: " + c->log + ")";
          return false;
        }
        if (!fed.count(id)) {
          if (st == "finished") ++finished;
          continue;
        }
        for (const auto& card : p.value("components", JsonDoc::array())) {
          if (card.value("name", "") == "input" && fed_all && card.contains("lag") &&
              card["lag"].value("value", -1) == 0) {
            ++finished;
          }
        }
      }
      if (finished == sources.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int status = 0;
  std::string body;
  if (!Call(c->port, "POST", "/api/v1/checkpoints", &status, &body) || status != 200) {
    *error = "the final checkpoint did not commit (" + std::to_string(status) + " " + body + ")";
    return false;
  }
  for (const auto& b : buckets) {
    std::string after;
    for (;;) {
      std::string path = "/api/v1/buckets/" + b + "?limit=1000";
      if (!after.empty()) {
        std::string enc;
        for (unsigned char ch : after) {
          char hex[4];
          std::snprintf(hex, sizeof hex, "%%%02X", ch);
          enc += std::isalnum(ch) ? std::string(1, static_cast<char>(ch)) : std::string(hex);
        }
        path += "&after=" + enc;
      }
      if (!Call(c->port, "GET", path, &status, &body) || status != 200) {
        *error = "bucket " + b + " could not be read (" + std::to_string(status) + ")";
        return false;
      }
      JsonDoc j = JsonDoc::parse(body, nullptr, false);
      for (const auto& e : j.value("entries", JsonDoc::array())) {
        r->buckets[b][e.value("key", "")] = DumpJson(e.value("value", JsonDoc()));
      }
      if (!j.contains("next_after") || !j["next_after"].is_string() ||
          j["next_after"].get<std::string>().empty()) {
        break;
      }
      after = j["next_after"].get<std::string>();
    }
  }
  Kill(c, SIGTERM);
  return true;
}

void ReadOutputs(const std::string& out_dir, RunResult* r) {
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(out_dir, ec)) {
    std::vector<std::string> parts;
    for (const auto& f : fs::directory_iterator(d.path(), ec)) parts.push_back(f.path());
    std::sort(parts.begin(), parts.end());
    const std::string name = d.path().filename();
    // A dead letter says when it was sent, the message's time (a file
    // input's is its arrival) and the input's position after its batch
    // (batches are cut as data comes): not part of what a run computed.
    const bool dead = name.size() > 5 && name.compare(name.size() - 5, 5, ".dead") == 0;
    auto& lines = r->outputs[name];
    for (const auto& part : parts) {
      std::ifstream in(part);
      for (std::string line; std::getline(in, line);) {
        if (dead) {
          JsonDoc j = JsonDoc::parse(line, nullptr, false);
          if (j.is_object()) {
            j.erase("at_ms");
            j.erase("ts_ms");
            j.erase("position");
            line = DumpJson(j);
          }
        }
        lines.push_back(line);
      }
    }
    r->messages += lines.size();
    std::sort(lines.begin(), lines.end());
  }
}

// Lines of `a` not in `b` (as multisets), at most `most`.
std::vector<std::string> Missing(const std::vector<std::string>& a,
                                 const std::vector<std::string>& b, size_t* count, size_t most) {
  std::vector<std::string> out;
  std::vector<std::string> diff;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(diff));
  *count = diff.size();
  for (size_t i = 0; i < diff.size() && i < most; ++i) out.push_back(diff[i]);
  return out;
}

}  // namespace

int CrashtestCommand(const std::vector<std::string>& args) {
  std::string config, dir;
  std::map<std::string, std::string> inputs;
  int kills = 5;
  bool commit_steps = true;
  int64_t feed_ms = 10000;
  uint64_t seed = static_cast<uint64_t>(NowMs());
  bool json = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= args.size()) return false;
      *out = args[++i];
      return true;
    };
    std::string v;
    if (a == "--json") {
      json = true;
    } else if (a == "--no-commit-kills") {
      commit_steps = false;
    } else if (a == "--input" && value(&v)) {
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) return Usage("--input takes PIPELINE=FILE");
      inputs[v.substr(0, eq)] = fs::absolute(v.substr(eq + 1));
    } else if (a == "--kills" && value(&v)) {
      kills = std::atoi(v.c_str());
      if (kills < 0 || kills > 1000) return Usage("--kills takes 0 to 1000");
    } else if (a == "--feed-secs" && value(&v)) {
      feed_ms = static_cast<int64_t>(std::atof(v.c_str()) * 1000);
      if (feed_ms < 0 || feed_ms > 3600 * 1000) return Usage("--feed-secs takes 0 to 3600");
    } else if (a == "--seed" && value(&v)) {
      seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (a == "--dir" && value(&v)) {
      dir = v;
    } else if (a.rfind("-", 0) == 0) {
      return Usage("unknown option '" + a + "' (or its value is missing)");
    } else if (config.empty()) {
      config = a;
    } else {
      return Usage("unexpected '" + a + "'");
    }
  }
  if (config.empty()) return Usage("give the config file");

  // The graph with its edges replaced (see the top of this file).
  YAML::Node root;
  try {
    root = YAML::LoadFile(config);
  } catch (const YAML::Exception& e) {
    std::fprintf(stderr, "kayak crashtest: %s: %s\n", config.c_str(), e.what());
    return kUsage;
  }
  if (GraphSpec spec; !LoadConfig(config, &spec)) return kUsage;
  if (dir.empty()) dir = fs::temp_directory_path() / ("kayak-crashtest-" + std::to_string(seed));
  dir = fs::absolute(dir);
  std::vector<std::string> sources, buckets;
  std::map<std::string, std::string> fed;  // pipeline -> its recorded input
  for (auto kv : root["buckets"]) buckets.push_back(kv.first.Scalar());
  for (auto kv : root["pipelines"]) {
    const std::string id = kv.first.Scalar();
    YAML::Node p = kv.second;
    const std::string type = p["input"].begin()->first.Scalar();
    if (type != "pipeline") {
      sources.push_back(id);
      if (auto it = inputs.find(id); it != inputs.end()) {
        // The run writes the recorded input into this file as it goes
        // (Feed), so that kills land while it is being read.
        YAML::Node in;
        in["file"]["path"] = "in/" + id + ".ndjson";
        in["file"]["follow"] = true;
        in["file"]["poll_ms"] = 20;
        p["input"] = in;
        fed[id] = it->second;
        inputs.erase(it);
      } else {
        YAML::Node opts = p["input"].begin()->second;
        if (type == "file" && opts.IsMap() && opts["path"] &&
            fs::path(opts["path"].as<std::string>()).is_relative()) {
          opts["path"] = fs::absolute(opts["path"].as<std::string>()).string();  // runs elsewhere
        }
        const bool finite = type == "file" || (type == "dummy" && opts.IsMap() && opts["count"]);
        if (!finite || (type == "file" && opts.IsMap() && opts["follow"] &&
                        opts["follow"].as<std::string>() == "true")) {
          return Usage("pipeline " + id + " reads " + type +
                       ": give its recorded input with --input " + id + "=FILE");
        }
      }
    }
    YAML::Node outs(YAML::NodeType::Sequence);
    size_t k = 0;
    for (auto o : p["outputs"]) {
      (void)o;
      YAML::Node f;
      f["file"]["path"] = "out/" + id + ".o" + std::to_string(k++);
      outs.push_back(f);
    }
    if (p["outputs"]) p["outputs"] = outs;
    if (p["dead_letter"]) {
      YAML::Node f;
      f["file"]["path"] = "out/" + id + ".dead";
      p["dead_letter"] = f;
    }
  }
  if (!inputs.empty()) return Usage("no source pipeline '" + inputs.begin()->first + "'");
  YAML::Emitter e;
  e << root;
  const std::string graph = e.c_str();

  std::mt19937_64 rng(seed);
  // The steps of a commit a server is killed at, after the random kills:
  // with the chunks written, before the manifest's rename, before and after
  // the directory's fsync (docs/durability.md).
  static const std::vector<std::string> kCommitSteps = {"after_chunks", "before_rename",
                                                       "before_dir_fsync", "after_dir_fsync"};
  struct Run {
    std::string name;
    int kills = 0;
    bool commit_steps = false;
    std::vector<int64_t> kill_after_ms;
    std::vector<std::string> commit_kills;  // the steps a server died at
    RunResult result;
    std::string error;
  };
  // The recorded inputs, line by line.
  std::map<std::string, std::vector<std::string>> recorded;
  std::set<std::string> fed_ids;
  for (const auto& [id, path] : fed) {
    std::ifstream in(path);
    if (!in) return Usage("cannot read " + path);
    for (std::string line; std::getline(in, line);) recorded[id].push_back(line + "\n");
    fed_ids.insert(id);
  }
  auto run = [&](Run* r) {
    const std::string d = dir + "/" + r->name;
    std::error_code ec;
    fs::remove_all(d, ec);
    fs::create_directories(d + "/in", ec);
    for (const auto& id : fed_ids) std::ofstream(d + "/in/" + id + ".ndjson");
    // Writes each recorded input into the run's file, evenly over
    // feed_ms, whatever the servers do meanwhile (a live source).
    std::atomic<bool> fed_all{fed_ids.empty()}, stop_feeding{false};
    std::thread feeder([&, d] {
      std::map<std::string, std::ofstream> files;
      std::map<std::string, size_t> done;
      for (const auto& id : fed_ids) files[id].open(d + "/in/" + id + ".ndjson", std::ios::app);
      const int64_t start = NowMs();
      for (bool more = !fed_ids.empty(); more && !stop_feeding;) {
        const double share = std::min(1.0, static_cast<double>(NowMs() - start) / feed_ms);
        more = share < 1.0;
        for (const auto& id : fed_ids) {
          const auto& lines = recorded[id];
          const size_t upto = share >= 1.0 ? lines.size() : static_cast<size_t>(share * lines.size());
          std::string chunk;
          for (size_t& i = done[id]; i < upto; ++i) chunk += lines[i];
          files[id] << chunk;
          files[id].flush();
        }
        if (more) std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
      fed_all = true;
    });
    struct Joiner {
      std::thread* t;
      std::atomic<bool>* stop;
      ~Joiner() {
        *stop = true;
        t->join();
      }
    } joiner{&feeder, &stop_feeding};
    std::ofstream(d + "/graph.yaml") << graph;
    std::ofstream(d + "/server.yaml") << "listen: 127.0.0.1:0\ncheckpoint: {interval_secs: 1}\n";
    std::uniform_int_distribution<int64_t> when(20, 2500);
    for (int i = 0; i <= r->kills; ++i) {
      // The random kills first, while the input is being fed; then the
      // commit steps; then the run to the end.
      if (i == r->kills && r->commit_steps) {
        for (const auto& step : kCommitSteps) {
          Child c;
          if (!StartServer(d, step, &c, &r->error)) return false;
          // It dies at the step at its second commit; one that does not
          // within 10 s (nothing left to commit) is killed from here.
          int st = 0;
          const int64_t until = NowMs() + 10000;
          pid_t done = 0;
          while (NowMs() < until && (done = ::waitpid(c.pid, &st, WNOHANG)) == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          if (done == c.pid) {
            c.pid = -1;
            r->commit_kills.push_back(step);
          } else {
            Kill(&c, SIGKILL);
          }
        }
      }
      Child c;
      if (!StartServer(d, "", &c, &r->error)) return false;
      if (i == r->kills) {
        const bool ok = Finish(&c, sources, fed_ids, fed_all, buckets, &r->result, &r->error);
        Kill(&c, SIGKILL);
        if (!ok) return false;
        break;
      }
      const int64_t wait = when(rng);
      r->kill_after_ms.push_back(wait);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait));
      Kill(&c, SIGKILL);
    }
    ReadOutputs(d + "/out", &r->result);
    return true;
  };
  Run straight{"uninterrupted", 0, false, {}, {}, {}, {}};
  Run killed{"killed", kills, commit_steps, {}, {}, {}, {}};
  if (!run(&straight) || !run(&killed)) {
    std::fprintf(stderr, "kayak crashtest: %s\n",
                 (straight.error.empty() ? killed.error : straight.error).c_str());
    return kDiffers;
  }

  // Compare.
  JsonDoc report;
  report["config"] = config;
  report["seed"] = seed;
  report["dir"] = dir;
  report["kills"] = kills;
  report["kill_after_ms"] = killed.kill_after_ms;
  report["killed_at_commit_steps"] = killed.commit_kills;
  report["messages"] = straight.result.messages;
  JsonDoc diffs = JsonDoc::array();
  std::set<std::string> names;
  for (const auto& [n, v] : straight.result.outputs) names.insert(n);
  for (const auto& [n, v] : killed.result.outputs) names.insert(n);
  for (const auto& n : names) {
    const auto& a = straight.result.outputs[n];
    const auto& b = killed.result.outputs[n];
    size_t lost = 0, extra = 0;
    auto lost_lines = Missing(a, b, &lost, 5);
    auto extra_lines = Missing(b, a, &extra, 5);
    if (lost == 0 && extra == 0) continue;
    diffs.push_back(JsonDoc{{"output", n},
                         {"lines_uninterrupted", a.size()},
                         {"lines_killed", b.size()},
                         {"missing_after_kills", lost},
                         {"extra_after_kills", extra},
                         {"missing_examples", lost_lines},
                         {"extra_examples", extra_lines}});
  }
  for (const auto& b : buckets) {
    const auto& x = straight.result.buckets[b];
    const auto& y = killed.result.buckets[b];
    size_t differ = 0;
    JsonDoc examples = JsonDoc::array();
    std::set<std::string> keys;
    for (const auto& [k, v] : x) keys.insert(k);
    for (const auto& [k, v] : y) keys.insert(k);
    for (const auto& k : keys) {
      auto i = x.find(k), j = y.find(k);
      const std::string va = i == x.end() ? "(none)" : i->second;
      const std::string vb = j == y.end() ? "(none)" : j->second;
      if (va == vb) continue;
      if (++differ <= 5) examples.push_back(JsonDoc{{"key", k}, {"uninterrupted", va}, {"killed", vb}});
    }
    if (differ > 0) {
      diffs.push_back(JsonDoc{{"bucket", b}, {"keys", x.size()}, {"keys_differing", differ},
                           {"examples", examples}});
    }
  }
  report["same"] = diffs.empty();
  report["differences"] = diffs;
  if (json) {
    std::printf("%s\n", DumpJson(report).c_str());
  } else {
    std::string waits;
    for (auto w : killed.kill_after_ms) waits += (waits.empty() ? "" : ", ") + std::to_string(w) + " ms";
    std::printf("kayak crashtest %s\n  seed %llu (run again with --seed %llu)\n  runs in %s\n",
                config.c_str(), static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(seed), dir.c_str());
    std::printf("  uninterrupted: %llu output lines, %zu buckets\n",
                static_cast<unsigned long long>(straight.result.messages), buckets.size());
    std::string steps;
    for (const auto& st : killed.commit_kills) steps += (steps.empty() ? "" : ", ") + st;
    std::printf("  with %d kill -9s (after %s of each start) and %zu at commit steps (%s): %llu "
                "output lines\n",
                kills, waits.empty() ? "none" : waits.c_str(), killed.commit_kills.size(),
                steps.empty() ? "none" : steps.c_str(),
                static_cast<unsigned long long>(killed.result.messages));
    for (const auto& d : diffs) {
      if (d.contains("output")) {
        std::printf("  DIFFERS output %s: %zu lines missing after the kills, %zu extra\n",
                    d["output"].get<std::string>().c_str(), d["missing_after_kills"].get<size_t>(),
                    d["extra_after_kills"].get<size_t>());
        for (const auto& l : d["missing_examples"]) std::printf("    missing: %s\n", l.get<std::string>().c_str());
        for (const auto& l : d["extra_examples"]) std::printf("    extra:   %s\n", l.get<std::string>().c_str());
      } else {
        std::printf("  DIFFERS bucket %s: %zu of its keys\n", d["bucket"].get<std::string>().c_str(),
                    d["keys_differing"].get<size_t>());
        for (const auto& x : d["examples"]) {
          std::printf("    key %s: %s uninterrupted, %s after the kills\n",
                      x["key"].get<std::string>().c_str(), x["uninterrupted"].get<std::string>().c_str(),
                      x["killed"].get<std::string>().c_str());
        }
      }
    }
    std::printf(diffs.empty() ? "  same: every output line and every bucket entry agree\n"
                              : "  the runs differ (see above)\n");
  }
  return diffs.empty() ? kSame : kDiffers;
}

}  // namespace kayak
