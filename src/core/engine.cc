#include "core/engine.h"

#include <map>

#include "common/log.h"

namespace kayak {

namespace {

bool ParseRetry(const YAML::Node& value, const std::string& file, RetryPolicy* out,
                ErrorList* errors) {
  if (!value.IsMap()) return true;
  const YAML::Node r = value["retry"];
  if (!r.IsDefined() || r.IsNull()) return true;
  bool ok = true;
  for (const auto& kv : r) {
    const std::string k = kv.first.Scalar();
    int64_t* slot = k == "base_ms" ? &out->base_ms
                    : k == "max_ms" ? &out->max_ms
                    : k == "max_attempts" ? &out->max_attempts
                                          : nullptr;
    if (slot == nullptr) {
      errors->Add(MarkOf(file, kv.first),
                  "unknown retry option '" + k + "' (known: base_ms, max_ms, max_attempts)");
      ok = false;
      continue;
    }
    char* end = nullptr;
    const std::string& s = kv.second.Scalar();
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < 1) {
      errors->Add(MarkOf(file, kv.second), "retry." + k + " must be a whole number >= 1");
      ok = false;
      continue;
    }
    *slot = v;
  }
  if (out->max_ms < out->base_ms) out->max_ms = out->base_ms;
  return ok;
}

}  // namespace

void ValidateComponents(const GraphSpec& spec, ErrorList* errors) {
  BucketRegistry buckets;
  for (const auto& b : spec.buckets) buckets.Add(b.name, b.idle_timeout_secs * 1000);
  for (const auto& p : spec.pipelines) {
    ComponentContext ctx;
    ctx.clock = SystemClock::Get();
    ctx.pipeline_id = p.id;
    ctx.buckets = &buckets;
    ComponentStats card("validate", "validate", "validate");
    ctx.stats = &card;
    if (p.input.def != nullptr && p.input.def->make_input) {
      Options opts(p.input.def, p.input.value, p.input.mark, errors);
      (void)p.input.def->make_input(opts, ctx);
    }
    for (const auto& t : p.transforms) {
      Options opts(t.def, t.value, t.mark, errors);
      (void)t.def->make_transform(opts, ctx);
    }
    for (const auto& o : p.outputs) {
      RetryPolicy retry;
      (void)ParseRetry(o.value, spec.file, &retry, errors);
      Options opts(o.def, o.value, o.mark, errors);
      (void)o.def->make_output(opts, ctx);
    }
  }
}

std::unique_ptr<Engine> Engine::Build(const GraphSpec& spec, const ComponentRegistry& registry,
                                      const EngineOptions& options, ErrorList* errors) {
  (void)registry;
  std::unique_ptr<Engine> engine(new Engine(options));
  for (const auto& b : spec.buckets) engine->buckets_.Add(b.name, b.idle_timeout_secs * 1000);

  std::map<std::string, PipelineRunner*> by_id;
  std::map<std::string, size_t> downstream_lanes;
  for (const auto& p : spec.pipelines) {
    auto runner = std::make_unique<PipelineRunner>(p, options.clock);
    ComponentContext ctx;
    ctx.clock = options.clock;
    ctx.pipeline_id = p.id;
    ctx.buckets = &engine->buckets_;
    ctx.checkpointing = options.checkpointing;

    const ComponentSpec& in = p.input;
    auto in_card = std::make_unique<ComponentStats>("input", "input", in.def->type);
    if (in.def->type == "pipeline") {
      runner->SetUpstreamInbox(
          std::make_unique<Inbox>(p.upstreams.size(), options.edge_queue_batches),
          std::move(in_card));
      for (size_t lane = 0; lane < p.upstreams.size(); ++lane) {
        auto it = by_id.find(p.upstreams[lane]);
        KAYAK_CHECK(it != by_id.end());  // the loader orders upstreams first
        it->second->AddDownstream(runner->upstream_inbox(), lane);
      }
    } else {
      Options opts(in.def, in.value, in.mark, errors);
      ctx.stats = in_card.get();
      auto input = in.def->make_input(opts, ctx);
      if (input != nullptr && !opts.failed()) runner->SetInput(std::move(input), std::move(in_card));
    }
    for (size_t i = 0; i < p.transforms.size(); ++i) {
      const ComponentSpec& t = p.transforms[i];
      Options opts(t.def, t.value, t.mark, errors);
      auto card = std::make_unique<ComponentStats>("transforms[" + std::to_string(i) + "]",
                                                   "transform", t.def->type);
      ctx.stats = card.get();
      auto tr = t.def->make_transform(opts, ctx);
      if (tr == nullptr || opts.failed()) continue;
      runner->AddTransform(std::move(tr), std::move(card));
    }
    for (size_t i = 0; i < p.outputs.size(); ++i) {
      const ComponentSpec& o = p.outputs[i];
      RetryPolicy retry;
      if (!ParseRetry(o.value, spec.file, &retry, errors)) continue;
      Options opts(o.def, o.value, o.mark, errors);
      auto card = std::make_unique<ComponentStats>("outputs[" + std::to_string(i) + "]", "output",
                                                   o.def->type);
      ctx.stats = card.get();
      auto out = o.def->make_output(opts, ctx);
      if (out == nullptr || opts.failed()) continue;
      auto runner_out = std::make_unique<OutputRunner>(std::move(out), card.get(), retry,
                                                       options.output_queue_batches,
                                                       options.clock);
      runner->AddOutput(std::move(runner_out), std::move(card));
    }
    by_id[p.id] = runner.get();
    engine->pipelines_.push_back(std::move(runner));
  }
  if (!errors->empty()) return nullptr;
  return engine;
}

Engine::~Engine() {
  if (started_ && !stopped_) {
    for (auto& p : pipelines_) p->Abort();
  }
  for (auto& p : pipelines_) p->Join();
  // Upstreams first: a pipeline's edges point into its downstreams' inboxes.
  for (auto& p : pipelines_) p.reset();
}

PipelineRunner* Engine::Find(const std::string& id) const {
  for (const auto& p : pipelines_) {
    if (p->id() == id) return p.get();
  }
  return nullptr;
}

void Engine::Start() {
  started_ = true;
  // Downstream first, so every inbox has its consumer before data arrives.
  for (auto it = pipelines_.rbegin(); it != pipelines_.rend(); ++it) (*it)->Start();
  KLOG_INFO("engine started: {} pipelines, {} buckets", pipelines_.size(),
            buckets_.All().size());
}

void Engine::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  for (auto& p : pipelines_) {
    if (p->is_source()) p->RequestStop();
  }
  // Upstreams first: each pipeline ends once all of its upstreams have.
  for (auto& p : pipelines_) p->Join();
  KLOG_INFO("engine stopped");
}

}  // namespace kayak
