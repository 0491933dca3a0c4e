// kayak: the command line (SPEC section 1).
//
//   kayak --config FILE [--state-dir DIR [--discard-state REGION]...] [--server-config FILE]
//   kayak check FILE [--server-config FILE]
//   kayak tool TYPE ARGS...   (a component's helper: `kayak tool opcua ...`)
//   kayak --version
//
// Exit codes: 0 clean shutdown, 1 runtime failure, 2 bad command line or
// config, 3 state directory locked by another server.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cctype>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "common/format.h"
#include "common/host_port.h"
#include "cli/config_file.h"
#include "cli/crashtest_cmd.h"
#include "cli/plan_cmd.h"
#include "cli/state_cmd.h"
#include "cli/state_dir.h"
#include "cluster/membership.h"
#include "common/log.h"
#include "components.h"
#include "config/loader.h"
#include "connectors/s3/blobs.h"
#include "config/server_config.h"
#include "engine/engine.h"
#include "engine/graph_manager.h"
#include "server/api.h"
#include "kayak/version.h"
#include "kayak/thread_annotations.h"

namespace kayak {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitLocked = 3;

const char* kUsage =
    "usage:\n"
    "  kayak --config FILE [--state-dir DIR [--discard-state REGION]...] [--server-config FILE]\n"
    "  kayak check FILE [--server-config FILE]\n"
    "  kayak tool TYPE ARGS...   (kayak tool, alone, lists them)\n"
    "  kayak state DIR [ls | verify | show BUCKET [KEY] | export BUCKET | drop REGION [--yes]]\n"
    "                  [--json] [--force-read]\n"
    "  kayak plan NEW.yaml --state-dir DIR [--json] [--force-read]\n"
    "  kayak crashtest CONFIG --input PIPELINE=FILE... [--kills N] [--seed S] [--dir DIR]\n"
    "                  [--json]\n"
    "  kayak --version\n";

int Usage(const std::string& problem) {
  std::fprintf(stderr, "kayak: %s\n%s", problem.c_str(), kUsage);
  return kExitUsage;
}

struct Args {
  std::string config, state_dir, server_config, check_file;
  std::set<std::string> discard_state;  // --discard-state REGION, repeatable
  bool check = false, version = false, help = false;
};

// Parses argv; returns false (with `problem`) on a bad command line.
bool ParseArgs(int argc, char** argv, Args* a, std::string* problem) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0) {
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_value = true;
      }
    }
    auto take = [&](std::string* slot) {
      if (!slot->empty()) {
        *problem = arg + " given twice";
        return false;
      }
      if (!has_value) {
        if (i + 1 >= argc) {
          *problem = arg + " needs a value";
          return false;
        }
        value = argv[++i];
      }
      if (value.empty()) {
        *problem = arg + " needs a non-empty value";
        return false;
      }
      *slot = value;
      return true;
    };
    if (arg == "--config" || arg == "-c") {
      if (!take(&a->config)) return false;
    } else if (arg == "--state-dir") {
      if (!take(&a->state_dir)) return false;
    } else if (arg == "--server-config") {
      if (!take(&a->server_config)) return false;
    } else if (arg == "--discard-state") {
      std::string region;
      if (!take(&region)) return false;
      a->discard_state.insert(region);
    } else if (arg == "--version" && !has_value) {
      a->version = true;
    } else if ((arg == "--help" || arg == "-h") && !has_value) {
      a->help = true;
    } else if (arg == "check" && i == 1) {
      a->check = true;
    } else if (a->check && a->check_file.empty() && arg.rfind("-", 0) != 0) {
      a->check_file = arg;
    } else {
      *problem = "unknown argument '" + std::string(argv[i]) + "'";
      return false;
    }
  }
  if (a->version || a->help) return true;
  if (a->check) {
    if (a->check_file.empty()) a->check_file = a->config;
    if (a->check_file.empty()) {
      *problem = "check needs a config file";
      return false;
    }
    return true;
  }
  if (a->config.empty()) {
    *problem = "--config is required";
    return false;
  }
  if (!a->discard_state.empty() && a->state_dir.empty()) {
    *problem = "--discard-state needs --state-dir";
    return false;
  }
  return true;
}

// The cluster a server config's `cluster:` block names (its store not
// opened yet).
cluster::ClusterConfig ClusterOf(const ServerConfig& server) {
  cluster::ClusterConfig c;
  c.name = server.cluster_name;
  c.member = server.cluster_member;
  c.store = server.cluster_store;
  cluster::ParsePartitioner(server.cluster_partitioner, &c.partitioner);
  return c;
}

bool LoadServerConfig(const std::string& path, ServerConfig* server) {
  if (path.empty()) return true;
  ErrorList errors;
  if (LoadServerConfigFile(path, server, &errors)) return true;
  std::fputs(errors.ToString().c_str(), stderr);
  return false;
}

// With a server config that has `cluster:`, the graph is held to the
// cluster's rules too, as a member of it would hold it at start.
int Check(const std::string& path, const std::string& server_config) {
  ServerConfig server;
  if (!LoadServerConfig(server_config, &server)) return kExitUsage;
  std::optional<cluster::ClusterConfig> cluster;
  if (!server.cluster_name.empty()) cluster = ClusterOf(server);
  GraphSpec spec;
  if (!LoadConfig(path, &spec, true, cluster ? &*cluster : nullptr)) return kExitUsage;
  std::printf("%s: ok (%zu pipelines, %zu buckets%s)\n", path.c_str(), spec.pipelines.size(),
              spec.buckets.size(),
              cluster ? (", fit for cluster " + cluster->name).c_str() : "");
  return kExitOk;
}

int Serve(const Args& args) {
  // Signals are taken by one thread with sigwait; every thread started
  // below inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  // A stop is honoured at any time. Before the graph serves (reading the
  // config, restoring state, building thousands of pipelines) nothing has
  // run that a stop must drain: the process exits at once, which is as safe
  // for the state directory as a kill. From then on the first signal stops
  // gracefully and a second exits at once. What the signal thread touches
  // after it said the stop outlives this function (static): the thread
  // waits for a second signal while the process exits.
  static Mutex stop_mu;
  static std::condition_variable stop_cv;
  static int stop_signal KAYAK_GUARDED_BY(stop_mu) = 0;
  std::atomic<bool> serving{false};
  std::atomic<GraphManager*> starting{nullptr};  // the graph, while Start may run
  // SIGHUP loads the listener's certificate again; it stops nothing.
  static Mutex reload_mu;
  static http::Server* reloadable KAYAK_GUARDED_BY(reload_mu) = nullptr;
  std::thread([&, sigs] {
    sigset_t s = sigs;
    int sig = 0;
    // The next stop signal; SIGHUPs on the way are reloads.
    auto next_stop = [&]() {
      while (sigwait(&s, &sig) == 0) {
        if (sig != SIGHUP) return true;
        MutexLock lock(reload_mu);
        if (reloadable != nullptr) {
          KLOG_INFO("received SIGHUP, loading the listener's certificate again");
          reloadable->ReloadTls();
        }
      }
      return false;
    };
    if (!next_stop()) return;
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (!serving.load()) {
      std::fprintf(stderr, "kayak: %s while starting; nothing ran yet, exiting\n", name);
      std::_Exit(kExitOk);
    }
    KLOG_INFO("received {}, stopping gracefully (send it again to exit at once)", name);
    // Before the stop is said: the graph lives until the main thread sees it.
    if (GraphManager* g = starting.load()) g->CancelStart();
    {
      // Notified under the lock: the main thread, once it sees the stop,
      // runs to the end only after the notification is done.
      MutexLock lock(stop_mu);
      stop_signal = sig;
      stop_cv.notify_all();
    }
    if (next_stop()) {
      std::fprintf(stderr, "kayak: second signal, exiting at once\n");
      std::_Exit(kExitRuntime);
    }
  }).detach();

  ServerConfig server;
  if (!LoadServerConfig(args.server_config, &server)) return kExitUsage;
  if (Status st = SetLogLevel(server.log_level); !st.ok()) {
    std::fprintf(stderr, "kayak: %s\n", st.message().c_str());
    return kExitUsage;
  }
  GraphSpec spec;
  std::optional<cluster::ClusterConfig> in_cluster;
  if (!server.cluster_name.empty()) in_cluster = ClusterOf(server);
  if (in_cluster && args.state_dir.empty()) {
    std::fprintf(stderr, "kayak: a cluster needs --state-dir: its shards are its checkpoints\n");
    return kExitUsage;
  }
  if (!LoadConfig(args.config, &spec, !args.state_dir.empty(),
                  in_cluster ? &*in_cluster : nullptr)) {
    return kExitUsage;
  }

  StateDirLock lock;
  if (!args.state_dir.empty()) {
    long holder = 0;
    std::string error;
    switch (lock.Acquire(args.state_dir, &holder, &error)) {
      case StateDirLock::Outcome::kLocked:
        break;
      case StateDirLock::Outcome::kHeldByOther:
        std::fprintf(stderr,
                     "kayak: state directory %s is locked by another kayak server (pid %ld); "
                     "one server per state directory\n",
                     args.state_dir.c_str(), holder);
        return kExitLocked;
      case StateDirLock::Outcome::kError:
        std::fprintf(stderr, "kayak: %s\n", error.c_str());
        return kExitUsage;
    }
  }


  std::string token;
  if (!server.auth_token_file.empty()) {
    // Read once at start; the token itself is never logged.
    auto bytes = checkpoint::ReadWholeFile(server.auth_token_file);
    if (!bytes.ok()) {
      std::fprintf(stderr, "kayak: auth.token_file: %s\n", bytes.status().message().c_str());
      return kExitUsage;
    }
    token = *bytes;
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
      token.pop_back();
    }
    if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos) {
      std::fprintf(stderr,
                   "kayak: auth.token_file %s must hold one token (no spaces), and holds %s\n",
                   server.auth_token_file.c_str(), token.empty() ? "nothing" : "several words");
      return kExitUsage;
    }
    // Like ssh's keys: a token others on the machine can read is no secret.
    struct stat st {};
    if (::stat(server.auth_token_file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      std::fprintf(stderr,
                   "kayak: auth.token_file %s may be read by others (mode %03o); "
                   "chmod 600 it\n",
                   server.auth_token_file.c_str(), static_cast<unsigned>(st.st_mode & 0777));
      return kExitUsage;
    }
    KLOG_INFO("admin API: every /api route demands the bearer token in {}",
              server.auth_token_file);
  }
  const bool loopback = IsLoopbackHost(server.listen_host);
  if (!loopback && token.empty()) {
    if (!server.auth_none) {
      std::fprintf(stderr,
                   "kayak: listen %s is not a loopback address and the admin API has no token: "
                   "set auth.token_file, or say `auth: none` to run it open\n",
                   server.listen_host.c_str());
      return kExitUsage;
    }
    KLOG_WARN("admin API: open to every client that reaches {} (auth: none)", server.listen_host);
  }
  // Before the graph, whose accounts it keeps.
  MemoryBudget memory(server.memory_limit_bytes);
  if (server.memory_limit_bytes > 0) {
    KLOG_INFO("memory budget: {} bytes; inputs wait from {} bytes", memory.limit(),
              memory.high_water());
  }
  EngineOptions eopts;
  eopts.memory = &memory;
  eopts.checkpointing = !args.state_dir.empty();
  eopts.state_dir = args.state_dir;
  if (eopts.checkpointing) {
    eopts.checkpoint_interval_ms = server.checkpoint_interval_secs * 1000;
    eopts.checkpoint_timeout_ms = server.checkpoint_timeout_secs * 1000;
    eopts.stop_timeout_ms = server.stop_timeout_secs * 1000;
  }
  std::unique_ptr<cluster::Membership> membership;  // outlives the graph, whose agents it lists
  if (!server.cluster_name.empty()) {
    cluster::ClusterConfig c = *in_cluster;
    if (c.store.rfind("s3://", 0) == 0) {
      const auto& o = server.cluster_s3;
      auto get = [&](const char* k, const char* otherwise = "") {
        auto it = o.find(k);
        return it == o.end() ? std::string(otherwise) : it->second;
      };
      s3::Endpoint e;
      std::string prefix;
      if (Status st = s3::ParseStoreUrl(c.store, &e.bucket, &prefix); !st.ok()) {
        std::fprintf(stderr, "kayak: %s\n", st.message().c_str());
        return kExitUsage;
      }
      e.endpoint = get("endpoint");
      e.region = get("region", "us-east-1");
      e.path_style = get("path_style", "false") == "true";
      e.credentials = {get("access_key_id"), get("secret_access_key"), get("session_token")};
      e.tls.ca_file = get("ca_file");
      c.blobs = s3::MakeBlobs(std::move(e), std::move(prefix));
    }
    KLOG_INFO("cluster {}: member {}, shards in {}", c.name, c.member, c.store);
    membership = std::make_unique<cluster::Membership>(c);
    c.membership = membership.get();
    eopts.cluster = std::move(c);
  }
  GraphManager::Options gopts;
  gopts.registry = &BuiltinComponents();
  gopts.engine = eopts;
  gopts.discard_state = args.discard_state;
  GraphManager graph(gopts);
  http::Api api(&graph, token);
  api.SetCluster(membership.get());
  http::ServerLimits limits;
  limits.max_body_bytes = static_cast<uint64_t>(server.max_body_bytes);
  limits.max_header_bytes = static_cast<uint32_t>(server.max_header_bytes);
  limits.read_timeout_ms = static_cast<int>(server.read_timeout_secs * 1000);
  limits.idle_timeout_ms = static_cast<int>(server.idle_timeout_secs * 1000);
  limits.max_connections = static_cast<size_t>(server.max_connections);
  limits.loopback_only_hosts = loopback;
  limits.allowed_hosts = server.allowed_hosts;
  limits.header_timeout_ms = static_cast<int>(server.header_timeout_secs * 1000);
  limits.max_connections_per_client = static_cast<size_t>(server.max_connections_per_client);
  limits.max_body_bytes_in_flight = static_cast<uint64_t>(server.max_body_bytes_in_flight);
  http::Server listener(server.listen_host, server.listen_port, limits,
                        [&api](const http::Request& req, http::Response* res) {
                          api.Handle(req, res);
                        });
  listener.SetIngest(graph.ingest());
  if (!server.tls_cert_file.empty()) {
    const http::ListenerTls tls{server.tls_cert_file, server.tls_key_file,
                                server.tls_client_ca_file};
    if (auto ctx = http::MakeListenerContext(tls); !ctx.ok()) {
      std::fprintf(stderr, "%s: %s\n", args.server_config.c_str(),
                   ctx.status().message().c_str());
      return kExitUsage;
    }
    listener.SetTls(tls);
  }
  listener.SetHeaderCheck(
      [&api](std::string_view target, std::string_view authorization, http::Response* res) {
        return api.RefusedOnHeader(target, authorization, res);
      });
  listener.SetAsyncHandler([&api](const http::Request& req, IngestDone done) {
    return api.HandleAsync(req, std::move(done));
  });
  // The listener answers from before the graph is built (restoring state,
  // starting thousands of pipelines): /health and /ready say it is starting,
  // the rest 503 with Retry-After, and a bind that fails fails at once.
  if (Status st = listener.Start(); !st.ok()) {
    KLOG_ERROR("{}", st.message());
    return kExitRuntime;
  }
  // No reload reaches the listener once it stops (and, on an early return,
  // once it goes: destroyed before it).
  struct NoMoreReloads {
    Mutex* mu;
    http::Server** server;
    void Now() {
      MutexLock lock(*mu);
      *server = nullptr;
    }
    ~NoMoreReloads() { Now(); }
  } no_more_reloads{&reload_mu, &reloadable};
  {
    MutexLock lock(reload_mu);
    reloadable = &listener;
  }
  {
    auto text = checkpoint::ReadWholeFile(args.config);
    if (!text.ok()) {
      std::fprintf(stderr, "kayak: %s\n", text.status().message().c_str());
      return kExitUsage;
    }
    ErrorList errors;
    if (Status st = graph.Init(*text, args.config, &errors); !st.ok()) {
      if (!errors.empty()) {
        std::fputs(errors.ToString().c_str(), stderr);
        return kExitUsage;
      }
      KLOG_ERROR("cannot start the graph: {}", st.message());
      return kExitRuntime;
    }
  }
  const std::string host = server.listen_host.find(':') != std::string::npos
                               ? "[" + server.listen_host + "]"
                               : server.listen_host;
  const std::string scheme = server.tls_cert_file.empty() ? "http" : "https";
  KLOG_INFO("kayak {} API listening on {}://{}:{}", KAYAK_VERSION, scheme, host, listener.port());
  if (membership) {
    membership->Start(scheme + "://" + host + ":" + std::to_string(listener.port()));
  }
  if (!args.state_dir.empty()) KLOG_INFO("state directory {} (locked)", args.state_dir);
  starting = &graph;
  serving = true;  // from here a signal stops gracefully, cutting the start short
  graph.Start();  // API changes wait for it
  {
    MutexLock lock(stop_mu);
    while (stop_signal == 0) lock.Wait(stop_cv);
  }
  const bool clean = graph.Stop();
  api.StopReads();
  no_more_reloads.Now();
  listener.Stop();
  if (!clean) {
    KLOG_ERROR("stopped without a savepoint in every region (see above); exit 1");
    return kExitRuntime;
  }
  KLOG_INFO("stopped cleanly");
  return kExitOk;
}

// `kayak tool TYPE ARGS...`: a component's command-line helper
// (ComponentDef::tool); alone, the list of them.
int Tool(int argc, char** argv) {
  std::vector<const ComponentDef*> tools;
  for (const auto* d : BuiltinComponents().All()) {
    if (d->tool) tools.push_back(d);
  }
  if (argc < 3) {
    std::printf("component helpers:\n");
    for (const auto* d : tools) {
      std::printf("  kayak tool %s %s\n", d->type.c_str(), d->tool_usage.c_str());
    }
    return kExitOk;
  }
  for (const auto* d : tools) {
    if (d->type == argv[2]) return d->tool(std::vector<std::string>(argv + 3, argv + argc));
  }
  return Usage(std::string("no component '") + argv[2] + "' has a helper (kayak tool lists them)");
}

int Main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "tool") == 0) return Tool(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "state") == 0) {
    return StateCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], "crashtest") == 0) {
    return CrashtestCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], "plan") == 0) {
    return PlanCommand(std::vector<std::string>(argv + 2, argv + argc));
  }
  Args args;
  std::string problem;
  if (!ParseArgs(argc, argv, &args, &problem)) return Usage(problem);
  if (args.help) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (args.version) {
    std::printf("kayak %s\n", KAYAK_VERSION);
    return kExitOk;
  }
  if (args.check) return Check(args.check_file, args.server_config);
  return Serve(args);
}

}  // namespace
}  // namespace kayak

int main(int argc, char** argv) { return kayak::Main(argc, argv); }
