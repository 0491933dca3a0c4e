// The admin API v1 (SPEC section 6) over an Engine.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "engine/running_graph.h"
#include "engine/graph_manager.h"
#include "server/server.h"
#include "cluster/membership.h"
#include "kayak/thread_annotations.h"

namespace kayak::http {

class Api {
 public:
  // `graph` must outlive the Api. Handle and HandleAsync are called on the
  // HTTP thread only. With a
  // `token`, every route under /api demands "Authorization: Bearer <token>".
  explicit Api(GraphManager* graph, std::string token = "");
  ~Api();
  // Answers the reads waiting and takes no more (they get 503): called
  // before the listener stops, whose queue their answers go through.
  void StopReads();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;
  void Handle(const Request& req, Response* res);
  // In a cluster (docs/cluster.md): a bucket key another member owns is
  // answered 307 to it, and the overview lists the members. Before the
  // listener starts; `membership` outlives the Api.
  void SetCluster(const cluster::Membership* membership) { cluster_ = membership; }
  // The routes that change the graph (PUT, DELETE, revert, restart, a bucket
  // declaration) and POST /api/v1/checkpoints: run on the graph's change
  // thread, never the listener's, and answered through `done`. False for
  // every other request (and for one the token check refuses), which
  // Handle then answers. The reads that grow with the graph (GET of the
  // overview, the pipeline list and /metrics) are taken too: built on the
  // reader thread, never the listener's, so that one over thousands of
  // pipelines holds up no probe or post. At most kMaxQueuedReads wait; more
  // get 503 with Retry-After.
  static constexpr size_t kMaxQueuedReads = 8;
  bool HandleAsync(const Request& req, IngestDone done);
  // The listener's check on a request's header: true (with `res` set to 401
  // or 403) when the route needs the token and the header does not carry it,
  // so that the body of such a request is never read.
  bool RefusedOnHeader(std::string_view target, std::string_view authorization, Response* res);

 private:
  void Health(Response* res);
  // 200 when every pipeline runs and every region checkpoints on time, else
  // 503; the body lists why not (docs/api.md).
  void Ready(Response* res);
  // What keeps the server from being ready: one object per reason.
  nlohmann::ordered_json NotReadyReasons();
  void Metrics(Response* res);
  void ListPipelines(Response* res);
  // Every pipeline without its config, as GET /api/v1/pipelines lists them.
  nlohmann::ordered_json PipelineList();
  // The memory budget for the overview: limit, use, waiting inputs and the
  // kMemoryTop biggest accounts (null without a budget).
  static constexpr size_t kMemoryTop = 10;
  nlohmann::ordered_json MemoryJson();
  void GetPipeline(const std::string& id, Response* res);
  void GetBucket(const std::string& name, const std::string& query, Response* res);
  // The page and its assets (/, /index.html, /ui/...), built into the binary.
  void Dashboard(const std::string& path, Response* res);
  // Everything the page shows, in one answer: pipelines with their cards,
  // buckets, checkpoints and the readiness reasons.
  void Overview(Response* res);
  void Checkpoints(Response* res);  // GET; a POST goes to TakeCheckpoint

  // The running graph, held for the request being answered on this thread
  // (a change on the change thread may replace it meanwhile); null before
  // the start.
  const RunningGraph* graph();
  // 404 saying `what`; 503 with Retry-After while a change is being applied
  // (the pipeline or bucket may be one being rebuilt).
  void NotFound(Response* res, const std::string& what);
  void Send(const GraphManager::Answer& a, Response* res);
  // False (with `res` set to 401 or 403) when the route needs the token and
  // the request does not carry it.
  bool Authorized(const Request& req, const std::string& path, Response* res);
  bool Authorized(std::string_view path, std::string_view authorization, Response* res);
  // POST /api/v1/checkpoints on the change thread.
  GraphManager::Answer TakeCheckpoint();
  // Runs `read` on the reader thread; false when kMaxQueuedReads wait.
  bool SubmitRead(std::function<void()> read);
  void ReadLoop();

  GraphManager* graph_;
  const std::string token_;
  const cluster::Membership* cluster_ = nullptr;

  Mutex reads_mu_;
  std::condition_variable reads_cv_;
  std::deque<std::function<void()>> reads_ KAYAK_GUARDED_BY(reads_mu_);
  bool reads_closed_ KAYAK_GUARDED_BY(reads_mu_) = false;
  std::thread reader_;                        // last: started once the rest is set
};

// Decodes %XX and '+' in a query component.
std::string UrlDecode(const std::string& s);
// The value of `key` in a query string ("a=1&b=2"), or "" when absent.
bool QueryParam(const std::string& query, const std::string& key, std::string* value);

}  // namespace kayak::http
