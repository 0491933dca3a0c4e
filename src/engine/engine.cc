#include "engine/engine.h"
#include "checkpoint/state_layout.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <type_traits>

#include "common/io.h"
#include "common/log.h"

namespace kayak {

namespace {

// Buckets that a pipeline's transforms write (bucket transforms other than
// lookups), and every bucket it reads or writes.
void BucketsOf(const PipelineSpec& p, std::set<std::string>* written, std::set<std::string>* used) {
  for (const auto& t : p.transforms) {
    for (const auto& b : t.buckets) {
      used->insert(b.bucket);
      if (b.writes) written->insert(b.bucket);
    }
  }
}

// True if two transforms of the pipeline use one bucket and one of them
// writes it: run per batch, the second would see writes of later messages.
bool TransformsShareState(const PipelineSpec& p) {
  std::map<std::string, int> uses;
  std::set<std::string> written;
  for (const auto& t : p.transforms) {
    for (const auto& b : t.buckets) {
      ++uses[b.bucket];
      if (b.writes) written.insert(b.bucket);
    }
  }
  for (const auto& b : written) {
    if (uses[b] >= 2) return true;
  }
  return false;
}

// In a cluster (docs/cluster.md) every pipeline reads a partitioned input,
// one whose messages the members share, or other pipelines.
void CheckClusterInput(const ComponentSpec& in, const Options& opts, ErrorList* errors) {
  if (in.def->reads_pipelines || in.def->partitioned ||
      (in.def->shared_by_members && in.def->shared_by_members(opts))) {
    return;
  }
  errors->Add(in.mark, "in a cluster every pipeline reads a partitioned input (kafka), an "
                       "input whose messages the members share (http, tcp, udp, nats with a "
                       "queue group) or other pipelines (docs/cluster.md): a " +
                           in.def->type + " input like this one would give every member the "
                           "same messages");
}

// In a cluster a transform keeps state only if it moves with the partitions
// of its pipeline's input.
void CheckClusterTransform(const ComponentSpec& t, const Transform& tr, bool reads_partitions,
                           ErrorList* errors) {
  if (!tr.Stateful() || (tr.ShardedAs() != Transform::Sharding::kNone && reads_partitions)) {
    return;
  }
  errors->Add(t.mark, "in a cluster state lives in buckets and in the windows and buffers of a "
                      "pipeline that reads a partitioned input (docs/cluster.md): this " +
                          t.def->type + " keeps state that does not move with partitions (a "
                          "repartition step before it would make it)");
}

bool ReadsPartitions(const PipelineSpec& p) {
  return !p.input.def->reads_pipelines && p.input.def->partitioned;
}

// Applies a recovered unit when the component's config is unchanged: its
// full chunk, then (a bucket, a rolling_window) its deltas in order. Returns
// what it restored, or null when the component starts empty.
template <typename F, typename D = std::nullptr_t>
const checkpoint::RestoredUnit* RestoreUnit(const EngineOptions& o, const std::string& unit,
                                            const std::string& fingerprint, const char* what,
                                            F&& restore, D&& apply_delta = nullptr) {
  if (o.restored == nullptr) return nullptr;
  auto it = o.restored->find(unit);
  if (it == o.restored->end()) return nullptr;
  if (it->second.fingerprint != fingerprint) {
    KLOG_INFO("{} ({}): its config changed since checkpoint {}; it starts empty", what, unit,
              it->second.checkpoint_id);
    return nullptr;
  }
  Status st = restore(it->second.data);
  for (const auto& delta : it->second.deltas) {
    if (!st.ok()) break;
    if constexpr (std::is_same_v<std::decay_t<D>, std::nullptr_t>) {
      st = Status::Corruption("a delta chunk for a unit that keeps none");
    } else {
      st = apply_delta(delta);
    }
  }
  if (!st.ok()) {
    KLOG_ERROR("{} ({}): cannot restore from checkpoint {}: {}; it starts empty", what, unit,
               it->second.checkpoint_id, st.message());
    return nullptr;
  }
  KLOG_INFO("{} ({}) restored from checkpoint {}", what, unit, it->second.checkpoint_id);
  return &it->second;
}

uint64_t DeltaBytes(const checkpoint::RestoredUnit& u) {
  uint64_t n = 0;
  for (const auto& d : u.deltas) n += d.size();
  return n;
}

}  // namespace

std::vector<size_t> GroupIntoRegions(const GraphSpec& spec) {
  // Union-find over pipelines: joined by an edge or by a bucket they share.
  const size_t n = spec.pipelines.size();
  std::vector<size_t> parent(n);
  for (size_t i = 0; i < n; ++i) parent[i] = i;
  std::function<size_t(size_t)> find = [&](size_t i) {
    return parent[i] == i ? i : parent[i] = find(parent[i]);
  };
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) index[spec.pipelines[i].id] = i;
  std::map<std::string, size_t> bucket_owner;
  for (size_t i = 0; i < n; ++i) {
    const PipelineSpec& p = spec.pipelines[i];
    for (const auto& up : p.upstreams) {
      auto it = index.find(up);
      if (it != index.end()) parent[find(i)] = find(it->second);
    }
    std::set<std::string> written, used;
    BucketsOf(p, &written, &used);
    for (const auto& b : used) {
      auto [it, fresh] = bucket_owner.emplace(b, i);
      if (!fresh) parent[find(i)] = find(it->second);
    }
  }
  // Each group is named by its first pipeline, so that the result does not
  // depend on the order of the unions.
  std::vector<size_t> first(n, n), out(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t root = find(i);
    if (first[root] == n) first[root] = i;
    out[i] = first[root];
  }
  return out;
}

std::string OutputUnitOf(const PipelineSpec& p, size_t k) {
  return p.IsDeadLetter(k) ? layout::DeadLetterUnit(p.id) : layout::OutputUnit(p.id, k);
}

std::vector<RegionSpec> SplitIntoRegions(const GraphSpec& spec) {
  const std::vector<size_t> group = GroupIntoRegions(spec);
  std::map<size_t, size_t> slot;  // group -> index in out
  std::vector<RegionSpec> out;
  std::set<std::string> used_buckets;
  const YAML::Node& root = spec.root;
  auto dump = [](const YAML::Node& n) {
    YAML::Emitter e;
    e << n;
    return std::string(e.c_str());
  };
  for (size_t i = 0; i < spec.pipelines.size(); ++i) {
    auto [it, fresh] = slot.emplace(group[i], out.size());
    if (fresh) {
      out.emplace_back();
      out.back().name = spec.pipelines[i].id;
      out.back().spec.file = spec.file;
      out.back().spec.root = spec.root;
    }
    RegionSpec& r = out[it->second];
    const PipelineSpec& p = spec.pipelines[i];
    r.spec.pipelines.push_back(p);
    r.name = std::min(r.name, p.id);
    r.key += "pipeline " + p.id + "\n";
    if (root.IsMap() && root["pipelines"].IsMap()) r.key += dump(root["pipelines"][p.id]) + "\n";
    std::set<std::string> written, used;
    BucketsOf(p, &written, &used);
    for (const auto& b : used) {
      if (!r.bucket_names.insert(b).second) continue;
      used_buckets.insert(b);
    }
  }
  RegionSpec unused;  // buckets no pipeline uses: they still answer the API
  for (const auto& b : spec.buckets) {
    RegionSpec* r = &unused;
    if (used_buckets.count(b.name)) {
      for (auto& c : out) {
        if (c.bucket_names.count(b.name)) r = &c;
      }
    }
    r->spec.buckets.push_back(b);
    r->bucket_names.insert(b.name);
    r->key += "bucket " + b.name + "\n";
    if (root.IsMap() && root["buckets"].IsMap()) r->key += dump(root["buckets"][b.name]) + "\n";
  }
  if (!unused.spec.buckets.empty()) {
    unused.spec.file = spec.file;
    unused.spec.root = spec.root;
    out.push_back(std::move(unused));
  }
  return out;
}

void ValidateComponents(const GraphSpec& spec, ErrorList* errors, bool checkpointing,
                        const cluster::ClusterConfig* cluster) {
  BucketRegistry buckets;
  for (const auto& b : spec.buckets) buckets.Add(b.name, b.idle_timeout_secs * 1000);
  std::optional<MemberOnly> member;
  if (cluster != nullptr) member.emplace(*cluster);
  for (const auto& p : spec.pipelines) {
    ComponentContext ctx;
    ctx.clock = SystemClock::Get();
    ctx.pipeline_id = p.id;
    ctx.buckets = &buckets;
    ctx.checkpointing = checkpointing;
    ctx.partitions = member ? &*member : nullptr;
    ComponentStats card("validate", "validate", "validate");
    ctx.stats = &card;
    const bool reads_partitions = p.input.def != nullptr && ReadsPartitions(p);
    if (p.input.def != nullptr && p.input.def->make_input) {
      YamlOptions opts(p.input.def, p.input.value, p.input.mark, errors);
      (void)p.input.def->make_input(opts, ctx);
      if (member && !opts.failed()) CheckClusterInput(p.input, opts, errors);
    }
    for (const auto& t : p.transforms) {
      YamlOptions opts(t.def, t.value, t.mark, errors);
      auto tr = t.def->make_transform(opts, ctx);
      if (member && tr != nullptr && !opts.failed()) {
        CheckClusterTransform(t, *tr, reads_partitions, errors);
      }
    }
    for (const auto& o : p.outputs) {
      YamlOptions opts(o.def, o.value, o.mark, errors);
      (void)o.def->make_output(opts, ctx);
    }
  }
  if (member) ValidateClusterGraph(spec, errors);
}

void ValidateClusterGraph(const GraphSpec& spec, ErrorList* errors) {
  const size_t n = spec.pipelines.size();
  for (const auto& p : spec.pipelines) {
    if (p.input.def == nullptr || ReadsPartitions(p)) continue;
    // A bucket changes only on the thread of the pipeline that reads its
    // partitions: a shard's keys are dropped or replaced between two of its
    // batches, with nothing of the partition in flight.
    for (const auto& t : p.transforms) {
      for (const auto& b : t.buckets) {
        if (!b.writes) continue;
        errors->Add(t.mark, "in a cluster only a pipeline that reads a partitioned input writes "
                            "buckets (docs/cluster.md): pipeline " + p.id + " writes bucket " +
                                b.bucket);
        break;
      }
    }
  }
  // A region (its checkpoints, its buckets) follows the partitions of one
  // input, and another source would share it while they move.
  const std::vector<size_t> group = GroupIntoRegions(spec);
  std::map<size_t, std::string> region_name;  // by root: the smallest pipeline id
  std::map<size_t, size_t> reader;            // by root: the pipeline reading partitions
  for (size_t i = 0; i < n; ++i) {
    auto [it, fresh] = region_name.emplace(group[i], spec.pipelines[i].id);
    if (!fresh) it->second = std::min(it->second, spec.pipelines[i].id);
  }
  for (size_t i = 0; i < n; ++i) {
    const PipelineSpec& p = spec.pipelines[i];
    if (p.input.def == nullptr || !ReadsPartitions(p)) continue;
    auto [it, fresh] = reader.emplace(group[i], i);
    if (!fresh) {
      errors->Add(p.input.mark, "in a cluster a region reads one partitioned input "
                                "(docs/cluster.md): region " + region_name[group[i]] +
                                    " has two, pipelines " + spec.pipelines[it->second].id +
                                    " and " + p.id);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const PipelineSpec& p = spec.pipelines[i];
    auto it = reader.find(group[i]);
    if (p.input.def == nullptr || p.input.def->reads_pipelines || ReadsPartitions(p) ||
        it == reader.end()) {
      continue;
    }
    errors->Add(p.input.mark, "in a cluster a region that reads a partitioned input reads no "
                              "other (docs/cluster.md): region " + region_name[group[i]] +
                                  " reads pipeline " + spec.pipelines[it->second].id +
                                  "'s partitions and pipeline " + p.id + "'s " +
                                  p.input.def->type + " input");
  }
}

std::unique_ptr<Engine> Engine::Build(const GraphSpec& spec, const ComponentRegistry& registry,
                                      const EngineOptions& options, ErrorList* errors,
                                      Status* fatal) {
  (void)registry;
  InitLogging();  // before any pipeline thread logs
  std::unique_ptr<Engine> engine(new Engine(options));
  for (const auto& b : spec.buckets) {
    Bucket* bucket = engine->buckets_.Add(b.name, b.idle_timeout_secs * 1000);
    bucket->SetKeyLimit(static_cast<size_t>(b.max_keys), b.evict_oldest);
    if (options.memory != nullptr) {
      engine->bucket_memory_.push_back(
          std::make_unique<MemoryAccount>(options.memory, "", "bucket:" + b.name, "state"));
      bucket->ChargeTo(engine->bucket_memory_.back().get());
    }
  }

  std::map<std::string, PipelineRunner*> by_id;
  std::map<std::string, size_t> downstream_lanes;
  bool crash_dir_made = false;
  // The state directory's name for its consumers: a keyed hash, so it says
  // nothing of the key and differs from one directory to the next.
  const std::string instance_id = options.checkpointing && options.store != nullptr
                                      ? options.store->Seal("kayak instance id 1").substr(3, 16)
                                      : std::string();
  for (const auto& p : spec.pipelines) {
    auto runner = std::make_unique<PipelineRunner>(p, options.clock);
    ComponentContext ctx;
    ctx.clock = options.clock;
    ctx.pipeline_id = p.id;
    ctx.buckets = &engine->buckets_;
    ctx.checkpointing = options.checkpointing;
    ctx.ingest = engine->ingest();
    ctx.memory = options.memory;
    ctx.transforms_follow = !p.transforms.empty();
    ctx.instance_id = instance_id;
    cluster::ShardAgent* agent = nullptr;

    const ComponentSpec& in = p.input;
    auto in_card = std::make_unique<ComponentStats>("input", "input", in.def->type);
    if (in.def->reads_pipelines) {
      runner->SetUpstreamInbox(
          std::make_unique<Inbox>(p.upstreams.size(), options.edge_queue_batches),
          std::move(in_card));
      for (size_t lane = 0; lane < p.upstreams.size(); ++lane) {
        auto it = by_id.find(p.upstreams[lane]);
        KAYAK_CHECK(it != by_id.end());  // the loader orders upstreams first
        it->second->AddDownstream(runner->upstream_inbox(), lane);
      }
    } else {
      YamlOptions opts(in.def, in.value, in.mark, errors);
      ctx.stats = in_card.get();
      if (in.def->private_dir && options.checkpointing && !options.state_dir.empty()) {
        ctx.private_dir = layout::PrivateDir(options.state_dir, in.def->type, p.id);
        if (Status st = CreateDirsDurably(ctx.private_dir); !st.ok()) {
          errors->Add(in.mark, "input: cannot make its directory " + ctx.private_dir + ": " +
                                   st.message());
        }
      }
      if (options.cluster && in.def->partitioned) {
        auto made = std::make_unique<cluster::ShardAgent>(*options.cluster, in_card.get(),
                                                          options.clock);
        agent = made.get();
        engine->shard_agents_[runner.get()] = std::move(made);
        ctx.partitions = agent;
      } else if (options.cluster) {
        CheckClusterInput(in, opts, errors);
        ctx.partitions = engine->ClusterMember();  // its member name and partitioner
      }
      auto input = in.def->make_input(opts, ctx);
      if (input != nullptr && !opts.failed()) runner->SetInput(std::move(input), std::move(in_card));
    }
    // Outputs of a cluster hear of it too (its member name, for ids that
    // must differ between members), through the pipeline's agent or the
    // engine's member-only one.
    ctx.partitions = !options.cluster ? nullptr
                     : agent != nullptr ? static_cast<PartitionOwner*>(agent)
                                        : engine->ClusterMember();
    for (size_t i = 0; i < p.transforms.size(); ++i) {
      const ComponentSpec& t = p.transforms[i];
      YamlOptions opts(t.def, t.value, t.mark, errors);
      auto card = std::make_unique<ComponentStats>("transforms[" + std::to_string(i) + "]",
                                                   "transform", t.def->type);
      ctx.stats = card.get();
      auto tr = t.def->make_transform(opts, ctx);
      if (tr == nullptr || opts.failed()) continue;
      if (options.cluster) CheckClusterTransform(t, *tr, agent != nullptr, errors);
      runner->AddTransform(std::move(tr), std::move(card));
    }
    for (size_t i = 0; i < p.outputs.size(); ++i) {
      const ComponentSpec& o = p.outputs[i];
      YamlOptions opts(o.def, o.value, o.mark, errors);
      auto card = std::make_unique<ComponentStats>(p.OutputName(i), "output", o.def->type);
      ctx.stats = card.get();
      auto out = o.def->make_output(opts, ctx);
      if (out == nullptr || opts.failed()) continue;
      // A dead-letter output has a lane for each other output's refusals.
      const size_t lanes = static_cast<int64_t>(i) == p.dead_letter ? p.outputs.size() : 1;
      auto runner_out = std::make_unique<OutputRunner>(std::move(out), card.get(), o.retry,
                                                       options.output_queue_batches,
                                                       options.clock, lanes);
      runner->AddOutput(std::move(runner_out), std::move(card));
    }
    if (p.dead_letter >= 0) runner->SetDeadLetter(static_cast<size_t>(p.dead_letter));
    runner->SetPerMessage(TransformsShareState(p));
    if (options.memory != nullptr) runner->SetMemory(options.memory);
    if (options.checkpointing && !options.state_dir.empty() && !p.transforms.empty()) {
      if (!crash_dir_made) {
        if (Status st = CreateDirsDurably(layout::CrashDir(options.state_dir)); !st.ok()) {
          KLOG_WARN("no crash marks: {}", st.message());
        }
        crash_dir_made = true;
      }
      runner->SetCrashGuard(layout::CrashFile(options.state_dir, p.id));
    }
    by_id[p.id] = runner.get();
    engine->pipelines_.push_back(std::move(runner));
  }
  if (options.cluster && !options.checkpointing) {
    errors->Add(SourceMark{spec.file, 0, 0},
                "a cluster needs --state-dir: its shards are its checkpoints");
  }
  if (options.cluster) ValidateClusterGraph(spec, errors);
  if (!errors->empty()) return nullptr;
  if (options.checkpointing && options.store != nullptr) {
    if (Status st = engine->SetUpCheckpointing(spec); !st.ok()) {
      if (fatal != nullptr) *fatal = st;
      return nullptr;
    }
  }
  return engine;
}

Status Engine::SetUpCheckpointing(const GraphSpec& spec) {
  const EngineOptions& o = options_;
  checkpointer_ = std::make_unique<Checkpointer>(o.store, o.checkpoint_interval_ms,
                                                 o.checkpoint_timeout_ms, o.clock);
  const size_t n = spec.pipelines.size();
  std::vector<std::set<std::string>> written(n), used(n);
  for (size_t i = 0; i < n; ++i) BucketsOf(spec.pipelines[i], &written[i], &used[i]);
  const std::vector<size_t> group = GroupIntoRegions(spec);
  std::map<size_t, size_t> region_of_root;
  std::vector<Checkpointer::Region> regions;
  for (size_t i = 0; i < n; ++i) {
    const size_t root = group[i];
    auto [it, fresh] = region_of_root.emplace(root, regions.size());
    if (fresh) {
      regions.emplace_back();
      regions.back().name = spec.pipelines[root].id;
    }
    Checkpointer::Region& r = regions[it->second];
    PipelineRunner* p = pipelines_[i].get();
    r.pipelines.push_back(p);
    if (p->is_source()) r.sources.push_back(p);
    r.outputs += spec.pipelines[i].outputs.size();
    for (size_t k = 0; k < spec.pipelines[i].outputs.size(); ++k) {
      if (p->output(k)->output()->TwoPhase()) r.two_phase.push_back(p->output(k));
    }
    for (const auto& b : written[i]) {
      Bucket* bucket = buckets_.Find(b);
      if (r.writers[bucket]++ == 0) r.buckets.push_back(bucket);
    }
  }
  for (const auto& b : spec.buckets) {
    for (auto& r : regions) {
      Bucket* bucket = buckets_.Find(b.name);
      if (r.writers.count(bucket)) r.bucket_fingerprints[bucket] = b.fingerprint;
    }
  }
  // Region names are their smallest pipeline id, so a restart with the same
  // graph finds its manifests.
  for (auto& r : regions) {
    for (auto* p : r.pipelines) r.name = std::min(r.name, p->id());
  }
  std::vector<size_t> region_index(n);
  for (size_t i = 0; i < n; ++i) region_index[i] = region_of_root[group[i]];
  std::vector<std::pair<size_t, cluster::ShardAgent*>> agents;
  KAYAK_RETURN_IF_ERROR(BindShards(&regions, &agents));
  std::vector<size_t> ids;
  for (auto& r : regions) ids.push_back(checkpointer_->AddRegion(r));
  // A revoked partition is handed over after a checkpoint its region takes
  // at once (docs/cluster.md, "Hand-over").
  for (auto [r, agent] : agents) {
    agent->SetCheckpointRequest(
        [cp = checkpointer_.get(), id = ids[r]] { return cp->RequestCheckpoint(id); });
  }
  KAYAK_RETURN_IF_ERROR(ConfirmTwoPhaseCommits(spec));
  for (size_t i = 0; i < n; ++i) {
    const PipelineSpec& ps = spec.pipelines[i];
    PipelineRunner* p = pipelines_[i].get();
    const size_t region = ids[region_index[i]];
    std::vector<Bucket*> wb;
    for (const auto& b : written[i]) wb.push_back(buckets_.Find(b));
    p->SetCheckpointing(checkpointer_.get(), region, wb);
    if (p->input() != nullptr) {
      RestoreUnit(o, layout::InputUnit(ps.id), ps.input.fingerprint,
                  ("pipeline " + ps.id + " input").c_str(),
                  [&](std::string_view d) { return p->input()->RestorePosition(d); });
    }
    for (size_t t = 0; t < ps.transforms.size(); ++t) {
      const checkpoint::RestoredUnit* u = RestoreUnit(
          o, layout::TransformUnit(ps.id, t), ps.transforms[t].fingerprint,
          ("pipeline " + ps.id + " transforms[" + std::to_string(t) + "]").c_str(),
          [&](std::string_view d) { return p->transform(t)->RestoreState(d); },
          [&](std::string_view d) { return p->transform(t)->ApplyDelta(d); });
      if (u != nullptr) p->TransformRestored(t, u->data.size(), DeltaBytes(*u));
    }
    for (size_t k = 0; k < ps.outputs.size(); ++k) {
      const std::string unit = OutputUnitOf(ps, k);
      p->output(k)->SetCheckpointing(checkpointer_.get(), region, unit, ps.outputs[k].fingerprint);
      RestoreUnit(o, unit, ps.outputs[k].fingerprint,
                  ("pipeline " + ps.id + " " + ps.OutputName(k)).c_str(),
                  [&](std::string_view d) { return p->output(k)->output()->RestoreState(d); });
    }
  }
  for (const auto& b : spec.buckets) {
    Bucket* bucket = buckets_.Find(b.name);
    const checkpoint::RestoredUnit* u =
        RestoreUnit(o, layout::BucketUnit(b.name), b.fingerprint, ("bucket " + b.name).c_str(),
                    [&](std::string_view d) { return bucket->RestoreState(d); },
                    [&](std::string_view d) { return bucket->ApplyDelta(d); });
    if (u != nullptr) checkpointer_->BucketRestored(bucket, u->data.size(), DeltaBytes(*u));
  }
  return Status::Ok();
}

Status Engine::BindShards(std::vector<Checkpointer::Region>* regions,
                          std::vector<std::pair<size_t, cluster::ShardAgent*>>* agents) {
  for (size_t index = 0; index < regions->size(); ++index) {
    Checkpointer::Region& r = (*regions)[index];
    cluster::ShardAgent* agent = nullptr;
    std::string unit;
    for (auto* cp : r.pipelines) {
      auto* p = static_cast<PipelineRunner*>(cp);
      auto it = shard_agents_.find(p);
      if (it == shard_agents_.end()) continue;
      // ValidateClusterGraph refused a region with two.
      if (agent != nullptr) {
        return Status::Internal("region " + r.name + " reads two partitioned inputs");
      }
      agent = it->second.get();
      unit = p->id();
    }
    if (agent == nullptr) continue;
    agents->emplace_back(index, agent);
    // The input's pipeline's windows and buffers move with its partitions (Build
    // refused any other state).
    PipelineRunner* reader = Find(unit);
    std::vector<std::pair<std::string, Transform*>> windows;
    for (size_t t = 0; t < reader->spec().transforms.size(); ++t) {
      Transform* tr = reader->transform(t);
      if (tr->Stateful()) windows.emplace_back(layout::TransformUnit(unit, t), tr);
    }
    std::map<std::string, Bucket*> buckets;
    for (Bucket* b : r.buckets) buckets[layout::BucketUnit(b->name())] = b;
    agent->Bind(r.name, r.buckets, windows);
    std::map<std::string, Transform*> transforms(windows.begin(), windows.end());
    // The region's two-phase outputs, by unit: each shard entry names their
    // commit, and a claim asks them whether it took place.
    std::map<std::string, const Output*> two_phase;
    for (auto* cp : r.pipelines) {
      auto* p = static_cast<PipelineRunner*>(cp);
      for (size_t k = 0; k < p->spec().outputs.size(); ++k) {
        const Output* out = p->output(k)->output();
        if (out->TwoPhase()) two_phase[OutputUnitOf(p->spec(), k)] = out;
      }
    }
    if (!two_phase.empty()) {
      agent->SetCommitCheck([two_phase](const std::map<std::string, std::string>& outputs) {
        for (const auto& [unit, state] : outputs) {
          auto it = two_phase.find(unit);
          // An output no longer in the graph: its commits are not this
          // graph's to repeat.
          if (it != two_phase.end() && !it->second->CommitVisible(state)) return false;
        }
        return true;
      });
      r.publish_before_commit = [agent](uint64_t id) { return agent->PublishBeforeCommit(id); };
    }
    r.prepare_shards = [agent, input = layout::InputUnit(unit), buckets, transforms, two_phase](
                           uint64_t id, const std::vector<checkpoint::UnitState>& units,
                           const Checkpointer::Region::ReadChain& read_chain) {
      const std::string* position = nullptr;
      std::map<std::string, const std::string*> fingerprints;
      std::map<std::string, std::string> outputs;
      for (const auto& u : units) {
        fingerprints[u.unit] = &u.fingerprint;
        if (u.unit == input && u.data) position = &*u.data;
        if (two_phase.count(u.unit) && u.data) outputs[u.unit] = *u.data;
      }
      if (position == nullptr) return Status::Ok();
      // A unit's state as checkpoint `id` holds it: its committed chain,
      // compacted into a full state.
      auto full_of = [&](const std::string& unit, std::string* out) -> Status {
        auto fp = fingerprints.find(unit);
        if (fp == fingerprints.end()) {
          return Status::Internal("checkpoint " + std::to_string(id) + " holds no unit " + unit);
        }
        checkpoint::RestoredUnit chain;
        KAYAK_RETURN_IF_ERROR(read_chain(unit, *fp->second, &chain));
        std::vector<std::string_view> deltas(chain.deltas.begin(), chain.deltas.end());
        out->clear();
        if (buckets.count(unit)) return Bucket::Compact(chain.data, deltas, {}, out);
        if (deltas.empty()) {
          out->assign(chain.data.view());
          return Status::Ok();
        }
        return transforms.at(unit)->CompactState(chain.data, deltas, out);
      };
      return agent->Prepare(id, *position, outputs, full_of);
    };
    r.publish_shards = [agent](uint64_t id) { agent->Publish(id); };
  }
  return Status::Ok();
}

Status Engine::ConfirmTwoPhaseCommits(const GraphSpec& spec) {
  const EngineOptions& o = options_;
  if (o.restored == nullptr) return Status::Ok();
  std::set<std::string> fell_back;  // regions of the store
  for (size_t i = 0; i < spec.pipelines.size(); ++i) {
    const PipelineSpec& ps = spec.pipelines[i];
    for (size_t k = 0; k < ps.outputs.size(); ++k) {
      Output* out = pipelines_[i]->output(k)->output();
      if (!out->TwoPhase()) continue;
      auto it = o.restored->find(OutputUnitOf(ps, k));
      if (it == o.restored->end() || it->second.fingerprint != ps.outputs[k].fingerprint ||
          fell_back.count(it->second.region)) {
        continue;
      }
      if (out->WasCommitted(it->second.data)) continue;
      // Checkpoint N is durable but its outputs did not commit it: the
      // inputs still hold what followed checkpoint N-1 (they hear of a
      // checkpoint only after the commit), so the region replays from there.
      const std::string region = it->second.region;
      KLOG_WARN("pipeline {} outputs[{}]: checkpoint {} was not committed to it; region {} goes "
                "back to the checkpoint before and replays",
                ps.id, k, it->second.checkpoint_id, region);
      fell_back.insert(region);
      KAYAK_RETURN_IF_ERROR(o.store->FallBack(region, o.restored));
    }
  }
  return Status::Ok();
}

Engine::~Engine() {
  if (checkpointer_) checkpointer_->Stop();  // releases pipelines waiting at a bucket
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

Status Engine::CommitInitialCheckpoint() {
  // Before any data flows, every region commits its state as it is now
  // (restored, or empty). A crash before the first periodic checkpoint then
  // still restarts from a known cut: the file output knows which parts are
  // its own and rewrites them byte for byte.
  std::map<size_t, std::vector<checkpoint::UnitState>> by_region;
  std::set<size_t> incomplete;
  for (auto& p : pipelines_) {
    auto& units = by_region[p->region()];
    for (auto& u : p->CollectUnits(0)) units.push_back(std::move(u));
    for (size_t i = 0; i < p->spec().outputs.size(); ++i) {
      checkpoint::UnitState u;
      if (Status st = p->output(i)->InitialCheckpoint(&u); st.ok()) {
        units.push_back(std::move(u));
      } else {
        KLOG_WARN("pipeline {} {} cannot start: {}", p->id(), p->spec().OutputName(i),
                  st.message());
        incomplete.insert(p->region());
      }
    }
  }
  return checkpointer_->CommitInitial(std::move(by_region), incomplete);
}

void Engine::Start() {
  started_ = true;
  if (checkpointer_) {
    if (Status st = CommitInitialCheckpoint(); !st.ok()) {
      KLOG_ERROR("the checkpoint taken at start failed: {}; the periodic ones will retry",
                 st.message());
    }
  }
  // Downstream first, so every inbox has its consumer before data arrives.
  for (auto it = pipelines_.rbegin(); it != pipelines_.rend(); ++it) (*it)->Start();
  if (checkpointer_) checkpointer_->Start();
  KLOG_INFO("engine started: {} pipelines, {} buckets", pipelines_.size(),
            buckets_.All().size());
}

std::vector<Checkpointer::Missed> Engine::Stop() {
  std::vector<Checkpointer::Missed> missed;
  if (!started_ || stopped_) return missed;
  stopped_ = true;
  if (checkpointer_) {
    // A savepoint first: sources stop right after its barrier, so the next
    // start replays nothing.
    missed = checkpointer_->Savepoint(options_.stop_timeout_ms);
    if (missed.empty()) {
      KLOG_INFO("savepoint committed; a restart will replay nothing");
    }
    for (const auto& m : missed) {
      KLOG_ERROR("region {} did not reach its savepoint ({}); its pipelines are stopped without "
                 "it, and the next start replays from checkpoint {}",
                 m.region, m.why, m.last_committed_id);
    }
  }
  if (!missed.empty()) {
    // Nothing waits for a stuck output: the coordinator stops (releasing
    // pipelines at a bucket meeting) and every pipeline is aborted. What it
    // held is replayed from the last committed checkpoint.
    checkpointer_->Stop();
    for (auto& p : pipelines_) p->Abort();
  }
  for (auto& p : pipelines_) {
    if (p->is_source()) p->RequestStop();
  }
  // Upstreams first: each pipeline ends once all of its upstreams have.
  for (auto& p : pipelines_) p->Join();
  if (checkpointer_) checkpointer_->Stop();
  KLOG_INFO("engine stopped");
  return missed;
}

}  // namespace kayak
