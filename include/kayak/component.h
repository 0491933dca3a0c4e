// The component SDK: inputs, transforms, outputs, the card each one reports
// on, and the declaration that makes one (ComponentDef: a property table and
// a factory; docs/connectors.md). A component is built against this header,
// the others in include/kayak/ and src/common/; it sees no YAML, no engine
// and no server. The engine owns the threads.
//
// Threading: an input and its pipeline's transforms are called only from that
// pipeline's thread. An output is called only from its own output thread.
// ComponentStats is written by the owning thread and read by the API thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kayak/message.h"
#include "kayak/status.h"
#include "kayak/memory.h"
#include "kayak/thread_annotations.h"

namespace kayak {

class Clock;
class BucketRegistry;
class IngestRouter;

enum class ComponentState { kStarting, kRunning, kRetrying, kFailed, kStopped, kFinished };
const char* ComponentStateName(ComponentState s);

// The numbers on a component's card.
class ComponentStats {
 public:
  ComponentStats(std::string name, std::string kind, std::string type)
      : name_(std::move(name)), kind_(std::move(kind)), type_(std::move(type)) {}

  const std::string& name() const { return name_; }  // "input", "transforms[0]", ...
  const std::string& kind() const { return kind_; }  // input | transform | output
  const std::string& type() const { return type_; }  // file, filter, ...

  void AddIn(uint64_t n) { in_.fetch_add(n, std::memory_order_relaxed); }
  void AddOut(uint64_t n) { out_.fetch_add(n, std::memory_order_relaxed); }
  // `count` errors (messages) with one last_error.
  void RecordError(const std::string& message, uint64_t count = 1);
  // Also records when the state last changed (wall clock), so a card can say
  // "retrying since T".
  void SetState(ComponentState s);

  uint64_t in() const { return in_.load(std::memory_order_relaxed); }
  uint64_t out() const { return out_.load(std::memory_order_relaxed); }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  ComponentState state() const { return static_cast<ComponentState>(state_.load()); }
  // Wall-clock milliseconds of the last change of state() (0: never changed).
  int64_t state_since_ms() const { return state_since_ms_.load(std::memory_order_relaxed); }
  std::string last_error() const;
  // Wall-clock milliseconds of the last error (0: none yet).
  int64_t last_error_ms() const;
  // An input's position, published by its pipeline thread for the card.
  void SetPosition(std::string position);
  std::string position() const;
  // How far an input is behind the newest data it knows of (-1: it does not
  // know), in `unit` ("bytes" or "messages"); published with the position.
  void SetLag(int64_t lag, const char* unit) {
    lag_unit_.store(unit, std::memory_order_relaxed);
    lag_.store(lag, std::memory_order_relaxed);
  }
  int64_t lag() const { return lag_.load(std::memory_order_relaxed); }
  const char* lag_unit() const { return lag_unit_.load(std::memory_order_relaxed); }
  // An output's write or commit tried again after a failure.
  void AddRetry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t retries() const { return retries_.load(std::memory_order_relaxed); }
  // A transform's message set aside: the process died with it inside the
  // transform (docs/durability.md, "A message that stops the process").
  void AddSetAside() { set_aside_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t set_aside() const { return set_aside_.load(std::memory_order_relaxed); }
  // Messages sent to the pipeline's dead-letter output from this component.
  void AddDeadLettered(uint64_t n) { dead_lettered_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t dead_lettered() const { return dead_lettered_.load(std::memory_order_relaxed); }

 private:
  const std::string name_, kind_, type_;
  std::atomic<uint64_t> in_{0}, out_{0}, errors_{0}, retries_{0}, set_aside_{0}, dead_lettered_{0};
  std::atomic<int64_t> lag_{-1};
  std::atomic<const char*> lag_unit_{""};
  std::atomic<int> state_{static_cast<int>(ComponentState::kStarting)};
  std::atomic<int64_t> state_since_ms_{0};
  mutable Mutex mu_;
  std::string last_error_ KAYAK_GUARDED_BY(mu_);
  int64_t last_error_ms_ KAYAK_GUARDED_BY(mu_) = 0;
  std::string position_ KAYAK_GUARDED_BY(mu_);
};

// What a component is given when it is built.
// In a cluster (docs/cluster.md): what a kafka input tells of the partitions
// its consumer group gives it, so its region's keyed state follows them. Each
// partition is a shard; the owner restores a shard's state from the cluster's
// store before it reads the partition, and the input reads from where that
// state stops. Called on the input's own thread, from the rebalance callback.
class PartitionOwner {
 public:
  virtual ~PartitionOwner() = default;
  // The server's member name in the cluster (its group.instance.id).
  virtual const std::string& member() const = 0;
  // The librdkafka `partitioner` that puts a key on the partition the
  // cluster expects it on ("consistent_random" for crc32, "murmur2_random"
  // for murmur2): what a kafka output in the cluster partitions by unless its
  // properties say otherwise, so a topic it writes can be read back as shards.
  virtual const char* producer_partitioner() const { return "consistent_random"; }
  struct Assigned {
    std::string topic;
    int32_t partition = 0;
    int32_t partitions = 0;  // the topic's partition count
    // In: the input still holds a position of its own for the partition.
    bool have_position = false;
    // Out: keep reading from the input's own position (the state it holds
    // is this server's and current), or resume at `offset` (< 0: the
    // group's committed offset; the shard has no checkpoint yet).
    bool keep = false;
    int64_t offset = -1;
  };
  // The group's whole assignment now (eager protocol). Shards this server
  // had and is not given any more lose their keys here; each one given is
  // kept or claimed and restored. An error (the store cannot be read): the
  // input must not read the partitions yet and asks again later.
  virtual Status Assign(std::vector<Assigned>* parts) = 0;
  // The input's progress on a partition it reads: `next`, the next offset it
  // hands over, and `lag`, the messages behind the partition's end (< 0: not
  // known yet). On the input's thread, about once a second.
  virtual void Progress(const std::string& topic, int32_t partition, int64_t next, int64_t lag) {
    (void)topic;
    (void)partition;
    (void)next;
    (void)lag;
  }
  // The group takes the partitions back (eager protocol: all of them). True:
  // the owner has asked for a checkpoint, and the input holds them, paused
  // and reading nothing more, until HandedOver(); the next owner of each
  // then goes on from exactly where this one stopped. False: let go now.
  virtual bool HandOver() { return false; }
  // A checkpoint begun after HandOver() is published (or failed to be):
  // the input may let the partitions go. On the input's thread.
  virtual bool HandedOver() { return true; }
  // Before the first assignment (what a restart restored may be of
  // partitions that moved meanwhile) and from HandOver() until the next one
  // (the state of the partitions handed over is in the checkpoint their next
  // owner restores): what changes with no new input waits (a buffer releases
  // nothing by time). On the pipeline's thread.
  virtual bool StateHeld() const { return false; }
  // An exactly-once output of the region can commit nothing more (another
  // member fenced its transactions): the server restarts the region, which
  // goes on from the last checkpoint its outputs committed. Any thread;
  // does not wait for the restart.
  virtual void Fenced() {}
};

struct ComponentContext {
  const Clock* clock = nullptr;
  std::string pipeline_id;
  BucketRegistry* buckets = nullptr;  // shared keyed state
  ComponentStats* stats = nullptr;    // the component's own card (count skipped input)
  bool checkpointing = false;         // the server runs with --state-dir
  // With checkpointing, for an input whose definition asks for one
  // (`private_dir`): a directory of its own under the state directory, made
  // by the engine before the input is built and removed with its pipeline.
  // Empty otherwise. A component keeps its files there and nowhere else.
  std::string private_dir;
  IngestRouter* ingest = nullptr;     // where http inputs register their paths
  MemoryPressure* memory = nullptr;   // the server's memory budget; null: none
  // The input's pipeline has transforms: an input that finds where a
  // message's fields are as it checks it keeps that for them
  // (Batch::KeepFields); without transforms nobody would read it.
  bool transforms_follow = false;
  // In a cluster, for a kafka input: who keeps its region's shards. Null
  // otherwise.
  PartitionOwner* partitions = nullptr;
  // With checkpointing: a name of the state directory, the same across the
  // server's restarts on it and another for another directory (a keyed
  // hash under its key; 16 hex digits). What a consumer names itself by to
  // take its own place back after a kill (a kafka input's static
  // membership). Empty otherwise.
  std::string instance_id;
};

// Where a component sends what it will never handle, with why: its
// pipeline's dead-letter output (docs/config.md, "Dead letters"), when it
// has one. Set by the engine before the component runs; used on the
// component's own thread (an input's pipeline thread, an output's thread).
class Refusals {
 public:
  void SetRefusals(std::vector<Rejected>* sink) { refusals_ = sink; }
  // `m` goes to the dead letters with `reason`: true. False without a
  // dead-letter output: the caller drops and counts it as it would anyway.
  bool Refuse(const Message& m, std::string reason) {
    if (refusals_ == nullptr) return false;
    refusals_->push_back(Rejected{m, std::move(reason)});
    return true;
  }
  bool Refuse(std::string_view bytes, int64_t ts_ms, std::string reason) {
    if (refusals_ == nullptr) return false;
    refusals_->push_back(Rejected{Message(std::string(bytes), ts_ms), std::move(reason)});
    return true;
  }

 private:
  std::vector<Rejected>* refusals_ = nullptr;
};

class Input : public Refusals {
 public:
  virtual ~Input() = default;
  // Opens files or connections. Called on the pipeline thread before Read.
  virtual Status Open() { return Status::Ok(); }
  // Appends up to one batch of messages to `out`, waiting at most `wait_ms`
  // for the first one. Sets `*finished` when a finite input has nothing more
  // to give. A retryable error is retried with backoff by the pipeline.
  virtual Status Read(Batch* out, int64_t wait_ms, bool* finished) = 0;
  // A graceful stop without a state directory: refuse new data from now on.
  // True if data already accepted (acknowledged to a client) must still be
  // read: the pipeline then reads until Read returns nothing.
  virtual bool StopAccepting() { return false; }
  // What the input holds in memory of its own now (accepted data not read
  // yet), roughly, for the server's memory budget. The pipeline thread.
  virtual size_t MemoryBytes() const { return 0; }
  // A human-readable position for the card ("offset 1234 of a.ndjson").
  virtual std::string Position() const { return ""; }
  // How far behind the newest data it knows of the input is, for the card
  // and /metrics: bytes of a file not read yet, messages of a partition not
  // fetched yet, posts logged and not read. Called on the pipeline thread.
  struct Lag {
    int64_t value = -1;  // -1: not known
    const char* unit = "";  // "bytes" or "messages"
  };
  virtual Lag Behind() const { return {}; }

  // ---- checkpointing (with --state-dir) ----
  // Whether a restart can rewind this input to a checkpointed position.
  virtual bool Rewindable() const { return false; }
  // The position just after the last message handed over.
  virtual std::string SavePosition() const { return ""; }
  // Seeks to a position SavePosition() produced. Called before Open().
  virtual Status RestorePosition(std::string_view position) {
    (void)position;
    return Status::Ok();
  }
  // A checkpoint holding `position` (from SavePosition) is committed. Called
  // on the acknowledgement thread, off the checkpoint coordinator; a call
  // covers every position before it, and one not yet made is skipped when
  // a newer checkpoint commits first. Inputs that keep data until it is
  // covered (the http log) release it here; acknowledgements to a server
  // (XACK, offsets) go out here, bounded by the connector's request timeout.
  virtual void Committed(std::string_view position) { (void)position; }
};

class Transform {
 public:
  virtual ~Transform() = default;
  // Transforms `batch` in place. It may remove messages (filter) or take them
  // into its own state and release them later (buffer). An error drops the
  // batch.
  virtual Status Process(Batch* batch) = 0;
  // Called about every 100 ms with the wall-clock time: release what is due
  // into `out`, expire idle state.
  virtual void Tick(int64_t now_ms, Batch* out) {
    (void)now_ms;
    (void)out;
  }
  // Releases everything held, into `out`. Called once when the pipeline stops
  // without a state directory, so nothing accepted is lost.
  virtual void Drain(Batch* out) { (void)out; }

  // What the transform holds in memory now (its state, what it buffers),
  // roughly, for the server's memory budget. The pipeline thread.
  virtual size_t MemoryBytes() const { return 0; }

  // ---- checkpointing (with --state-dir) ----
  // True if the transform holds state that belongs in a checkpoint.
  virtual bool Stateful() const { return false; }
  // True if the state changed since the last SaveState(); an unchanged
  // state is not copied again, the checkpoint refers to the earlier copy.
  virtual bool StateChanged() const { return false; }
  // Appends a copy of the state to `out` and clears StateChanged().
  virtual void SaveState(std::string* out) { (void)out; }
  // Replaces the state with one SaveState() wrote. Wall-clock times in it
  // (last writes) are kept, so idle timeouts count the downtime.
  virtual Status RestoreState(std::string_view data) {
    (void)data;
    return Status::Ok();
  }
  // Optional delta checkpoints: appends only what changed since the last
  // SaveState() or SaveDelta() to `out`, clears StateChanged() and returns
  // true; false (and nothing written, nothing cleared) if the transform
  // keeps no deltas. The checkpoint then holds the last full state and the
  // deltas after it, applied in order by ApplyDelta() after RestoreState().
  virtual bool SaveDelta(std::string* out) {
    (void)out;
    return false;
  }
  virtual Status ApplyDelta(std::string_view data) {
    (void)data;
    return Status::Corruption("this transform keeps no deltas");
  }
  // Optional, for a transform that keeps deltas: the barrier's snapshot in
  // constant time. SealDelta() sets aside what SaveDelta() would write now,
  // clears StateChanged() and returns true (false: not supported, or not
  // possible now; SaveDelta() or SaveState() run instead). The pipeline goes
  // on at once: CollectDelta() writes the sealed delta, as it was at the
  // seal, on the checkpoint coordinator's thread while Process() and Tick()
  // go on (a transform that seals makes the two safe together: it keeps a
  // key's sealed contents aside before it changes it, copy on write). A
  // SaveState() before the seal is collected abandons it (CollectDelta()
  // then fails, and so does the checkpoint).
  virtual bool SealDelta() { return false; }
  virtual Status CollectDelta(std::string* out) {
    (void)out;
    return Status::Internal("this transform seals no deltas");
  }
  // Optional compaction, for a transform that keeps deltas: true if
  // CompactState() can merge a full state and its deltas. Then the
  // pipeline hands over a delta at every barrier and the checkpoint
  // coordinator writes a full state again, on its own thread, once the
  // deltas pass their share of it.
  virtual bool Compacts() const { return false; }
  // What RestoreState(base) then ApplyDelta() of each of `deltas` would make,
  // as SaveState() writes it, appended to `out`: from the bytes alone, on
  // the coordinator's thread while the transform runs on (so it reads no
  // member that changes). Corruption if the bytes are malformed.
  virtual Status CompactState(std::string_view base, const std::vector<std::string_view>& deltas,
                              std::string* out) const {
    (void)base;
    (void)deltas;
    (void)out;
    return Status::Corruption("this transform keeps no deltas");
  }

  // ---- in a cluster (docs/cluster.md) ----
  // How the state moves with its partitions, if it does: keyed by the key
  // the input's producers partition by, its full state (SaveState) laid
  // out as a rolling_window's (kKeyed), or as a buffer's held messages,
  // each in the partition of its Kafka key (kMessages;
  // docs/state_format.md).
  enum class Sharding { kNone, kKeyed, kMessages };
  virtual Sharding ShardedAs() const { return Sharding::kNone; }
  // On the pipeline's thread, between two batches: drops every key that
  // `belongs` (with kMessages, every message whose Kafka key does), then
  // takes the keys (messages) of `fulls` (full states of the same
  // transform, each a shard's) as the newest writes. Both count as changes
  // for the next checkpoint. A malformed state is Corruption and changes
  // nothing.
  virtual Status ReplaceKeys(const std::function<bool(const std::string& key)>& belongs,
                             const std::vector<std::string_view>& fulls) {
    (void)belongs;
    (void)fulls;
    return Status::Internal("this transform's state does not move with partitions");
  }
};

class Output : public Refusals {
 public:
  virtual ~Output() = default;
  virtual Status Open() { return Status::Ok(); }
  // Writes a whole batch. A retryable error is retried by the output runner.
  virtual Status Write(const Batch& batch) = 0;
  // Called about twice a second when idle (for example, to roll a part by age).
  virtual void Tick(int64_t now_ms) { (void)now_ms; }
  virtual Status Close() { return Status::Ok(); }
  // Called from another thread when a stop gives up on this output (its
  // pipeline is aborted): a Write, Checkpoint or Close waiting on its server
  // should return soon, with an error. Must be thread-safe.
  virtual void Interrupt() {}
  // What the output holds in memory of its own now (data taken, not yet
  // written), roughly, for the server's memory budget. The output thread.
  virtual size_t MemoryBytes() const { return 0; }

  // ---- checkpointing (with --state-dir) ----
  // At barrier `id` (0 for the checkpoint taken at start): makes everything
  // written so far durable and describes it in `state` for a restore.
  // Outputs whose writes are synchronous have nothing to do.
  virtual Status Checkpoint(uint64_t id, std::string* state) {
    (void)id;
    (void)state;
    return Status::Ok();
  }
  // Before Open(): goes back to what Checkpoint() described (the file output
  // truncates its part), so a replay rewrites the same bytes.
  virtual Status RestoreState(std::string_view state) {
    (void)state;
    return Status::Ok();
  }

  // ---- two-phase outputs (exactly-once, docs/durability.md) ----
  // True if what Checkpoint() covered stays invisible downstream until
  // CommitCheckpoint() (a Kafka transaction). The output then writes nothing
  // after a barrier until that checkpoint is durable or abandoned, and the
  // region's inputs learn of the checkpoint only after the commit.
  virtual bool TwoPhase() const { return false; }
  // Checkpoint `id` is durable: make what it covers visible. A retryable
  // error is retried, holding the output, until it succeeds.
  virtual Status CommitCheckpoint(uint64_t id) {
    (void)id;
    return Status::Ok();
  }
  // Before RestoreState, when the newest checkpoint of the region is about to
  // be restored: true if the commit of what `state` (from Checkpoint())
  // covers took place. False makes the region restore the checkpoint before.
  virtual bool WasCommitted(std::string_view state) {
    (void)state;
    return true;
  }
  // In a cluster (docs/cluster.md): whether the commit that `state` expects
  // took place, where `state` is what Checkpoint() gave on this output or on
  // the same output of another member, or of this member before a restart.
  // Called from another thread while the output runs. A commit in progress
  // is waited for; false when the output cannot learn it.
  virtual bool CommitVisible(std::string_view state) const {
    (void)state;
    return true;
  }
};


// ---------------- declarations: what a component is ----------------

namespace expr {
class Expr;
}  // namespace expr

enum class PropType {
  kString,
  kInt,         // a whole number
  kNumber,      // any number
  kBool,
  kStringList,  // a list of strings (a single string is taken as a list of one)
  kStringMap,   // string -> string
  kExpr,        // an expression (SPEC section 4)
  kAny,
};
const char* PropTypeName(PropType t);

// Whether an option decides *what* a component computes or reads (its
// identity: a change makes its checkpointed state start empty) or only *how
// fast* (tuning: a change keeps the state). docs/durability.md.
enum class PropRole { kIdentity, kTuning };

// What an option's value names, for the graph around the component: the
// loader checks it (a bucket must be declared, a path served once) and the
// engine wires it (regions, bucket writers) without knowing the component.
enum class PropRef {
  kNone,
  kBucketWrite,  // a bucket the component writes (see PropDef::reads_only_when)
  kBucketRead,   // a bucket the component only reads
  kServedPath,   // a path the component serves on the server's listener
};

// One option of a component. The rules (range, choices, non-empty) are
// checked when the config is loaded, with the option's place in the file;
// the docs show them. Built with the setters below:
//   PropDef{"batch_size", PropType::kInt, false, "100", "...", PropRole::kTuning}
//       .Range(1, 100000)
struct PropDef {
  std::string name;
  PropType type;
  bool required = false;
  std::string default_text;  // shown in docs; "" = no default
  std::string help;
  PropRole role = PropRole::kIdentity;
  // ---- rules ----
  std::optional<double> min, max;  // for kInt and kNumber
  bool min_open = false;           // min itself is not allowed (> rather than >=)
  std::vector<std::string> choices;  // for kString: the only values allowed
  bool non_empty = false;            // for kString and kStringList
  std::string unit;                  // shown in docs: ms, bytes, ...
  // Never logged, never shown by the API (its value is replaced by "***").
  // A secret option is tuning (a credential: rotating it keeps the state) or
  // an address (the value may carry credentials); the unit tests refuse any
  // other.
  bool secret = false;
  // A connection address (a URL, a libpq connection string, host:port list):
  // only the part that names the data, a URL's path or a `dbname`, is
  // identity; host, port, user, password and connection parameters are
  // tuning (common/redact.h AddressIdentity).
  bool address = false;
  PropRef ref = PropRef::kNone;
  // For kBucketWrite: the component only reads the bucket when option
  // `.first` has the value `.second` (a bucket transform with op: lookup).
  std::pair<std::string, std::string> reads_only_when;

  PropDef& Range(double lo, double hi) { min = lo; max = hi; return *this; }
  PropDef& AtLeast(double lo) { min = lo; return *this; }
  PropDef& Above(double lo) { min = lo; min_open = true; return *this; }
  PropDef& OneOf(std::vector<std::string> values) { choices = std::move(values); return *this; }
  PropDef& NonEmpty() { non_empty = true; return *this; }
  PropDef& Unit(std::string u) { unit = std::move(u); return *this; }
  PropDef& Secret() { secret = true; return *this; }
  PropDef& Address() { address = true; return *this; }
  PropDef& Refers(PropRef r) { ref = r; return *this; }
  PropDef& ReadsOnlyWhen(std::string option, std::string value) {
    reads_only_when = {std::move(option), std::move(value)};
    return *this;
  }
  // The rules as text for the docs ("1 to 100000", "one of: a, b"); "" = none.
  std::string RulesText() const;
};

// Retry policy of an output (its `retry` option; every output has one).
struct RetryPolicy {
  int64_t base_ms = 100;
  int64_t max_ms = 5000;
  int64_t max_attempts = 5;  // without a state dir, then the batch is dropped and counted
};


// The shape of a component's value in YAML.
enum class Shape {
  kOptions,       // a map of options from the property table
  kExpr,          // filter: 'expr'
  kExprMap,       // map: {field: expr}
  kStringList,    // remove: [a, b]
  kStringMap,     // rename: {from: to}
  kStringOrList,  // pipeline: a | [a, b]
};

class Options;
using InputFactory =
    std::function<std::unique_ptr<Input>(const Options&, const ComponentContext&)>;
using TransformFactory =
    std::function<std::unique_ptr<Transform>(const Options&, const ComponentContext&)>;
using OutputFactory =
    std::function<std::unique_ptr<Output>(const Options&, const ComponentContext&)>;

struct ComponentDef {
  std::string kind;  // input | transform | output
  std::string type;
  Shape shape = Shape::kOptions;
  // An input whose value names the pipelines it reads (shape kStringOrList).
  bool reads_pipelines = false;
  // An input that keeps files of its own under the state directory
  // (ComponentContext::private_dir).
  bool private_dir = false;
  // An input that reads the partitions a consumer group gives it and tells
  // ComponentContext::partitions of each assignment: in a cluster its
  // pipeline's keyed state is sharded by them (docs/cluster.md).
  bool partitioned = false;
  // An input every member of a cluster may run, each member taking a share
  // of the messages that no other member takes: its clients send each
  // message to one server (a listener), or its server gives each message to
  // one subscriber (a queue group). Null for an input that is neither; a
  // function because it may hold only with some options (docs/cluster.md).
  std::function<bool(const Options&)> shared_by_members;
  // A step the loader cuts its pipeline at: the part before it writes a
  // kafka topic, the part after reads it back (`repartition`;
  // config/loader.cc). Never made as a transform.
  bool cuts_pipeline = false;
  // An input that, given the option `topic`, writes what it takes to that
  // Kafka topic (its `brokers`, `kafka_properties`) before it acknowledges
  // it: the loader cuts its pipeline right after it, and the steps read the
  // topic back as a part of their own, like the part after a `repartition`
  // step (config/loader.cc).
  bool writes_ahead_to_kafka = false;
  std::vector<PropDef> props;
  std::string help;
  std::string checkpoint;  // what it keeps in a checkpoint (docs)
  std::string bad_input;   // what it does on bad input (docs)
  InputFactory make_input;
  TransformFactory make_transform;
  OutputFactory make_output;
  // An optional command-line helper of the component: `kayak tool <type>
  // ARGS...` calls it with ARGS and exits with what it returns; it prints to
  // stdout (results) and stderr (problems). The opcua input's browser.
  std::function<int(const std::vector<std::string>& args)> tool;
  std::string tool_usage;  // its arguments, one line ("ENDPOINT [--node ID]")
};

// A component's options as its factory sees them, already checked against
// its property table (types, ranges, choices, required). Getters return the
// value or the declared default. Semantic errors go through Error(), which
// records them at the option's place in the config file; a factory that
// reported one returns nullptr.
class Options {
 public:
  virtual ~Options() = default;
  virtual bool Has(const std::string& name) const = 0;
  virtual std::string String(const std::string& name) const = 0;
  virtual int64_t Int(const std::string& name) const = 0;
  virtual double Number(const std::string& name) const = 0;
  virtual bool Bool(const std::string& name) const = 0;
  virtual std::vector<std::string> Strings(const std::string& name) const = 0;
  virtual std::vector<std::pair<std::string, std::string>> StringMap(
      const std::string& name) const = 0;
  // Compiles an expression option; on a syntax error records it at the
  // exact column and returns nullptr.
  virtual std::shared_ptr<const expr::Expr> Expr(const std::string& name) const = 0;

  // Shorthand shapes (filter, map, remove, rename, pipeline): the value's
  // entries in order. kExpr: one, its value; kExprMap/kStringMap: key and
  // value; kStringList, kStringOrList: values.
  struct Entry {
    std::string key;
    std::string value;
  };
  virtual std::vector<Entry> Entries() const = 0;
  // Compiles entry `i`'s value as an expression (errors as for Expr).
  virtual std::shared_ptr<const expr::Expr> ExprOfEntry(size_t i) const = 0;

  virtual void Error(const std::string& name, const std::string& message) const = 0;
  virtual void ErrorAtEntry(size_t i, bool at_key, const std::string& message) const = 0;
  virtual bool failed() const = 0;
};

// The one list of every component, looked up by kind and type.
class ComponentRegistry {
 public:
  virtual ~ComponentRegistry() = default;
  virtual const ComponentDef* Find(const std::string& kind, const std::string& type) const = 0;
  virtual std::vector<const ComponentDef*> All() const = 0;
};

}  // namespace kayak
