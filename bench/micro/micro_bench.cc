// Micro benchmarks (Google Benchmark) of per-message costs: the expression
// language, a ~200-byte message's JSON parse and re-serialisation, the
// listener's body check, and CRC-32C. `make bench-micro` runs them; the suite
// runs each once (ctest `bench_micro_smoke`) so they keep building and running.
#include <benchmark/benchmark.h>

#include <string>

#include "checkpoint/format.h"
#include "expr/expr.h"
#include "inputs/http_body.h"
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
  const auto fields = kayak::Json::parse(kMessage);
  const kayak::Clock& clock = *kayak::SystemClock::Get();
  for (auto _ : state) {
    auto v = e->Eval(fields, clock);
    benchmark::DoNotOptimize(v);
  }
}
BENCHMARK(BM_ExprEval);

void BM_MessageParse(benchmark::State& state) {
  for (auto _ : state) {
    kayak::Message m(kMessage, 0);
    auto f = m.Fields();
    benchmark::DoNotOptimize(f);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kMessage.size()));
}
BENCHMARK(BM_MessageParse);

// Parse, set one field, serialise: what a `map` costs a message.
void BM_MessageMapAndSeal(benchmark::State& state) {
  for (auto _ : state) {
    kayak::Message m(kMessage, 0);
    auto f = m.MutableFields();
    (**f)["w"] = 85;
    m.Seal();
    benchmark::DoNotOptimize(m.payload().data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kMessage.size()));
}
BENCHMARK(BM_MessageMapAndSeal);

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

}  // namespace

BENCHMARK_MAIN();
