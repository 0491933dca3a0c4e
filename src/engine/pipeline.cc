#include <algorithm>
#include <exception>

#include <nlohmann/json.hpp>

#include "common/crash_point.h"
#include "common/base64.h"
#include "common/json_text.h"
#include "common/log.h"
#include "common/utf8.h"
#include "checkpoint/chain_policy.h"
#include "engine/engine.h"
#include "checkpoint/state_layout.h"
#include "kayak/thread_annotations.h"

namespace kayak {

namespace {
constexpr int64_t kReadWaitMs = 100;   // longest a pipeline waits for input before ticking
constexpr int64_t kTickEveryMs = 100;  // transform ticks (buffer release, idle expiry)
constexpr int64_t kBackoffMaxMs = 5000;
// How long an input waits for the memory budget before it looks again, and
// how often a pipeline says it still waits.
constexpr int64_t kMemoryWaitMs = 10;
constexpr int64_t kMemoryLogEveryMs = 10000;
}  // namespace

const char* PipelineStatusName(PipelineStatus s) {
  switch (s) {
    case PipelineStatus::kStarting: return "starting";
    case PipelineStatus::kRunning: return "running";
    case PipelineStatus::kFinished: return "finished";
    case PipelineStatus::kFailed: return "failed";
    case PipelineStatus::kStopped: return "stopped";
  }
  return "unknown";
}

// ---------------- OutputRunner ----------------

OutputRunner::OutputRunner(std::unique_ptr<Output> output, ComponentStats* stats,
                           RetryPolicy retry, size_t queue_batches, const Clock* clock,
                           size_t lanes)
    : output_(std::move(output)),
      stats_(stats),
      retry_(retry),
      clock_(clock),
      queue_(lanes, queue_batches),
      lane_ended_(lanes, false),
      lane_barrier_(lanes, 0) {}

void OutputRunner::RefuseTo(OutputRunner* dead_letter, size_t lane, std::string pipeline) {
  dead_letter_ = dead_letter;
  dead_lane_ = lane;
  pipeline_ = std::move(pipeline);
  output_->SetRefusals(&refused_);
}

void OutputRunner::SendRefusals() {
  if (refused_.empty()) return;
  stats_->AddDeadLettered(refused_.size());
  Batch out;
  out.messages.reserve(refused_.size());
  const int64_t now = clock_->NowMs();
  for (auto& r : refused_) {
    out.messages.push_back(DeadLetterEnvelope(&r, pipeline_, *stats_, "", now));
  }
  refused_.clear();
  dead_letter_->queue_.Push(dead_lane_,
                            Item{Item::Kind::kBatch, std::make_shared<const Batch>(std::move(out)), 0});
}

bool OutputRunner::Aligned(size_t lane, uint64_t id) {
  if (queue_.lanes() == 1) return true;
  if (id <= done_barrier_) return false;
  lane_barrier_[lane] = std::max(lane_barrier_[lane], id);
  aligning_ = std::max(aligning_, id);
  // Hold each lane whose barrier arrived; keep reading the others.
  bool all = true;
  for (size_t i = 0; i < lane_barrier_.size(); ++i) {
    const bool arrived = lane_ended_[i] || lane_barrier_[i] >= aligning_;
    queue_.SetHeld(i, arrived && !lane_ended_[i]);
    all = all && arrived;
  }
  if (!all) return false;
  for (size_t i = 0; i < lane_barrier_.size(); ++i) queue_.SetHeld(i, false);
  done_barrier_ = aligning_;
  return true;
}

OutputRunner::~OutputRunner() {
  if (thread_.joinable()) {
    Abort();
    Join();
  }
}

void OutputRunner::Start() { thread_ = std::thread([this] { Run(); }); }

void OutputRunner::Join() {
  if (thread_.joinable()) thread_.join();
}

void OutputRunner::Abort() {
  {
    MutexLock lock(decide_mu_);
    aborted_ = true;
  }
  decide_cv_.notify_all();
  queue_.Close();
  output_->Interrupt();
}

void OutputRunner::Decide(uint64_t id, bool committed) {
  {
    MutexLock lock(decide_mu_);
    decided_ = std::max(decided_, id);
    if (committed) committed_ = std::max(committed_, id);
  }
  decide_cv_.notify_all();
}

void OutputRunner::Backoff(int64_t ms) {
  MutexLock lock(decide_mu_);
  lock.WaitFor(decide_cv_, std::chrono::milliseconds(ms), [&] { return aborted_.load(); });
}

void OutputRunner::AwaitDecision(uint64_t id) {
  {
    MutexLock lock(decide_mu_);
    while (decided_ < id && !aborted_) lock.Wait(decide_cv_);
    // Abandoned: what the checkpoint covered stays pending and goes with the
    // next one.
    if (committed_ != id) return;
  }
  int64_t backoff = retry_.base_ms;
  for (int64_t attempt = 1; !aborted_; ++attempt) {
    Status st = output_->CommitCheckpoint(id);
    if (st.ok()) {
      checkpointer_->OutputCommitted(region_, id);
      return;
    }
    stats_->RecordError("commit of checkpoint " + std::to_string(id) + ": " + st.message());
    KLOG_WARN("output {} ({}): cannot commit checkpoint {} (attempt {}): {}", stats_->name(),
              stats_->type(), id, attempt, st.message());
    if (!st.retryable()) {
      stats_->SetState(ComponentState::kFailed);
      return;
    }
    stats_->SetState(ComponentState::kRetrying);
    stats_->AddRetry();
    Backoff(backoff);
    backoff = std::min(retry_.max_ms, backoff * 2);
  }
}

bool OutputRunner::WriteWithRetry(const Batch& batch) {
  int64_t backoff = retry_.base_ms;
  for (int64_t attempt = 1;; ++attempt) {
    // (What an attempt refused stays: a retry may refuse it again, and the
    // dead letters take it twice then, at least once as any output.)
    // An output that could not start is retried like a failed write.
    Status st = opened_ ? Status::Ok() : output_->Open();
    if (st.ok() && !opened_) {
      opened_ = true;
      KLOG_INFO("output {} ({}) started", stats_->name(), stats_->type());
    }
    if (st.ok()) st = output_->Write(batch);
    if (st.ok()) {
      stats_->SetState(ComponentState::kRunning);
      return true;
    }
    stats_->RecordError(st.message());
    KLOG_WARN("output {} ({}): write failed (attempt {}): {}", stats_->name(), stats_->type(),
              attempt, st.message());
    // Under checkpointing a batch is never dropped: committing past it would
    // lose it. It is retried, holding the pipeline, until the output takes it.
    const bool give_up = checkpointer_ == nullptr &&
                         (!st.retryable() || attempt >= retry_.max_attempts);
    if (give_up || aborted_) {
      KLOG_ERROR("output {} ({}): dropped a batch of {} messages: {}", stats_->name(),
                 stats_->type(), batch.size(), st.message());
      stats_->SetState(st.retryable() ? ComponentState::kRunning : ComponentState::kFailed);
      return false;
    }
    stats_->SetState(ComponentState::kRetrying);
    stats_->AddRetry();
    Backoff(backoff);
    backoff = std::min(retry_.max_ms, backoff * 2);
  }
}

void OutputRunner::SetMemory(MemoryBudget* budget, const std::string& pipeline) {
  queue_memory_ = std::make_unique<MemoryAccount>(budget, pipeline, stats_->name(), "queue");
  buffer_memory_ = std::make_unique<MemoryAccount>(budget, pipeline, stats_->name(), "buffer");
  queue_.ChargeTo(queue_memory_.get());
}

void OutputRunner::TakeBarrier(uint64_t id) {
  checkpoint::UnitState u{unit_, fingerprint_, std::string()};
  Status cst = opened_ ? Status::Ok() : output_->Open();
  if (cst.ok()) {
    opened_ = true;
    cst = output_->Checkpoint(id, &*u.data);
  }
  if (dead_letter_ != nullptr) {
    // What was refused before the barrier (the checkpoint's flush too) is
    // in the dead letters' lane before it.
    SendRefusals();
    dead_letter_->queue_.Push(dead_lane_, Item{Item::Kind::kBarrier, nullptr, id});
  }
  if (!cst.ok()) {
    // No ack: this checkpoint cannot commit and will be abandoned.
    stats_->RecordError("checkpoint " + std::to_string(id) + ": " + cst.message());
    KLOG_ERROR("output {} ({}) cannot make its writes durable for checkpoint {}: {}",
               stats_->name(), stats_->type(), id, cst.message());
    return;
  }
  std::vector<checkpoint::UnitState> units;
  units.push_back(std::move(u));
  checkpointer_->Ack(region_, id, std::move(units));
  if (two_phase_) AwaitDecision(id);
}

Status OutputRunner::InitialCheckpoint(checkpoint::UnitState* unit) {
  Status st = output_->Open();
  opened_ = st.ok();
  initial_open_ = true;
  open_status_ = st;
  if (!st.ok()) return st;
  *unit = checkpoint::UnitState{unit_, fingerprint_, std::string()};
  return output_->Checkpoint(0, &*unit->data);
}

void OutputRunner::Run() {
  Status st = initial_open_ ? open_status_ : output_->Open();
  opened_ = st.ok();
  if (!opened_) {
    stats_->RecordError(st.message());
    KLOG_ERROR("output {} ({}) cannot start: {}; retrying with each batch", stats_->name(),
               stats_->type(), st.message());
    stats_->SetState(ComponentState::kRetrying);
  } else {
    stats_->SetState(ComponentState::kRunning);
  }
  while (!aborted_) {
    Item item;
    size_t lane = 0;
    if (!queue_.Pop(&item, &lane, 500)) {
      if (opened_) output_->Tick(clock_->NowMs());
      if (dead_letter_ != nullptr) SendRefusals();  // what a write finishing now refused
      PublishMemory();
      continue;
    }
    if (item.kind == Item::Kind::kEnd) {
      lane_ended_[lane] = true;
      if (std::all_of(lane_ended_.begin(), lane_ended_.end(), [](bool b) { return b; })) break;
      // An ended lane no longer holds up alignment.
      if (checkpointer_ != nullptr && aligning_ > done_barrier_ && Aligned(lane, aligning_)) {
        TakeBarrier(aligning_);
      }
      continue;
    }
    if (item.kind == Item::Kind::kBarrier) {
      if (checkpointer_ == nullptr) continue;
      if (Aligned(lane, item.barrier_id)) TakeBarrier(queue_.lanes() == 1 ? item.barrier_id : aligning_);
      continue;
    }
    if (item.kind != Item::Kind::kBatch) continue;
    const size_t n = item.batch->size();
    stats_->AddIn(n);
    if (WriteWithRetry(*item.batch)) stats_->AddOut(n);
    if (dead_letter_ != nullptr) SendRefusals();
    PublishMemory();
  }
  if (opened_) {
    Status c = output_->Close();
    if (!c.ok()) stats_->RecordError(c.message());
  }
  if (dead_letter_ != nullptr && !aborted_) {
    SendRefusals();  // what the close refused
    dead_letter_->queue_.Push(dead_lane_, Item{Item::Kind::kEnd, nullptr, 0});
  }
  stats_->SetState(ComponentState::kStopped);
}

// ---------------- PipelineRunner ----------------

PipelineRunner::PipelineRunner(const PipelineSpec& spec, const Clock* clock)
    : id_(spec.id), spec_(spec), clock_(clock) {}

PipelineRunner::~PipelineRunner() {
  if (thread_.joinable()) {
    Abort();
    Join();
  }
  // The components go before their cards: one may still report to its card
  // while it closes (librdkafka calls the kafka input's error callback from
  // rd_kafka_consumer_close when a broker refuses it then).
  outputs_.clear();
  transforms_.clear();
  input_.reset();
}

std::vector<const ComponentStats*> PipelineRunner::cards() const {
  std::vector<const ComponentStats*> out;
  for (const auto& c : cards_) out.push_back(c.get());
  return out;
}

std::vector<std::pair<std::string, size_t>> PipelineRunner::QueueDepths() const {
  std::vector<std::pair<std::string, size_t>> out;
  if (inbox_) {
    for (size_t i = 0; i < inbox_->lanes() && i < spec_.upstreams.size(); ++i) {
      out.emplace_back("edge:" + spec_.upstreams[i], inbox_->Depth(i));
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    out.emplace_back(spec_.OutputName(i), outputs_[i]->queue().TotalDepth());
  }
  return out;
}


void PipelineRunner::SetInput(std::unique_ptr<Input> input, std::unique_ptr<ComponentStats> card) {
  input_ = std::move(input);
  input_card_ = card.get();
  cards_.insert(cards_.begin(), std::move(card));
}

void PipelineRunner::SetUpstreamInbox(std::unique_ptr<Inbox> inbox,
                                      std::unique_ptr<ComponentStats> card) {
  inbox_ = std::move(inbox);
  lane_ended_.assign(inbox_->lanes(), false);
  input_card_ = card.get();
  cards_.insert(cards_.begin(), std::move(card));
}

void PipelineRunner::AddTransform(std::unique_ptr<Transform> t,
                                  std::unique_ptr<ComponentStats> card) {
  transforms_.push_back(std::move(t));
  transform_cards_.push_back(card.get());
  cards_.push_back(std::move(card));
}

void PipelineRunner::AddOutput(std::unique_ptr<OutputRunner> out,
                               std::unique_ptr<ComponentStats> card) {
  outputs_.push_back(std::move(out));
  cards_.push_back(std::move(card));
}

void PipelineRunner::SetMemory(MemoryBudget* budget) {
  memory_ = budget;
  input_memory_ = std::make_unique<MemoryAccount>(budget, id_, "input", inbox_ ? "queue" : "buffer");
  if (inbox_) inbox_->ChargeTo(input_memory_.get());
  transform_memory_.clear();
  for (size_t i = 0; i < transforms_.size(); ++i) {
    transform_memory_.push_back(
        std::make_unique<MemoryAccount>(budget, id_, transform_cards_[i]->name(), "state"));
  }
  for (auto& o : outputs_) o->SetMemory(budget, id_);
}

std::map<std::string, int64_t> PipelineRunner::MemoryUse() const {
  std::map<std::string, int64_t> out;
  if (memory_ == nullptr) return out;
  out["input"] = input_memory_->bytes();
  for (size_t i = 0; i < transform_memory_.size(); ++i) {
    out[transform_memory_[i]->component()] = transform_memory_[i]->bytes();
  }
  for (const auto& o : outputs_) out[o->stats()->name()] = o->memory_bytes();
  return out;
}

void PipelineRunner::PublishMemory() {
  if (memory_ == nullptr) return;
  if (input_) input_memory_->Set(static_cast<int64_t>(input_->MemoryBytes()));
  for (size_t i = 0; i < transforms_.size(); ++i) {
    transform_memory_[i]->Set(static_cast<int64_t>(transforms_[i]->MemoryBytes()));
  }
}

bool PipelineRunner::HeldByMemory() {
  if (memory_ == nullptr) return false;
  if (!memory_->Exceeded()) {
    if (memory_paused_) {
      memory_paused_ = false;
      memory_paused_flag_.store(false, std::memory_order_relaxed);
      memory_->Resumed();
    }
    return false;
  }
  const int64_t now = MonotonicMs();
  if (!memory_paused_) {
    memory_paused_ = true;
    memory_paused_flag_.store(true, std::memory_order_relaxed);
    memory_->Paused();
  }
  if (now - memory_logged_ms_ >= kMemoryLogEveryMs) {
    memory_logged_ms_ = now;
    KLOG_WARN("pipeline {}: input {} waits: the memory budget is {} of {} bytes used (inputs "
              "wait from {}); /api/v1/overview says what holds it",
              id_, input_card_->type(), memory_->Used(), memory_->limit(),
              memory_->high_water());
  }
  SleepUnlessStopped(kMemoryWaitMs);
  return true;
}

void PipelineRunner::SetDeadLetter(size_t k) {
  dead_letter_ = static_cast<int>(k);
  if (input_) input_->SetRefusals(&input_refused_);
  for (size_t j = 0; j < outputs_.size(); ++j) {
    if (j != k) outputs_[j]->RefuseTo(outputs_[k].get(), j + 1, id_);
  }
}

void PipelineRunner::SetCheckpointing(Checkpointer* cp, size_t region,
                                      std::vector<Bucket*> buckets) {
  checkpointer_ = cp;
  region_ = region;
  written_buckets_ = std::move(buckets);
}

void PipelineRunner::RequestBarrier(uint64_t id, bool stop_after) {
  {
    MutexLock lock(stop_mu_);
    if (stop_after) stop_after_barrier_ = id;
    if (id > requested_barrier_) requested_barrier_ = id;
  }
  stop_cv_.notify_all();
}

std::vector<checkpoint::UnitState> PipelineRunner::CollectUnits(uint64_t id) {
  std::vector<checkpoint::UnitState> units;
  const bool full = checkpointer_->FullSave(region_, id);
  if (input_) {
    units.push_back({layout::InputUnit(id_), spec_.input.fingerprint, input_->SavePosition()});
  }
  saved_once_.resize(transforms_.size(), false);
  chains_.resize(transforms_.size());
  for (size_t i = 0; i < transforms_.size(); ++i) {
    Transform* t = transforms_[i].get();
    if (!t->Stateful()) continue;
    checkpoint::UnitState u{layout::TransformUnit(id_, i), spec_.transforms[i].fingerprint,
                            std::nullopt};
    Chain& c = chains_[i];
    if (!saved_once_[i] && restored_.count(i) &&
        checkpointer_->CommittedChain(u.unit, u.fingerprint, &c.base, &c.deltas) &&
        c.base == restored_[i].base && c.deltas == restored_[i].deltas && !t->StateChanged()) {
      // Restored from the chain the store names and unchanged since: the
      // checkpoint refers to it rather than write the state again.
      saved_once_[i] = true;
    }
    if (!saved_once_[i] || full || t->StateChanged()) {
      u.data.emplace();
      // What changed, as a delta on the last full state, while the deltas
      // stay within their share of it (chain::DeltaFits). A checkpoint that
      // fails makes the next one full (FullSave), so the chain counted here
      // is the committed one.
      if (saved_once_[i] && !full && c.base > 0 && t->Compacts() && t->SealDelta()) {
        // Sealed in constant time; encoded on the coordinator's thread.
        u.delta = true;
        u.collect = [t](std::string* out) { return t->CollectDelta(out); };
        u.compact = [t](std::string_view base, const std::vector<std::string_view>& deltas,
                        std::string* out) { return t->CompactState(base, deltas, out); };
      } else if (saved_once_[i] && !full && c.base > 0 && t->SaveDelta(&*u.data)) {
        u.delta = true;
        if (t->Compacts()) {
          // The coordinator keeps the chain within its share, compacting it
          // off this thread.
          u.compact = [t](std::string_view base, const std::vector<std::string_view>& deltas,
                          std::string* out) { return t->CompactState(base, deltas, out); };
        } else if (!chain::DeltaFits(c.base, c.deltas, u.data->size(), /*compacted=*/false)) {
          u.data->clear();  // past its share: the whole state instead
          u.delta = false;
        } else {
          c.deltas += u.data->size();
        }
      }
      if (!u.delta) {
        t->SaveState(&*u.data);
        c = Chain{u.data->size(), 0};
      }
      saved_once_[i] = true;
    }
    units.push_back(std::move(u));
  }
  return units;
}

bool PipelineRunner::CommittedPosition(const std::vector<checkpoint::UnitState>& units,
                                       std::string* position) const {
  if (!input_) return false;
  const std::string unit = layout::InputUnit(id_);
  for (const auto& u : units) {
    if (u.unit == unit && u.data) {
      *position = *u.data;
      return true;
    }
  }
  return false;
}

void PipelineRunner::InputCommitted(std::string_view position) { input_->Committed(position); }

void PipelineRunner::DoBarrier(uint64_t id) {
  done_barrier_ = id;
  if (guard_.on()) {
    // How many messages had entered at each barrier not known committed
    // yet: a restart replays from the newest committed one.
    barrier_counts_.emplace_back(id, processed_);
    if (barrier_counts_.size() > 64) barrier_counts_.pop_front();
    const uint64_t committed = checkpointer_->LastCommitted(region_);
    while (!barrier_counts_.empty() && barrier_counts_.front().first <= committed) {
      if (barrier_counts_.front().first == committed) replay_base_ = barrier_counts_.front().second;
      barrier_counts_.pop_front();
    }
  }
  // Past a savepoint's barrier nothing is released by a timer: what the
  // transforms hold is in the savepoint, and released after the restart.
  if (checkpointer_->IsSavepoint(region_, id)) past_savepoint_ = true;
  auto t0 = std::chrono::steady_clock::now();
  checkpointer_->Ack(region_, id, CollectUnits(id));
  auto paused = std::chrono::steady_clock::now() - t0;
  // The barrier travels behind everything sent before it. (A full queue
  // blocks here as it would for a batch: backpressure, not a pause.)
  for (auto& o : outputs_) o->Push(Item{Item::Kind::kBarrier, nullptr, id});
  for (auto& e : downstream_) e.inbox->Push(e.lane, Item{Item::Kind::kBarrier, nullptr, id});
  // Writers of a shared bucket meet here before any writes past the cut.
  t0 = std::chrono::steady_clock::now();
  for (Bucket* b : written_buckets_) checkpointer_->ArriveAtBucket(region_, id, b);
  paused += std::chrono::steady_clock::now() - t0;
  checkpointer_->BarrierPause(
      region_, id, std::chrono::duration_cast<std::chrono::microseconds>(paused).count());
}

void PipelineRunner::OnUpstreamBarrier(size_t lane, uint64_t id) {
  if (checkpointer_ == nullptr || id <= done_barrier_) return;
  lane_barrier_.resize(inbox_->lanes(), 0);
  lane_barrier_[lane] = std::max(lane_barrier_[lane], id);
  aligning_ = std::max(aligning_, id);
  // Hold each lane whose barrier arrived; keep reading the others.
  bool all = true;
  for (size_t i = 0; i < lane_barrier_.size(); ++i) {
    const bool arrived = lane_ended_[i] || lane_barrier_[i] >= aligning_;
    inbox_->SetHeld(i, arrived && !lane_ended_[i]);
    all = all && arrived;
  }
  if (!all) return;
  DoBarrier(aligning_);
  for (size_t i = 0; i < lane_barrier_.size(); ++i) inbox_->SetHeld(i, false);
}

void PipelineRunner::Start() {
  for (auto& o : outputs_) o->Start();
  thread_ = std::thread([this] { Run(); });
}

void PipelineRunner::RequestStop() {
  {
    MutexLock lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
}

void PipelineRunner::Join() {
  if (thread_.joinable()) thread_.join();
  for (auto& o : outputs_) o->Join();
}

void PipelineRunner::Abort() {
  RequestStop();
  if (inbox_) inbox_->Close();
  for (auto& o : outputs_) o->Abort();
  for (auto& e : downstream_) e.inbox->Close();
}

void PipelineRunner::SleepUnlessStopped(int64_t ms) {
  MutexLock lock(stop_mu_);
  lock.WaitFor(stop_cv_, std::chrono::milliseconds(ms),
                    [&] { return stop_.load() || requested_barrier_.load() > done_barrier_; });
}

bool PipelineRunner::ReadSource(Batch* batch) {
  if (input_done_) {
    SleepUnlessStopped(kReadWaitMs);
    return false;
  }
  bool finished = false;
  Status st = input_->Read(batch, kReadWaitMs, &finished);
  if (!st.ok()) {
    input_card_->RecordError(st.message());
    if (st.retryable()) {
      input_card_->SetState(ComponentState::kRetrying);
      backoff_ms_ = backoff_ms_ == 0 ? 100 : std::min(kBackoffMaxMs, backoff_ms_ * 2);
      KLOG_WARN("pipeline {}: input {} failed, retrying in {} ms: {}", id_,
                input_card_->type(), backoff_ms_, st.message());
      SleepUnlessStopped(backoff_ms_);
    } else {
      KLOG_ERROR("pipeline {}: input {} failed: {}", id_, input_card_->type(), st.message());
      input_card_->SetState(ComponentState::kFailed);
      status_ = PipelineStatus::kFailed;
      input_done_ = true;
    }
  } else {
    backoff_ms_ = 0;
    if (input_card_->state() == ComponentState::kRetrying) {
      input_card_->SetState(ComponentState::kRunning);
    }
  }
  if (finished && !input_done_) {
    input_done_ = true;
    input_card_->SetState(ComponentState::kFinished);
    status_ = PipelineStatus::kFinished;
    KLOG_INFO("pipeline {}: input {} finished", id_, input_card_->type());
  }
  // The input counted each on its card as it refused it.
  if (!input_refused_.empty()) DeadLetter(&input_refused_, input_card_);
  if (!batch->empty()) {
    input_card_->AddIn(batch->size());
    input_card_->AddOut(batch->size());
    if (checkpointer_ != nullptr && Mutation("ack_on_read")) {
      checkpointer_->AcknowledgeUncommitted(this, input_->SavePosition());
    }
  }
  return !batch->empty();
}

bool PipelineRunner::ReadUpstream(Batch* batch, bool* all_ended) {
  Item item;
  size_t lane = 0;
  if (!inbox_->Pop(&item, &lane, kReadWaitMs)) return false;
  if (item.kind == Item::Kind::kEnd) {
    lane_ended_[lane] = true;
    *all_ended = std::all_of(lane_ended_.begin(), lane_ended_.end(), [](bool b) { return b; });
    // An ended lane no longer holds up alignment.
    if (!*all_ended && aligning_ > done_barrier_) OnUpstreamBarrier(lane, aligning_);
    return false;
  }
  if (item.kind == Item::Kind::kBarrier) {
    OnUpstreamBarrier(lane, item.barrier_id);
    return false;
  }
  if (item.kind != Item::Kind::kBatch || item.batch->empty()) return false;
  // Batches are shared with siblings; this pipeline transforms its own copy.
  batch->messages = item.batch->messages;
  input_card_->AddIn(batch->size());
  input_card_->AddOut(batch->size());
  return true;
}

void PipelineRunner::OpenCrashGuard() {
  if (crash_path_.empty() || transforms_.empty()) return;
  CrashGuard::LastRun last;
  if (Status st = guard_.Open(crash_path_, &last); !st.ok()) {
    KLOG_WARN("pipeline {}: no crash marks (a message the process dies on will not be set "
              "aside): {}",
              id_, st.message());
    return;
  }
  death_stage_ = std::min<uint32_t>(last.stage, static_cast<uint32_t>(transforms_.size() - 1));
  if (last.damaged) {
    KLOG_WARN("pipeline {}: its crash marks ({}) did not check; started afresh", id_, crash_path_);
  }
  if (!last.died) return;
  const ComponentStats* card = transform_cards_[death_stage_];
  if (last.alone) {
    KLOG_WARN("pipeline {}: the process died with one message ({:016x}) in transform {} ({}), "
              "{} time{} in a row; {}",
              id_, last.hash, card->name(), card->type(), last.deaths,
              last.deaths == 1 ? "" : "s",
              last.deaths >= CrashGuard::kDeathsToSetAside
                  ? "it is set aside when the replay brings it"
                  : "the replay goes one message at a time again");
  } else {
    KLOG_WARN("pipeline {}: the process died with a batch of {} messages in transform {} ({}); "
              "the next {} messages go through one at a time, so that one that stops it again "
              "is found",
              id_, last.batch, card->name(), card->type(), last.careful_for);
  }
}

void PipelineRunner::SetAsideMessage(const Message& m, size_t first) {
  const size_t stage = std::max<size_t>(death_stage_, first);
  ComponentStats* card = transform_cards_[stage];
  card->AddSetAside();
  const std::string where = input_ ? input_->Position() : std::string("its upstream pipelines");
  card->RecordError("set aside a message (" + std::to_string(m.payload().size()) +
                    " bytes) the process died on " +
                    std::to_string(CrashGuard::kDeathsToSetAside + 1) + " times in a row");
  KLOG_ERROR("pipeline {}: set aside a message of {} bytes (hash {:016x}) that the process died "
             "on {} times in a row in transform {} ({}); read from {}, at {}",
             id_, m.payload().size(), CrashGuard::Hash(m.payload()),
             CrashGuard::kDeathsToSetAside + 1, card->name(), card->type(),
             input_ ? input_card_->type() : "upstream", where);
  if (dead_letter_ >= 0) {
    std::vector<Rejected> one;
    one.push_back(Rejected{m, "the process died on it " +
                                  std::to_string(CrashGuard::kDeathsToSetAside + 1) +
                                  " times in a row"});
    DeadLetter(&one, card);
  }
}

void PipelineRunner::Run() {
  OpenCrashGuard();
  for (auto* c : transform_cards_) c->SetState(ComponentState::kRunning);
  if (input_) {
    Status st = input_->Open();
    if (!st.ok()) {
      input_card_->RecordError(st.message());
      input_card_->SetState(ComponentState::kFailed);
      KLOG_ERROR("pipeline {}: input {} cannot start: {}", id_, input_card_->type(),
                 st.message());
      status_ = PipelineStatus::kFailed;
      input_done_ = true;
    } else {
      input_card_->SetState(ComponentState::kRunning);
    }
  } else {
    input_card_->SetState(ComponentState::kRunning);
  }
  // Running once the input is open (an http input serves from then on).
  if (status_ != PipelineStatus::kFailed) status_ = PipelineStatus::kRunning;
  last_tick_ms_ = MonotonicMs();
  while (true) {
    Batch batch;
    if (input_) {
      const uint64_t want = requested_barrier_.load();
      if (checkpointer_ != nullptr && want > done_barrier_) {
        DoBarrier(want);
        if (stop_after_barrier_.load() == want) break;  // a savepoint: nothing after it
      }
      if (stop_) break;
      if (!HeldByMemory() && ReadSource(&batch)) RunChain(std::move(batch), 0);
    } else {
      bool all_ended = false;
      if (ReadUpstream(&batch, &all_ended)) RunChain(std::move(batch), 0);
      // Only an abort stops a downstream pipeline before its upstreams end
      // (its inbox is closed then, and their ends may never arrive).
      if (all_ended || stop_) break;
    }
    PublishMemory();
    const int64_t mono = MonotonicMs();
    if (mono - last_tick_ms_ >= kTickEveryMs) {
      last_tick_ms_ = mono;
      TickTransforms(clock_->NowMs());
      if (input_) {
        input_card_->SetPosition(input_->Position());
        const Input::Lag lag = input_->Behind();
        input_card_->SetLag(lag.value, lag.unit);
        if (lag.value == 0 && MessagesRead() > 0) caught_up_.store(true, std::memory_order_relaxed);
      }
    }
  }
  // Graceful stop without a state dir: an input that acknowledged data it
  // has not handed over yet (the http input's queue) gives it up first.
  if (input_ && checkpointer_ == nullptr && !input_done_ && input_->StopAccepting()) {
    for (Batch rest; ReadSource(&rest); rest = Batch{}) RunChain(std::move(rest), 0);
  }
  // Graceful stop without a state dir: release what transforms hold so
  // nothing accepted is lost. With one, the savepoint holds it instead.
  for (size_t i = 0; checkpointer_ == nullptr && i < transforms_.size(); ++i) {
    Batch held;
    transforms_[i]->Drain(&held);
    if (!held.empty()) RunChain(std::move(held), i + 1);
  }
  for (auto& o : outputs_) o->Push(Item{Item::Kind::kEnd, nullptr, 0});
  for (auto& e : downstream_) e.inbox->Push(e.lane, Item{Item::Kind::kEnd, nullptr, 0});
  if (memory_paused_) {
    memory_paused_ = false;
    memory_paused_flag_.store(false, std::memory_order_relaxed);
    memory_->Resumed();
  }
  if (input_card_->state() != ComponentState::kFailed) {
    input_card_->SetState(ComponentState::kStopped);
  }
  for (auto* c : transform_cards_) c->SetState(ComponentState::kStopped);
  if (status_ != PipelineStatus::kFailed) status_ = PipelineStatus::kStopped;
}

void PipelineRunner::TickTransforms(int64_t now_ms) {
  if (past_savepoint_) return;
  for (size_t i = 0; i < transforms_.size(); ++i) {
    Batch due;
    transforms_[i]->Tick(now_ms, &due);
    if (!due.empty()) {
      transform_cards_[i]->AddOut(due.size());
      RunChain(std::move(due), i + 1);
    }
  }
}

void PipelineRunner::RunChain(Batch batch, size_t first) {
  if (first >= transforms_.size()) return Emit(std::move(batch));
  if (first > 0 || !guard_.on()) return RunBatch(std::move(batch), first);
  // After a death: the messages before where it died pass as usual...
  if (const uint64_t skip = guard_.to_skip(); skip > 0) {
    if (skip >= batch.size()) {
      guard_.Skipped(batch.size());
      return RunBatch(std::move(batch), 0);
    }
    Batch head;
    head.messages.reserve(skip);
    for (size_t i = 0; i < skip; ++i) head.messages.push_back(std::move(batch.messages[i]));
    batch.messages.erase(batch.messages.begin(), batch.messages.begin() + skip);
    guard_.Skipped(skip);
    RunBatch(std::move(head), 0);
  }
  // ...then the ones around it, one at a time.
  if (guard_.careful()) {
    Batch out;
    RunOneByOne(&batch, 0, &out);
    return Emit(std::move(out));
  }
  RunBatch(std::move(batch), 0);
}

void PipelineRunner::RunBatch(Batch batch, size_t first) {
  const size_t n = batch.size();
  const bool marked = first == 0;
  if (marked) guard_.EnterBatch(static_cast<uint32_t>(n), 0, Replay());
  if (!per_message_ || n <= 1) {
    const bool ok = RunTransforms(&batch, first);
    if (marked) {
      guard_.Left();
      processed_ += n;
    }
    if (ok) Emit(std::move(batch));
    return;
  }
  Batch out;
  RunOneByOne(&batch, first, &out);
  if (marked) guard_.Left();
  Emit(std::move(out));
}

void PipelineRunner::RunOneByOne(Batch* batch, size_t first, Batch* out) {
  const bool careful = guard_.careful();
  out->messages.reserve(batch->size());
  Batch one;
  for (auto& m : batch->messages) {
    if (careful) {
      const uint64_t hash = CrashGuard::Hash(m.payload());
      if (guard_.SetAside(hash)) {
        SetAsideMessage(m, first);
        continue;
      }
      guard_.EnterOne(hash, static_cast<uint32_t>(first), Replay());
    }
    one.messages.clear();
    one.messages.push_back(std::move(m));
    const bool ok = RunTransforms(&one, first);
    if (careful) guard_.Left();
    if (first == 0) ++processed_;
    if (!ok) continue;
    for (auto& r : one.messages) out->messages.push_back(std::move(r));
  }
}

bool PipelineRunner::RunTransforms(Batch* batch, size_t first) {
  for (size_t i = first; i < transforms_.size(); ++i) {
    ComponentStats* card = transform_cards_[i];
    if (i > first) guard_.AtStage(static_cast<uint32_t>(i));
    if (const char* text = CrashOnPayloadText(); text != nullptr) {
      for (const auto& m : batch->messages) CrashOnPayload(m.payload(), text);
    }
    card->AddIn(batch->size());
    Status st;
    // With a dead-letter output, a message the transform fails on goes
    // there and the rest of the batch goes on.
    if (dead_letter_ >= 0) batch->rejected = &rejected_;
    // A transform that throws on a message (a library's exception, an
    // allocation that failed) fails that batch like an error it returns,
    // not the process: a replay after a restart would throw again.
    try {
      st = transforms_[i]->Process(batch);
    } catch (const std::exception& e) {
      st = Status::Internal(std::string("the transform threw: ") + e.what());
    }
    batch->rejected = nullptr;
    if (!rejected_.empty()) {
      card->RecordError(rejected_.back().reason, rejected_.size());
      DeadLetter(&rejected_, card);
    }
    if (!st.ok()) {
      card->RecordError(st.message());
      if (dead_letter_ >= 0) {
        // Failed as a whole: every message of it goes to the dead letters.
        for (auto& m : batch->messages) rejected_.push_back(Rejected{std::move(m), st.message()});
        batch->messages.clear();
        DeadLetter(&rejected_, card);
        return false;
      }
      KLOG_WARN("pipeline {}: transform {} ({}) dropped a batch of {} messages: {}", id_,
                card->name(), card->type(), batch->size(), st.message());
      return false;
    }
    card->AddOut(batch->size());
    if (batch->empty()) return false;
  }
  return true;
}

namespace {

// `s` with each byte that does not begin well-formed UTF-8 as '?', for a
// JSON string.
std::string SafeText(std::string s) {
  for (size_t at = FirstInvalidUtf8(s); at < s.size();
       at = at + 1 + FirstInvalidUtf8(std::string_view(s).substr(at + 1))) {
    s[at] = '?';
  }
  return s;
}

}  // namespace

Message DeadLetterEnvelope(Rejected* r, const std::string& pipeline, const ComponentStats& card,
                           const std::string& position, int64_t now_ms) {
  std::string env = "{\"reason\":";
  jtext::AppendString(&env, SafeText(r->reason));
  env += ",\"pipeline\":";
  jtext::AppendString(&env, pipeline);
  env += ",\"component\":";
  jtext::AppendString(&env, card.name());
  env += ",\"type\":";
  jtext::AppendString(&env, card.type());
  env += ",\"position\":";
  jtext::AppendString(&env, SafeText(position));
  env += ",\"at_ms\":";
  jtext::AppendInt(&env, now_ms);
  env += ",\"ts_ms\":";
  jtext::AppendInt(&env, r->message.ts_ms());
  const std::string& payload = r->message.payload();
  if (nlohmann::json::accept(payload)) {
    env += ",\"message\":";
    env += payload;
  } else if (FirstInvalidUtf8(payload) == payload.size()) {
    env += ",\"message_text\":";
    jtext::AppendString(&env, payload);
  } else {
    env += ",\"message_base64\":";
    env += '"';
    AppendBase64(payload, &env);
    env += '"';
  }
  env += "}";
  Message m(std::move(env), r->message.ts_ms());
  m.MarkJson();
  m.set_key(r->message.key());
  m.headers() = std::move(r->message.headers());
  return m;
}

void PipelineRunner::DeadLetter(std::vector<Rejected>* rejected, ComponentStats* card) {
  card->AddDeadLettered(rejected->size());
  Batch out;
  out.messages.reserve(rejected->size());
  const std::string position = input_ ? input_->Position() : std::string("upstream");
  const int64_t now = clock_->NowMs();
  for (auto& r : *rejected) out.messages.push_back(DeadLetterEnvelope(&r, id_, *card, position, now));
  rejected->clear();
  auto shared = std::make_shared<const Batch>(std::move(out));
  outputs_[static_cast<size_t>(dead_letter_)]->Push(Item{Item::Kind::kBatch, shared, 0, 0});
}

void PipelineRunner::Emit(Batch batch) {
  if (batch.empty()) return;
  batch.DropFields();  // only the transforms read them
  auto shared = std::make_shared<const Batch>(std::move(batch));
  // Counted once for every queue it waits in (each holds it until it is
  // taken: a conservative charge).
  const int64_t bytes = memory_ != nullptr ? BatchMemoryBytes(*shared) : 0;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    if (static_cast<int>(k) != dead_letter_) {
      outputs_[k]->Push(Item{Item::Kind::kBatch, shared, 0, bytes});
    }
  }
  for (auto& e : downstream_) e.inbox->Push(e.lane, Item{Item::Kind::kBatch, shared, 0, bytes});
}

}  // namespace kayak
