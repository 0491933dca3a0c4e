// The admin API v1 (SPEC section 6) over an Engine.
#pragma once

#include <string>

#include "engine/running_graph.h"
#include "engine/graph_manager.h"
#include "server/server.h"

namespace kayak::http {

class Api {
 public:
  // `graph` must outlive the Api. Handle and HandleAsync are called on the
  // HTTP thread only. With a
  // `token`, every route under /api demands "Authorization: Bearer <token>".
  explicit Api(GraphManager* graph, std::string token = "")
      : graph_(graph), token_(std::move(token)) {}
  void Handle(const Request& req, Response* res);
  // The routes that change the graph (PUT, DELETE, revert, restart, a bucket
  // declaration) and POST /api/v1/checkpoints: run on the graph's change
  // thread, never the listener's, and answered through `done`. False for
  // every other request (and for one the token check refuses), which
  // Handle then answers.
  bool HandleAsync(const Request& req, IngestDone done);

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
  void GetPipeline(const std::string& id, Response* res);
  void GetBucket(const std::string& name, const std::string& query, Response* res);
  // The page and its assets (/, /index.html, /ui/...), built into the binary.
  void Dashboard(const std::string& path, Response* res);
  // Everything the page shows, in one answer: pipelines with their cards,
  // buckets, checkpoints and the readiness reasons.
  void Overview(Response* res);
  void Checkpoints(Response* res);  // GET; a POST goes to TakeCheckpoint

  // The running graph, held for the request being answered (a change on
  // the change thread may replace it meanwhile); null before the start.
  const RunningGraph* graph() { return current_.get(); }
  // 404 saying `what`; 503 with Retry-After while a change is being applied
  // (the pipeline or bucket may be one being rebuilt).
  void NotFound(Response* res, const std::string& what);
  void Send(const GraphManager::Answer& a, Response* res);
  // False (with `res` set to 401 or 403) when the route needs the token and
  // the request does not carry it.
  bool Authorized(const Request& req, const std::string& path, Response* res);
  // POST /api/v1/checkpoints on the change thread.
  GraphManager::Answer TakeCheckpoint();

  std::shared_ptr<const RunningGraph> current_;  // HTTP thread only

  GraphManager* graph_;
  const std::string token_;
};

// Decodes %XX and '+' in a query component.
std::string UrlDecode(const std::string& s);
// The value of `key` in a query string ("a=1&b=2"), or "" when absent.
bool QueryParam(const std::string& query, const std::string& key, std::string* value);

}  // namespace kayak::http
