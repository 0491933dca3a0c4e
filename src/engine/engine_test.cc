// The engine end to end in one process: a merge of two upstreams, and
// backpressure from a blocked output.
#include "engine/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/store.h"
#include "common/clock.h"
#include "components.h"
#include "config/loader.h"

namespace kayak {
namespace {

// A test output: collects payloads, or blocks every write while the gate is shut.
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  std::vector<std::string> payloads;
  std::atomic<uint64_t> barrier{0};  // the newest barrier the output saw
};
Sink* g_sink = nullptr;

class SinkOutput final : public Output {
 public:
  explicit SinkOutput(bool two_phase = false) : two_phase_(two_phase) {}
  bool TwoPhase() const override { return two_phase_; }
  Status Write(const Batch& batch) override {
    std::unique_lock lock(g_sink->mu);
    g_sink->cv.wait(lock, [] { return g_sink->open; });
    for (const auto& m : batch.messages) g_sink->payloads.push_back(m.payload());
    return Status::Ok();
  }
  Status Checkpoint(uint64_t id, std::string*) override {
    g_sink->barrier = id;
    return Status::Ok();
  }

 private:
  const bool two_phase_;
};

// A test input fed by the test (g_feed), and a test output that writes
// only as many batches as the test permits (g_permits; -1: any number).
struct Feed {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> lines;
  size_t handed = 0;
  int permits = -1;
  size_t written = 0;
  bool knows_lag = false;  // the input reports the lines not read as its lag
};
Feed* g_feed = nullptr;

class FedInput final : public Input {
 public:
  Status Read(Batch* out, int64_t wait_ms, bool*) override {
    std::unique_lock lock(g_feed->mu);
    g_feed->cv.wait_for(lock, std::chrono::milliseconds(wait_ms),
                        [] { return !g_feed->lines.empty(); });
    if (g_feed->lines.empty()) return Status::Ok();
    out->messages.push_back(Message(g_feed->lines.front(), 0));
    g_feed->lines.pop_front();
    g_feed->handed++;
    g_feed->cv.notify_all();
    return Status::Ok();
  }
  Lag Behind() const override {
    std::lock_guard lock(g_feed->mu);
    if (!g_feed->knows_lag) return {};
    return {static_cast<int64_t>(g_feed->lines.size()), "messages"};
  }
  bool Rewindable() const override { return true; }
  std::string SavePosition() const override { return "x"; }
};

class PermitOutput final : public Output {
 public:
  Status Write(const Batch&) override {
    std::unique_lock lock(g_feed->mu);
    g_feed->cv.wait(lock, [] { return g_feed->permits != 0; });
    if (g_feed->permits > 0) g_feed->permits--;
    g_feed->written++;
    g_feed->cv.notify_all();
    return Status::Ok();
  }
};

// A transform that throws on a message holding "boom" (as a library could).
class ThrowingTransform final : public Transform {
 public:
  Status Process(Batch* batch) override {
    for (const auto& m : batch->messages) {
      if (m.payload().find("boom") != std::string::npos) throw std::runtime_error("kaboom");
    }
    return Status::Ok();
  }
};

class TestRegistry final : public ComponentRegistry {
 public:
  TestRegistry() {
    throws_.kind = "transform";
    throws_.type = "throws";
    throws_.make_transform = [](const Options&, const ComponentContext&) {
      return std::make_unique<ThrowingTransform>();
    };
    sink_.kind = "output";
    sink_.type = "sink";
    sink_.make_output = [](const Options&, const ComponentContext&) {
      return std::make_unique<SinkOutput>();
    };
    // The sink as an output whose writes show only at a commit (exactly_once).
    txn_.kind = "output";
    txn_.type = "txn";
    txn_.make_output = [](const Options&, const ComponentContext&) {
      return std::make_unique<SinkOutput>(/*two_phase=*/true);
    };
    permit_.kind = "output";
    permit_.type = "permit";
    permit_.make_output = [](const Options&, const ComponentContext&) {
      return std::make_unique<PermitOutput>();
    };
    fed_.kind = "input";
    fed_.type = "fed";
    fed_.make_input = [](const Options&, const ComponentContext&) {
      return std::make_unique<FedInput>();
    };
  }
  const ComponentDef* Find(const std::string& kind, const std::string& type) const override {
    if (kind == "output" && type == "sink") return &sink_;
    if (kind == "output" && type == "txn") return &txn_;
    if (kind == "output" && type == "permit") return &permit_;
    if (kind == "input" && type == "fed") return &fed_;
    if (kind == "transform" && type == "throws") return &throws_;
    return BuiltinComponents().Find(kind, type);
  }
  std::vector<const ComponentDef*> All() const override { return BuiltinComponents().All(); }

 private:
  ComponentDef sink_, txn_, permit_, fed_, throws_;
};

std::unique_ptr<Engine> BuildEngine(const std::string& yaml, const TestRegistry& reg) {
  GraphSpec spec;
  ErrorList errors;
  EXPECT_TRUE(LoadGraphText(yaml, "t.yaml", reg, &spec, &errors)) << errors.ToString();
  auto engine = Engine::Build(spec, reg, EngineOptions{}, &errors);
  EXPECT_NE(engine, nullptr) << errors.ToString();
  return engine;
}

// Polls `cond` every 10 ms until it holds or `timeout_ms` passes.
template <typename F>
bool WaitFor(F cond, int timeout_ms = 10000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_sink = &sink_;
    dir_ = std::filesystem::temp_directory_path() /
           ("kayak-engine-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    g_sink = nullptr;
  }
  size_t SinkSize() {
    std::lock_guard lock(sink_.mu);
    return sink_.payloads.size();
  }
  // An engine of `yaml` that checkpoints into dir_ every `interval_ms` on
  // `clock`; `tune` changes its options further. Null on a build error.
  template <typename F = void (*)(EngineOptions*)>
  std::unique_ptr<Engine> BuildCheckpointing(
      const std::string& yaml, FakeClock* clock, int64_t interval_ms,
      F tune = [](EngineOptions*) {}) {
    store_ = std::make_unique<checkpoint::Store>(dir_.string());
    uint64_t max_id = 0;
    restored_.clear();
    if (Status st = store_->Recover(&restored_, &max_id); !st.ok()) {
      ADD_FAILURE() << st.message();
      return nullptr;
    }
    GraphSpec spec;
    ErrorList errors;
    if (!LoadGraphText(yaml, "t.yaml", registry_, &spec, &errors)) {
      ADD_FAILURE() << errors.ToString();
      return nullptr;
    }
    EngineOptions o;
    o.clock = clock;
    o.checkpointing = true;
    o.store = store_.get();
    o.restored = &restored_;
    o.state_dir = dir_.string();
    o.checkpoint_interval_ms = interval_ms;
    tune(&o);
    auto engine = Engine::Build(spec, registry_, o, &errors);
    if (engine == nullptr) ADD_FAILURE() << errors.ToString();
    return engine;
  }
  Sink sink_;
  std::filesystem::path dir_;
  TestRegistry registry_;
  std::unique_ptr<checkpoint::Store> store_;  // BuildCheckpointing's
  std::map<std::string, checkpoint::RestoredUnit> restored_;
};

TEST_F(EngineTest, DownstreamMergesTwoUpstreams) {
  {
    std::ofstream a(dir_ / "a.ndjson"), b(dir_ / "b.ndjson");
    for (int i = 0; i < 500; ++i) a << R"({"src":"a","i":)" << i << "}\n";
    for (int i = 0; i < 300; ++i) b << R"({"src":"b","i":)" << i << "}\n";
  }
  const std::string yaml =
      "pipelines:\n"
      "  merged:\n"
      "    input: {pipeline: [a, b]}\n"
      "    transforms: [{filter: 'i % 2 == 0'}, {map: {seen: 'true'}}]\n"
      "    outputs: [{sink: {}}]\n"
      "  a:\n"
      "    input: {file: {path: '" + (dir_ / "a.ndjson").string() + "', batch_size: 64}}\n"
      "  b:\n"
      "    input: {file: {path: '" + (dir_ / "b.ndjson").string() + "', batch_size: 64}}\n";
  auto engine = BuildEngine(yaml, registry_);
  ASSERT_NE(engine, nullptr);
  engine->Start();
  ASSERT_TRUE(WaitFor([&] { return SinkSize() == 400; })) << SinkSize();
  engine->Stop();
  std::set<std::string> seen(sink_.payloads.begin(), sink_.payloads.end());
  EXPECT_EQ(seen.size(), 400u);  // 250 even from a + 150 from b, none twice
  EXPECT_TRUE(seen.count(R"({"src":"a","i":498,"seen":true})"));
  EXPECT_TRUE(seen.count(R"({"src":"b","i":298,"seen":true})"));
  // Each upstream's order is kept through the merge.
  int last_a = -1;
  for (const auto& p : sink_.payloads) {
    auto j = Json::parse(p);
    if (j["src"] == "a") {
      EXPECT_GT(j["i"].get<int>(), last_a);
      last_a = j["i"].get<int>();
    }
  }
}

// A transform's exception fails its batch, counted on its card, like an
// error it returns: the process and the pipeline go on.
TEST_F(EngineTest, ATransformThatThrowsFailsTheBatchNotTheProcess) {
  {
    std::ofstream a(dir_ / "a.ndjson");
    a << R"({"i":1})" << "\n" << R"({"i":"boom"})" << "\n" << R"({"i":3})" << "\n";
  }
  const std::string yaml =
      "pipelines:\n"
      "  a:\n"
      "    input: {file: {path: '" + (dir_ / "a.ndjson").string() + "', batch_size: 1}}\n"
      "    transforms: [{throws: {}}]\n"
      "    outputs: [{sink: {}}]\n";
  auto engine = BuildEngine(yaml, registry_);
  ASSERT_NE(engine, nullptr);
  engine->Start();
  ASSERT_TRUE(WaitFor([&] { return SinkSize() == 2; })) << SinkSize();
  const auto* card = engine->pipelines()[0]->cards()[1];
  EXPECT_EQ(card->errors(), 1u);
  EXPECT_NE(card->last_error().find("threw: kaboom"), std::string::npos) << card->last_error();
  engine->Stop();
}

TEST_F(EngineTest, BlockedOutputStopsTheInput) {
  {
    std::lock_guard lock(sink_.mu);
    sink_.open = false;
  }
  auto engine = BuildEngine(
      "pipelines:\n"
      "  p:\n"
      "    input: {dummy: {batch_size: 100}}\n"
      "    outputs: [{sink: {}}]\n",
      registry_);
  ASSERT_NE(engine, nullptr);
  engine->Start();
  const ComponentStats* input = engine->Find("p")->cards()[0];
  // The input runs until the queues are full, then stops.
  uint64_t last = 0;
  ASSERT_TRUE(WaitFor([&] {
    const uint64_t now = input->out();
    const bool stable = now > 0 && now == last;
    last = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return stable && input->out() == now;
  }));
  // Bounded by the queue in front of the output (8 batches), the batch being
  // written and the one the pipeline holds: never more than a few batches.
  EXPECT_LE(input->out(), 12u * 100u);
  const uint64_t held = input->out();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(input->out(), held);
  {
    std::lock_guard lock(sink_.mu);
    sink_.open = true;
  }
  sink_.cv.notify_all();
  ASSERT_TRUE(WaitFor([&] { return input->out() > held + 10000; }));
  engine->Stop();
  EXPECT_EQ(SinkSize(), input->out());  // the graceful stop drained everything read
}

TEST_F(EngineTest, GracefulStopDrainsBuffers) {
  {
    std::ofstream a(dir_ / "a.ndjson");
    for (int i = 0; i < 10; ++i) a << R"({"i":)" << i << "}\n";
  }
  auto engine = BuildEngine(
      "pipelines:\n"
      "  p:\n"
      "    input: {file: {path: '" + (dir_ / "a.ndjson").string() + "'}}\n"
      "    transforms: [{buffer: {max_messages: 1000, max_secs: 3600}}]\n"
      "    outputs: [{sink: {}}]\n",
      registry_);
  ASSERT_NE(engine, nullptr);
  engine->Start();
  const ComponentStats* input = engine->Find("p")->cards()[0];
  ASSERT_TRUE(WaitFor([&] { return input->out() == 10; }));
  EXPECT_EQ(SinkSize(), 0u);  // held by the buffer
  engine->Stop();
  EXPECT_EQ(SinkSize(), 10u);
}

// Regions: pipelines joined by an edge or a shared bucket; a graph change
// rebuilds a region only when its key (the config text of its pipelines and
// buckets) changed.
TEST_F(EngineTest, SplitIntoRegionsByEdgesAndBuckets) {
  const std::string yaml = R"(
buckets:
  shared: {}
  lonely: {}
pipelines:
  b:
    input: {dummy: {count: 1}}
    transforms: [{bucket: {name: shared, key: k, op: count}}]
    outputs: [{sink: {}}]
  a:
    input: {dummy: {count: 1}}
    transforms: [{lookup: {bucket: shared, key: k, as: v}}]
    outputs: [{sink: {}}]
  c:
    input: {dummy: {count: 2}}
    outputs: [{sink: {}}]
  d:
    input: {pipeline: c}
    outputs: [{sink: {}}]
  e:
    input: {dummy: {count: 3}}
    outputs: [{sink: {}}]
)";
  GraphSpec spec;
  ErrorList errors;
  ASSERT_TRUE(LoadGraphText(yaml, "t.yaml", registry_, &spec, &errors)) << errors.ToString();
  const auto regions = SplitIntoRegions(spec);
  ASSERT_EQ(regions.size(), 4u);
  auto ids = [](const RegionSpec& r) {
    std::vector<std::string> out;
    for (const auto& p : r.spec.pipelines) out.push_back(p.id);
    return out;
  };
  EXPECT_EQ(regions[0].name, "a");  // named by its smallest id, in the graph's order
  EXPECT_EQ(ids(regions[0]), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(regions[0].bucket_names, (std::set<std::string>{"shared"}));
  EXPECT_EQ(regions[1].name, "c");
  EXPECT_EQ(ids(regions[1]), (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(regions[2].name, "e");
  EXPECT_EQ(regions[3].name, "");  // the bucket no pipeline uses
  EXPECT_EQ(regions[3].bucket_names, (std::set<std::string>{"lonely"}));
  EXPECT_TRUE(regions[3].spec.pipelines.empty());

  // Changing e changes only e's key; a tuning option counts as a change.
  std::string changed = yaml;
  changed.replace(changed.find("count: 3"), 8, "count: 3, batch_size: 2");
  GraphSpec spec2;
  ASSERT_TRUE(LoadGraphText(changed, "t.yaml", registry_, &spec2, &errors)) << errors.ToString();
  const auto regions2 = SplitIntoRegions(spec2);
  ASSERT_EQ(regions2.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(regions2[i].key == regions[i].key, regions[i].name != "e") << regions[i].name;
  }
}

// Each region built as an engine of its own runs on its own.
TEST_F(EngineTest, ARegionRunsAsAnEngineOfItsOwn) {
  GraphSpec spec;
  ErrorList errors;
  ASSERT_TRUE(LoadGraphText(R"(
pipelines:
  x:
    input: {dummy: {count: 4}}
    outputs: [{sink: {}}]
  y:
    input: {dummy: {count: 6}}
    outputs: [{sink: {}}]
)", "t.yaml", registry_, &spec, &errors));
  const auto regions = SplitIntoRegions(spec);
  ASSERT_EQ(regions.size(), 2u);
  auto y = Engine::Build(regions[1].spec, registry_, EngineOptions{}, &errors);
  ASSERT_NE(y, nullptr) << errors.ToString();
  ASSERT_EQ(y->pipelines().size(), 1u);
  y->Start();
  ASSERT_TRUE(WaitFor([&] { return SinkSize() == 6; }));
  y->Stop();
  EXPECT_EQ(SinkSize(), 6u);
}

// The coordinator counts its interval on the engine's clock: with an hour
// between checkpoints, none comes until the clock is moved an hour on.
TEST_F(EngineTest, TheCheckpointIntervalRunsOnTheEnginesClock) {
  FakeClock clock;
  auto engine = BuildCheckpointing(R"(
pipelines:
  x:
    input: {dummy: {count: 0, rate_per_sec: 100}}
    outputs: [{sink: {}}]
)", &clock, 3600 * 1000);
  ASSERT_NE(engine, nullptr);
  engine->Start();
  auto committed = [&] {
    const auto regions = engine->checkpointer()->Regions();
    return regions.empty() ? 0 : regions[0].last_committed_id;
  };
  ASSERT_TRUE(WaitFor([&] { return SinkSize() > 0; }));
  const uint64_t initial = committed();  // the one at start
  clock.AdvanceMs(3600 * 1000);
  EXPECT_TRUE(WaitFor([&] { return committed() > initial; }));
  engine->Stop();
}

// The first checkpoint after a start does not wait out the interval in a
// region with an exactly_once output once every input has read what it was
// behind by (a restart's replay, re-read): with an hour between checkpoints
// and the clock standing still, it comes when the fed lines are read, and
// the next one waits for the interval. A region whose outputs show their
// writes at once keeps to the interval.
TEST_F(EngineTest, TheFirstCheckpointComesOnceTheInputsHaveCaughtUp) {
  Feed feed;
  feed.knows_lag = true;
  g_feed = &feed;
  FakeClock clock;
  const auto feed_lines = [&](int n) {
    {
      std::lock_guard lock(feed.mu);
      for (int i = 0; i < n; ++i) feed.lines.push_back("{\"i\":" + std::to_string(i) + "}");
    }
    feed.cv.notify_all();
  };
  const auto handed = [&] {
    std::lock_guard lock(feed.mu);
    return feed.handed;
  };
  for (const std::string output : {"txn", "sink"}) {
    SCOPED_TRACE(output);
    {
      std::lock_guard lock(sink_.mu);
      sink_.payloads.clear();
    }
    auto engine = BuildCheckpointing("pipelines:\n  " + output + ":\n    input: {fed: {}}\n"
                                     "    outputs: [{" + output + ": {}}]\n",
                                     &clock, 3600 * 1000);
    ASSERT_NE(engine, nullptr);
    engine->Start();
    auto committed = [&] {
      const auto regions = engine->checkpointer()->Regions();
      return regions.empty() ? 0 : regions[0].last_committed_id;
    };
    ASSERT_TRUE(WaitFor([&] { return committed() > 0; }));
    const uint64_t initial = committed();  // the one at start
    feed_lines(3);
    ASSERT_TRUE(WaitFor([&] { return handed() == 3; }));
    if (output == "txn") {
      EXPECT_TRUE(WaitFor([&] { return committed() > initial; }))
          << "the first checkpoint waited for the interval";
    } else {
      ASSERT_TRUE(WaitFor([&] { return SinkSize() == 3; }));
    }
    const uint64_t first = committed();
    feed_lines(3);
    ASSERT_TRUE(WaitFor([&] { return handed() == 6; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // ticks that see lag 0
    EXPECT_EQ(committed(), first) << "a checkpoint did not wait for the interval";
    engine->Stop();
    std::lock_guard lock(feed.mu);
    feed.handed = 0;
  }
  g_feed = nullptr;
}

// Past a savepoint's barrier no timer releases what a transform holds: it is
// in the savepoint and is released after the restart. The window: the
// barrier has reached the downstream pipeline, and the end of the stream
// waits behind the upstream's full output queue; meanwhile the clock passes
// the buffer's age limit.
TEST_F(EngineTest, NoTimerReleasePastASavepointBarrier) {
  Feed feed;
  g_feed = &feed;
  feed.permits = 0;  // the upstream's output takes nothing yet
  FakeClock clock;
  auto engine = BuildCheckpointing(R"(
pipelines:
  gen:
    input: {fed: {}}
    outputs: [{permit: {}}]
  late:
    input: {pipeline: gen}
    transforms: [{buffer: {max_secs: 1}}]
    outputs: [{sink: {}}]
)", &clock, 600000, [](EngineOptions* o) { o->output_queue_batches = 2; });
  ASSERT_NE(engine, nullptr);
  engine->Start();
  // 3 batches: one in the blocked Write, two filling the output queue; each
  // also reaches `late`, whose buffer holds them (the clock stands still).
  {
    std::lock_guard lock(feed.mu);
    for (int i = 0; i < 3; ++i) feed.lines.push_back("{\"i\":" + std::to_string(i) + "}");
  }
  feed.cv.notify_all();
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard lock(feed.mu);
    return feed.handed == 3;
  }));
  ASSERT_TRUE(WaitFor([&] { return engine->Find("late")->cards()[0]->in() == 3; }));
  std::thread stop([&] { engine->Stop(); });
  // The savepoint's barrier waits for room in gen's output queue: one write
  // makes room for it; the end of the stream then waits for the next.
  {
    std::lock_guard lock(feed.mu);
    feed.permits = 1;
  }
  feed.cv.notify_all();
  // `late` took the barrier (its snapshot holds the three messages) once
  // its output saw it; now the buffer's age limit passes while the end of
  // the stream has not arrived.
  ASSERT_TRUE(WaitFor([&] { return sink_.barrier.load() > 0; }));
  clock.AdvanceMs(10000);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(SinkSize(), 0u) << "released after the savepoint's barrier";
  {
    std::lock_guard lock(feed.mu);
    feed.permits = -1;
  }
  feed.cv.notify_all();
  stop.join();
  EXPECT_EQ(SinkSize(), 0u);
  g_feed = nullptr;
}

}  // namespace
}  // namespace kayak
