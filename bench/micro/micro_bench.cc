// Micro benchmarks (Google Benchmark) of per-message costs: the expression
// language, a ~200-byte message's JSON parse and re-serialisation, each
// transform, the listener's body check, the http log's append, CRC-32C, and
// the snapshot and restore of a 1M-key bucket, and the checkpoint
// coordinator's collection and compactions. `make bench-micro` runs them;
// the suite runs each once (ctest `bench_micro_smoke`) so they keep building
// and running.
#include <malloc.h>

#include <memory>
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>

#include "../../tests/unit/test_util.h"
#include "common/format.h"
#include "state/arena.h"
#include "state/bucket.h"
#include "expr/expr.h"
#include "common/json_text.h"
#include "common/ndjson.h"
#include "connectors/http/log.h"
#include "kayak/message.h"

namespace {

// About 200 bytes, the size the pipeline benchmarks use.
const std::string kMessage =
    R"({"id":184467,"user":"u4467","event":"click","page":"/products/1843/reviews",)"
    R"("ms":1291269,"ok":true,"region":"eu-west-1","device":{"os":"linux","ver":"6.1"},)"
    R"("tags":["a","b","c"],"value":42.5})";

void BM_ExprEval(benchmark::State& state) {
  kayak::expr::CompileError err;
  auto e = kayak::expr::Compile("value * 2 + ms / 1000 > 100 && event == \"click\"", &err);
  const kayak::Clock& clock = *kayak::SystemClock::Get();
  kayak::expr::Document doc;
  kayak::expr::Scratch scratch;
  for (auto _ : state) {
    doc.Reset(kMessage);  // the index is built again for every message
    scratch.Reset();
    kayak::expr::Value v;
    benchmark::DoNotOptimize(e->Eval(doc, &scratch, clock, &v));
    benchmark::DoNotOptimize(v);
  }
}
BENCHMARK(BM_ExprEval);

// Reading one field of a message: index its members, find one, read it.
void BM_MessageFieldRead(benchmark::State& state) {
  kayak::FieldPath path;
  kayak::ParseFieldPath("value", &path);
  kayak::expr::Document doc;
  kayak::expr::Scratch scratch;
  for (auto _ : state) {
    doc.Reset(kMessage);
    benchmark::DoNotOptimize(doc.Get(path, &scratch));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kMessage.size()));
}
BENCHMARK(BM_MessageFieldRead);

// Setting one field: what a `map` costs a message beyond its expression.
void BM_MessageSetField(benchmark::State& state) {
  kayak::FieldPath path;
  kayak::ParseFieldPath("w", &path);
  std::string out;
  for (auto _ : state) {
    kayak::jtext::SetPath(kMessage, path, "85", &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kMessage.size()));
}
BENCHMARK(BM_MessageSetField);

// The listener's check of a posted body (simdjson, nlohmann for what it refuses).
void BM_IngestBodyCheck(benchmark::State& state) {
  std::string payload, error;
  size_t n = 0;
  for (auto _ : state) {
    bool ok = kayak::NormalizeIngestBody(kMessage, &payload, &n, &error);
    benchmark::DoNotOptimize(ok);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kMessage.size()));
}
BENCHMARK(BM_IngestBodyCheck);

void BM_Crc32c(benchmark::State& state) {
  const std::string data(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) {
    benchmark::DoNotOptimize(kayak::checkpoint::Crc32c(data.data(), data.size()));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}
BENCHMARK(BM_Crc32c)->Arg(200)->Arg(64 << 10);

// One transform over batches of 1,000 messages (keys k0..k9999 for the
// keyed ones); the figure is per message, reading and patching included
// (the JSON check is the input's, as in a pipeline; the batch comes without
// the index of members the file input hands over, so the first transform
// finds it).
// The transforms of `yamls` one after another over each batch, as a
// pipeline's chain runs them.
void RunChain(benchmark::State& state, const std::vector<std::string>& yamls) {
  kayak::BucketRegistry buckets;
  buckets.Add("b", 0);
  std::vector<std::unique_ptr<kayak::Transform>> chain;
  for (const auto& yaml : yamls) {
    chain.push_back(kayak::testing::MakeTransform(yaml, kayak::SystemClock::Get(), &buckets));
    if (chain.back() == nullptr) {
      state.SkipWithError("transform did not build");
      return;
    }
  }
  std::vector<std::string> payloads;
  for (int i = 0; i < 1000; ++i) {
    std::string p = kMessage;
    p.insert(1, "\"k\":\"k" + std::to_string((i * 7919) % 10000) + "\",");
    payloads.push_back(std::move(p));
  }
  for (auto _ : state) {
    state.PauseTiming();
    kayak::Batch b = kayak::testing::MakeBatch(payloads, 1000);
    for (auto& m : b.messages) m.MarkJson();  // as the file and http inputs do
    state.ResumeTiming();
    for (auto& t : chain) benchmark::DoNotOptimize(t->Process(&b));
    benchmark::DoNotOptimize(b.messages.data());
    b.DropFields();  // as the pipeline does when the batch leaves the chain
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * payloads.size()));
}
void RunTransform(benchmark::State& state, const std::string& yaml) { RunChain(state, {yaml}); }
// The chains of the pipeline benchmarks (bench/pipelines.py): a message's
// fields are found once and reused by the transforms after the first.
void BM_ChainFilterMap(benchmark::State& s) {
  RunChain(s, {"filter: 'value >= 0'", "map: {w: 'value * 2'}"});
}
void BM_ChainWindowBucket(benchmark::State& s) {
  RunChain(s, {"rolling_window: {key: k, field: value, window_messages: 10, aggregates: [count, sum]}",
               "bucket: {name: b, key: k, op: add, field: value, as: total}"});
}
BENCHMARK(BM_ChainFilterMap)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChainWindowBucket)->Unit(benchmark::kMicrosecond);
void BM_TransformFilter(benchmark::State& s) { RunTransform(s, "filter: 'value > 10'"); }
void BM_TransformMap(benchmark::State& s) { RunTransform(s, "map: {w: 'value * 2'}"); }
void BM_TransformRollingWindow(benchmark::State& s) {
  RunTransform(s, "rolling_window: {key: k, field: value, window_messages: 100}");
}
void BM_TransformBucketAdd(benchmark::State& s) {
  RunTransform(s, "bucket: {name: b, key: k, op: add, field: value}");
}
void BM_TransformRemove(benchmark::State& s) { RunTransform(s, "remove: [tags, device.ver]"); }
void BM_TransformRename(benchmark::State& s) { RunTransform(s, "rename: {user: who}"); }
void BM_TransformLookup(benchmark::State& s) {
  RunTransform(s, "lookup: {bucket: b, key: k, as: seen}");
}
void BM_TransformBuffer(benchmark::State& s) {
  RunTransform(s, "buffer: {max_messages: 1000}");
}
void BM_TransformLua(benchmark::State& s) {
  RunTransform(s, "lua: {script: 'function process(m) m.w = m.value * 2 return m end'}");
}
BENCHMARK(BM_TransformFilter)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformRemove)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformRename)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformLookup)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformBuffer)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformLua)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformMap)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformRollingWindow)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransformBucketAdd)->Unit(benchmark::kMicrosecond);

// The http log: 1,000 one-message posts appended and made durable (group
// commit, one fdatasync per batch the writer takes), in a temporary directory.
void BM_HttpLogAppend(benchmark::State& state) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kayak-micro-log-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    auto log = kayak::HttpLog::Open({dir.string(), 64 << 20, 64 << 20}, 0);
    if (!log.ok()) {
      state.SkipWithError(log.status().message().c_str());
      return;
    }
    std::mutex mu;
    std::condition_variable cv;
    uint64_t read = 0;
    std::vector<kayak::LogRecord> records;
    for (auto _ : state) {
      std::atomic<int> left{1000};
      for (int i = 0; i < 1000; ++i) {
        if (!(*log)->Append(kMessage, [&](kayak::Status, uint64_t) {
              if (--left == 0) {
                std::lock_guard lock(mu);
                cv.notify_all();
              }
            })) {
          state.SkipWithError("the log's backlog is full");
          return;
        }
      }
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return left.load() == 0; });
      }
      // The pipeline's side, untimed: read what was logged and release it,
      // so the backlog and the disk use stay bounded.
      state.PauseTiming();
      while (read < (*log)->last_seq()) {
        records.clear();
        if (!(*log)->Read(read, 100000, 64 << 20, 0, &records).ok() || records.empty()) break;
        read = records.back().seq;
      }
      (*log)->Release(read);
      state.ResumeTiming();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * 1000));
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_HttpLogAppend)->Unit(benchmark::kMillisecond)->UseRealTime();

// A bucket of 1M keys (numbers, as `op: add` leaves them): its snapshot at a
// barrier and its restore at start.
kayak::Bucket* MillionKeyBucket() {
  static kayak::Bucket* b = [] {
    auto* bucket = new kayak::Bucket("b", 0);
    for (int i = 0; i < 1'000'000; ++i) {
      (void)bucket->Update("key-" + std::to_string(i), 1000 + i, [&](kayak::Json& v, bool) {
        v = i * 0.5;
        return kayak::Status::Ok();
      });
    }
    return bucket;
  }();
  return b;
}
void BM_BucketSnapshot1M(benchmark::State& state) {
  kayak::Bucket* b = MillionKeyBucket();
  std::string out;
  for (auto _ : state) {
    out.clear();
    b->SaveState(&out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes"] = static_cast<double>(out.size());
}
void BM_BucketRestore1M(benchmark::State& state) {
  std::string saved;
  MillionKeyBucket()->SaveState(&saved);
  for (auto _ : state) {
    auto b = std::make_unique<kayak::Bucket>("r", 0);
    benchmark::DoNotOptimize(b->RestoreState(saved));
    state.PauseTiming();  // freeing the bucket is not the restore
    b.reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_BucketSnapshot1M)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BucketRestore1M)->Unit(benchmark::kMillisecond);

// The checkpoint coordinator's work on 1M keys of which 400,000 changed in
// the interval (as in bench/state_interval.py at a 1 s interval): a bucket's
// seal collected and encoded as a delta; a compaction of a bucket's chain
// (its full chunk, two such deltas and the changes); a compaction of a
// window's chain (its full state and three such deltas).
std::unique_ptr<kayak::Bucket> FilledBucket(int keys) {
  auto b = std::make_unique<kayak::Bucket>("b", 0);
  for (int i = 0; i < keys; ++i) {
    (void)b->Update("key-" + std::to_string(i), 1000 + i, [&](kayak::Json& v, bool) {
      v = i * 0.5;
      return kayak::Status::Ok();
    });
  }
  return b;
}
// Writes `n` keys from `from` (wrapping at 1M), as a pipeline would.
void ChangeKeys(kayak::Bucket* b, int from, int n) {
  for (int i = 0; i < n; ++i) {
    const int k = (from + i) % 1'000'000;
    (void)b->Update("key-" + std::to_string(k), 5000 + k, [&](kayak::Json& v, bool) {
      v = v.is_number() ? v.get<double>() + 1 : 1.0;
      return kayak::Status::Ok();
    });
  }
}
void BM_BucketDeltaCollect(benchmark::State& state) {
  auto b = FilledBucket(1'000'000);
  b->TrackChanges();
  b->MarkSaved();
  int from = 0;
  std::string out;
  for (auto _ : state) {
    state.PauseTiming();
    ChangeKeys(b.get(), from, 400'000);
    from += 400'000;
    out.clear();
    state.ResumeTiming();
    b->Seal();
    std::vector<std::vector<kayak::Bucket::Change>> lists(1);
    b->CollectSealed(&lists[0]);
    kayak::Bucket::EncodeDelta(lists, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_BucketDeltaCollect)->Unit(benchmark::kMillisecond);
void BM_BucketCompact1M(benchmark::State& state) {
  auto b = FilledBucket(1'000'000);
  std::string base;
  b->SaveState(&base);
  b->TrackChanges();
  b->MarkSaved();
  std::vector<std::string> deltas(2);
  for (int d = 0; d < 2; ++d) {
    ChangeKeys(b.get(), d * 400'000, 400'000);
    std::vector<std::vector<kayak::Bucket::Change>> lists(1);
    b->TakeChanges(false, &lists[0]);
    kayak::Bucket::EncodeDelta(lists, &deltas[d]);
  }
  ChangeKeys(b.get(), 800'000, 400'000);
  std::vector<std::vector<kayak::Bucket::Change>> lists(1);
  b->TakeChanges(false, &lists[0]);
  const std::vector<std::string_view> views(deltas.begin(), deltas.end());
  std::string out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(kayak::Bucket::Compact(base, views, lists, &out));
  }
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_BucketCompact1M)->Unit(benchmark::kMillisecond);
// Feeds the window `n` messages, keys from `from` on (wrapping at 1M).
void FeedWindow(kayak::Transform* t, int from, int n) {
  std::vector<std::string> payloads(1000);
  for (int at = 0; at < n; at += 1000) {
    for (int i = 0; i < 1000; ++i) {
      payloads[i] = "{\"k\":\"key-" + std::to_string((from + at + i) % 1'000'000) +
                    "\",\"value\":" + std::to_string(i) + "}";
    }
    kayak::Batch batch = kayak::testing::MakeBatch(payloads, 1000);
    for (auto& m : batch.messages) m.MarkJson();
    (void)t->Process(&batch);
  }
}
void BM_WindowCompact1M(benchmark::State& state) {
  kayak::BucketRegistry buckets;
  auto t = kayak::testing::MakeTransform(
      "rolling_window: {key: k, field: value, window_messages: 10, aggregates: [count, sum]}",
      kayak::SystemClock::Get(), &buckets);
  FeedWindow(t.get(), 0, 1'000'000);
  std::string base;
  t->SaveState(&base);
  std::vector<std::string> deltas(3);
  for (int d = 0; d < 3; ++d) {
    FeedWindow(t.get(), d * 400'000, 400'000);
    (void)t->SaveDelta(&deltas[d]);
  }
  const std::vector<std::string_view> views(deltas.begin(), deltas.end());
  std::string out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(t->CompactState(base, views, &out));
  }
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_WindowCompact1M)->Unit(benchmark::kMillisecond);

// Memory a key costs (heap bytes in use after, less before, over the keys;
// mallinfo2): a bucket of 1M keys as MillionKeyBucket fills it, and a
// rolling_window of 10 messages over 1M keys, each key written once.
size_t HeapInUse() {
  const auto m = mallinfo2();
  // Small chunks and mmapped ones (a vector), and what the buckets' and
  // windows' arenas mapped themselves (huge pages, outside the heap).
  return m.uordblks + m.hblkhd + kayak::Arena::TotalMappedBytes();
}
void BM_BucketBytesPerKey(benchmark::State& state) {
  constexpr int kKeys = 1'000'000;
  double per_key = 0;
  for (auto _ : state) {
    const size_t before = HeapInUse();
    auto bucket = std::make_unique<kayak::Bucket>("b", 0);
    for (int i = 0; i < kKeys; ++i) {
      (void)bucket->Update("key-" + std::to_string(i), 1000 + i, [&](kayak::Json& v, bool) {
        v = i * 0.5;
        return kayak::Status::Ok();
      });
    }
    per_key = static_cast<double>(HeapInUse() - before) / kKeys;
  }
  state.counters["bytes_per_key"] = per_key;
}
BENCHMARK(BM_BucketBytesPerKey)->Unit(benchmark::kMillisecond)->Iterations(1);
void BM_WindowBytesPerKey(benchmark::State& state) {
  constexpr int kKeys = 1'000'000;
  double per_key = 0;
  for (auto _ : state) {
    kayak::BucketRegistry buckets;
    const size_t before = HeapInUse();
    auto t = kayak::testing::MakeTransform(
        "rolling_window: {key: k, field: value, window_messages: 10, aggregates: [count, sum]}",
        kayak::SystemClock::Get(), &buckets);
    std::vector<std::string> payloads(1000);
    for (int from = 0; from < kKeys; from += 1000) {
      for (int i = 0; i < 1000; ++i) {
        payloads[i] = "{\"k\":\"key-" + std::to_string(from + i) + "\",\"value\":" +
                      std::to_string(i) + "}";
      }
      kayak::Batch b = kayak::testing::MakeBatch(payloads, 1000);
      for (auto& m : b.messages) m.MarkJson();
      benchmark::DoNotOptimize(t->Process(&b));
    }
    per_key = static_cast<double>(HeapInUse() - before) / kKeys;
  }
  state.counters["bytes_per_key"] = per_key;
}
BENCHMARK(BM_WindowBytesPerKey)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
