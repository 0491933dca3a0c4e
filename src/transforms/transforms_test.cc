// Each transform against hand-computed expectations.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <thread>

#include "common/metrics.h"
#include "test_util.h"

namespace kayak::testing {
namespace {

class TransformTest : public ::testing::Test {
 protected:
  std::unique_ptr<Transform> Make(const std::string& yaml) {
    std::string errors;
    auto t = MakeTransform(yaml, &clock_, &buckets_, &errors);
    EXPECT_NE(t, nullptr) << errors;
    return t;
  }
  std::string MakeError(const std::string& yaml) {
    std::string errors;
    auto t = MakeTransform(yaml, &clock_, &buckets_, &errors);
    EXPECT_EQ(t, nullptr);
    return errors;
  }
  // Runs one message through `t`; returns its fields (or null if dropped/held).
  Json One(Transform& t, const std::string& payload, int64_t ts_ms = 0) {
    Batch b = MakeBatch({payload}, ts_ms);
    Status st = t.Process(&b);
    EXPECT_TRUE(st.ok()) << st.message();
    if (b.empty()) return Json();
    return FieldsOf(b.messages[0]);
  }

  FakeClock clock_{1'000'000'000'000};
  BucketRegistry buckets_;
};

TEST_F(TransformTest, FilterKeepsTrue) {
  auto t = Make("filter: 'v > 1 && k != \"x\"'");
  Batch b = MakeBatch({R"({"v":1,"k":"a"})", R"({"v":2,"k":"a"})", R"({"v":3,"k":"x"})",
                       R"({"v":4,"k":"b"})"});
  ASSERT_TRUE(t->Process(&b).ok());
  EXPECT_EQ(Payloads(b), (std::vector<std::string>{R"({"v":2,"k":"a"})", R"({"v":4,"k":"b"})"}));
}

TEST_F(TransformTest, FilterErrorsDropTheBatch) {
  auto t = Make("filter: 'v + 1'");
  Batch b = MakeBatch({R"({"v":1})"});
  Status st = t->Process(&b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a bool"), std::string::npos) << st.message();
  Batch bad = MakeBatch({"not json"});
  auto f = Make("filter: 'true'");
  EXPECT_FALSE(f->Process(&bad).ok());
}

TEST_F(TransformTest, MapSetsFieldsInOrder) {
  auto t = Make("map: {c: '(f - 32) * 5 / 9', d: 'c * 2', n.deep: 'len(s)'}");
  Json j = One(*t, R"({"f":212,"s":"abc"})");
  EXPECT_EQ(j["c"], Json(100.0));
  EXPECT_EQ(j["d"], Json(200.0));
  EXPECT_EQ(j["n"]["deep"], Json(3));
  Batch b = MakeBatch({R"({"s":"x"})"});
  Status st = t->Process(&b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'f' is missing"), std::string::npos) << st.message();
}

TEST_F(TransformTest, RemoveAndRename) {
  auto r = Make("remove: [a, b.c, nope]");
  EXPECT_EQ(One(*r, R"({"a":1,"b":{"c":2,"d":3},"e":4})"), Json::parse(R"({"b":{"d":3},"e":4})"));
  auto n = Make("rename: {a: z, b.c: top}");
  EXPECT_EQ(One(*n, R"({"a":1,"b":{"c":2}})"), Json::parse(R"({"b":{},"z":1,"top":2})"));
  EXPECT_EQ(One(*n, R"({"q":1})"), Json::parse(R"({"q":1})"));
}

struct Aggs {
  int64_t count;
  double sum, avg, min, max;
};

void ExpectAggs(const Json& j, const Aggs& a, const std::string& where) {
  EXPECT_EQ(j["value_count"], Json(a.count)) << where;
  EXPECT_DOUBLE_EQ(j["value_sum"].get<double>(), a.sum) << where;
  EXPECT_DOUBLE_EQ(j["value_avg"].get<double>(), a.avg) << where;
  EXPECT_DOUBLE_EQ(j["value_min"].get<double>(), a.min) << where;
  EXPECT_DOUBLE_EQ(j["value_max"].get<double>(), a.max) << where;
}

// Untouched fields keep their bytes: number spellings, escapes, spacing,
// order; only what a transform sets or removes changes.
TEST_F(TransformTest, OutputKeepsTheBytesOfUntouchedFields) {
  buckets_.Add("totals", 0);
  const std::string in = R"({"k":"caf\u00e9", "v" : 1E2, "z":-0, "d":{"x":1.50}, "t":[1, 2]})";
  auto run = [&](const std::string& yaml) {
    Batch b = MakeBatch({in});
    auto t = Make(yaml);
    Status st = t->Process(&b);
    EXPECT_TRUE(st.ok()) << yaml << ": " << st.message();
    return b.empty() ? std::string() : b.messages[0].payload();
  };
  EXPECT_EQ(run("filter: 'v > 1'"), in);
  EXPECT_EQ(run("map: {w: 'v * 2', v: 'z', d.y: 'k'}"),
            R"({"k":"caf\u00e9", "v" : -0, "z":-0, "d":{"x":1.50,"y":"caf\u00e9"}, "t":[1, 2],"w":200.0})");
  EXPECT_EQ(run("remove: [z, 't[0]']"), R"({"k":"caf\u00e9", "v" : 1E2, "d":{"x":1.50}, "t":[2]})");
  EXPECT_EQ(run("rename: {d: e}"), R"({"k":"caf\u00e9", "v" : 1E2, "z":-0, "t":[1, 2],"e":{"x":1.50}})");
  EXPECT_EQ(run("rolling_window: {key: k, field: v, window_messages: 5, aggregates: [count, max]}"),
            R"({"k":"caf\u00e9", "v" : 1E2, "z":-0, "d":{"x":1.50}, "t":[1, 2],"v_count":1,"v_max":100.0})");
  EXPECT_EQ(run("bucket: {name: totals, key: k, op: add, field: d.x, as: total}"),
            R"({"k":"caf\u00e9", "v" : 1E2, "z":-0, "d":{"x":1.50}, "t":[1, 2],"total":1.5})");
  // The same input gives the same bytes again (the bucket's sum moved on).
  EXPECT_EQ(run("map: {w: 'v * 2', v: 'z', d.y: 'k'}"),
            R"({"k":"caf\u00e9", "v" : -0, "z":-0, "d":{"x":1.50,"y":"caf\u00e9"}, "t":[1, 2],"w":200.0})");
}

TEST_F(TransformTest, NotJsonIsAnErrorCheckedOnce) {
  auto t = Make("filter: 'v > 1'");
  Batch b = MakeBatch({R"({"v": 2})", R"({"v": 2)"});
  Status st = t->Process(&b);
  EXPECT_EQ(st.message(), "message 2 of the batch: payload is not valid JSON");
  // An input that checked the payload marks it; the transform trusts that.
  Batch marked = MakeBatch({R"({"v": 2})"});
  marked.messages[0].MarkJson();
  EXPECT_TRUE(t->Process(&marked).ok());
  EXPECT_EQ(marked.size(), 1u);
}

TEST_F(TransformTest, RollingWindowEventTimeOutOfOrder) {
  auto t = Make("rolling_window: {key: k, field: value, window_secs: 10, time_field: ts}");
  // ts in epoch seconds; the window of a key ends at the newest ts it saw.
  ExpectAggs(One(*t, R"({"k":"A","ts":100,"value":1})"), {1, 1, 1, 1, 1}, "m1");
  ExpectAggs(One(*t, R"({"k":"A","ts":105,"value":2})"), {2, 3, 1.5, 1, 2}, "m2");
  ExpectAggs(One(*t, R"({"k":"A","ts":103,"value":3})"), {3, 6, 2, 1, 3}, "m3 out of order");
  // end 112: everything at or before 102 leaves (ts 100)
  ExpectAggs(One(*t, R"({"k":"A","ts":112,"value":4})"), {3, 9, 3, 2, 4}, "m4 evicts");
  // 101 is older than the window start: reported, not added
  ExpectAggs(One(*t, R"({"k":"A","ts":101,"value":50})"), {3, 9, 3, 2, 4}, "m5 late");
  ExpectAggs(One(*t, R"({"k":"B","ts":50,"value":10})"), {1, 10, 10, 10, 10}, "other key");
  ExpectAggs(One(*t, R"({"k":"A","ts":113,"value":6})"), {3, 12, 4, 2, 6}, "m7 evicts 103");
}

// Past max_keys the least recently written key goes, counted in /metrics.
TEST_F(TransformTest, RollingWindowEvictsPastMaxKeysAndCountsIt) {
  auto t = Make("rolling_window: {key: k, field: value, window_messages: 3, max_keys: 2}");
  auto evicted = [] {
    std::string out;
    metrics::Registry::Global().Render(&out);
    const std::string family = "kayak_window_evicted_keys_total{";
    const size_t at = out.find(family);
    return at == std::string::npos ? -1.0 : std::stod(out.substr(out.find('}', at) + 2));
  };
  ExpectAggs(One(*t, R"({"k":"A","value":1})"), {1, 1, 1, 1, 1}, "A");
  ExpectAggs(One(*t, R"({"k":"B","value":2})"), {1, 2, 2, 2, 2}, "B");
  const double before = evicted();
  ExpectAggs(One(*t, R"({"k":"C","value":3})"), {1, 3, 3, 3, 3}, "C evicts A");
  EXPECT_EQ(evicted(), before + 1);
  ExpectAggs(One(*t, R"({"k":"A","value":4})"), {1, 4, 4, 4, 4}, "A starts again");
  EXPECT_EQ(evicted(), before + 2);
}

// A key's points (a ring that grows and shrinks with them) against a plain
// model: random event times, out of order and late, windows that fill to
// hundreds of points and empty again; a save and restore midway changes
// nothing.
TEST_F(TransformTest, RollingWindowPointsMatchAModel) {
  auto t = Make("rolling_window: {key: k, field: value, window_secs: 50, time_field: ts}");
  std::mt19937 rng(3);
  std::vector<std::pair<int64_t, double>> model;  // (ts, value), the live points
  int64_t end = std::numeric_limits<int64_t>::min();
  int64_t base = 1000;
  for (int i = 0; i < 3000; ++i) {
    // bursts of many points per second, then quiet stretches that empty it
    base += (i % 700 < 600) ? static_cast<int64_t>(rng() % 2) : 60;
    const int64_t ts = base - static_cast<int64_t>(rng() % 40);  // out of order
    const double v = static_cast<double>(rng() % 1000);
    const bool late = !model.empty() && ts <= end - 50;
    if (!late) {
      end = std::max(end, ts);
      model.emplace_back(ts, v);
      std::stable_sort(model.begin(), model.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      std::erase_if(model, [&](const auto& p) { return p.first <= end - 50; });
    }
    if (i == 1500) {  // the state restored into a fresh window goes on the same
      std::string saved;
      t->SaveState(&saved);
      t = Make("rolling_window: {key: k, field: value, window_secs: 50, time_field: ts}");
      ASSERT_TRUE(t->RestoreState(saved).ok());
    }
    const Json j = One(*t, R"({"k":"A","ts":)" + std::to_string(ts) +
                               R"(,"value":)" + std::to_string(static_cast<int>(v)) + "}");
    double sum = 0, lo = 1e300, hi = -1e300;
    for (const auto& p : model) {
      sum += p.second;
      lo = std::min(lo, p.second);
      hi = std::max(hi, p.second);
    }
    ASSERT_EQ(j["value_count"], Json(model.size())) << i;
    ASSERT_DOUBLE_EQ(j["value_sum"].get<double>(), sum) << i;
    ASSERT_DOUBLE_EQ(j["value_min"].get<double>(), lo) << i;
    ASSERT_DOUBLE_EQ(j["value_max"].get<double>(), hi) << i;
  }
}

TEST_F(TransformTest, RollingWindowTimeFormats) {
  auto t = Make("rolling_window: {field: value, window_secs: 1, time_field: ts, aggregates: [count]}");
  EXPECT_EQ(One(*t, R"({"ts":"2024-01-01T00:00:00.000Z","value":1})")["value_count"], Json(1));
  EXPECT_EQ(One(*t, R"({"ts":"2024-01-01T01:00:00.500+01:00","value":1})")["value_count"], Json(2));
  EXPECT_EQ(One(*t, R"({"ts":1704067201000,"value":1})")["value_count"], Json(2));  // ms, +1 s
  Batch b = MakeBatch({R"({"ts":"yesterday","value":1})"});
  EXPECT_FALSE(t->Process(&b).ok());
  EXPECT_TRUE(One(*t, R"({"ts":1704067201001,"value":1})").contains("value_count"));
  EXPECT_FALSE(One(*t, R"({"ts":1704067201001,"value":1})").contains("value_sum"));
}

TEST_F(TransformTest, RollingWindowArrivalTimeAndCount) {
  auto t = Make("rolling_window: {key: k, field: value, window_secs: 2}");
  ExpectAggs(One(*t, R"({"k":"A","value":1})", 10'000), {1, 1, 1, 1, 1}, "a1");
  ExpectAggs(One(*t, R"({"k":"A","value":3})", 11'000), {2, 4, 2, 1, 3}, "a2");
  ExpectAggs(One(*t, R"({"k":"A","value":5})", 12'500), {2, 8, 4, 3, 5}, "a3");
  auto c = Make("rolling_window: {key: k, field: value, window_messages: 3}");
  const double sums[] = {1, 3, 6, 9, 12};
  for (int i = 1; i <= 5; ++i) {
    Json j = One(*c, R"({"k":"A","value":)" + std::to_string(i) + "}");
    EXPECT_DOUBLE_EQ(j["value_sum"].get<double>(), sums[i - 1]) << i;
    EXPECT_EQ(j["value_count"], Json(std::min(i, 3)));
  }
}

TEST_F(TransformTest, RollingWindowIdleTimeoutExpires) {
  auto t = Make("rolling_window: {key: k, field: value, window_messages: 100, idle_timeout_secs: 10}");
  EXPECT_EQ(One(*t, R"({"k":"A","value":1})")["value_count"], Json(1));
  clock_.AdvanceMs(9'000);
  EXPECT_EQ(One(*t, R"({"k":"A","value":1})")["value_count"], Json(2));  // written 9 s ago: alive
  clock_.AdvanceMs(10'000);
  Batch none;
  t->Tick(clock_.NowMs(), &none);  // expiry by the periodic tick
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(One(*t, R"({"k":"A","value":1})")["value_count"], Json(1));  // started fresh
}

// A full save and the deltas after it restore the same windows (keys, points,
// last writes, late count, write order) as a full save of the original,
// through new keys, rewrites, idle expiry, eviction at max_keys and keys
// written again after they went; a delta cut short is refused.
TEST_F(TransformTest, RollingWindowDeltasRestoreTheWindows) {
  const std::string cfg =
      "rolling_window: {key: k, field: value, window_secs: 5, time_field: ts, "
      "idle_timeout_secs: 30, max_keys: 150}";
  auto t = Make(cfg);
  std::mt19937 rng(3);
  int64_t ts = 1'700'000'000'000;
  auto churn = [&](int n) {
    Batch b;
    for (int i = 0; i < n; ++i) {
      ts += static_cast<int64_t>(rng() % 400) - 100;  // some late
      b = MakeBatch({"{\"k\":\"k" + std::to_string(rng() % 200) + "\",\"value\":" +
                     std::to_string(rng() % 50) + ",\"ts\":" + std::to_string(ts) + "}"});
      ASSERT_TRUE(t->Process(&b).ok());
      if (i % 40 == 39) {
        clock_.AdvanceMs(static_cast<int64_t>(rng() % 3000));
        Batch none;
        t->Tick(clock_.NowMs(), &none);
      }
    }
  };
  churn(300);
  std::string base;
  t->SaveState(&base);
  for (int round = 0; round < 20; ++round) {
    // a chain of one to four deltas after the full state
    std::vector<std::string> deltas;
    for (int k = 0; k <= round % 4; ++k) {
      churn(static_cast<int>(rng() % 80));
      if (round % 9 == 4 && k == 0) clock_.AdvanceMs(31'000);  // all idle past the timeout
      std::string d;
      ASSERT_TRUE(t->SaveDelta(&d));
      EXPECT_FALSE(t->StateChanged());
      deltas.push_back(d);
    }
    auto r = Make(cfg);
    ASSERT_TRUE(r->RestoreState(base).ok());
    for (const auto& x : deltas) ASSERT_TRUE(r->ApplyDelta(x).ok());
    std::string want, got;
    t->SaveState(&want);
    r->SaveState(&got);
    ASSERT_EQ(got, want) << "round " << round;
    EXPECT_FALSE(r->ApplyDelta(deltas[0].substr(0, deltas[0].size() - 1)).ok());
    // The coordinator's compaction of the same chain, from the bytes alone,
    // writes the same full state.
    ASSERT_TRUE(t->Compacts());
    std::vector<std::string_view> chain(deltas.begin(), deltas.end());
    std::string compacted;
    ASSERT_TRUE(t->CompactState(base, chain, &compacted).ok());
    ASSERT_EQ(compacted, want) << "compaction, round " << round;
    chain[0] = chain[0].substr(0, chain[0].size() - 1);
    EXPECT_FALSE(t->CompactState(base, chain, &compacted).ok());
    base = want;
  }
}

// The first checkpoint after a start: one delta over the full state of an
// empty window (no table of its keys is built for that) compacts to the
// full state, keys evicted in between left out.
TEST_F(TransformTest, RollingWindowOneDeltaOverAnEmptyStateCompactsToTheFullState) {
  const std::string cfg = "rolling_window: {key: k, field: value, window_messages: 3, "
                          "max_keys: 50}";
  auto t = Make(cfg);
  std::string empty;
  t->SaveState(&empty);
  for (int i = 0; i < 500; ++i) {
    Batch b = MakeBatch({"{\"k\":\"k" + std::to_string((i * 7) % 70) + "\",\"value\":" +
                         std::to_string(i) + "}"});
    ASSERT_TRUE(t->Process(&b).ok());
  }
  std::string delta, want, got;
  ASSERT_TRUE(t->SaveDelta(&delta));
  t->SaveState(&want);
  ASSERT_TRUE(t->CompactState(empty, std::vector<std::string_view>{delta}, &got).ok());
  EXPECT_EQ(got, want);
  // Two deltas over it (the table again): the second one's keys win.
  for (int i = 0; i < 40; ++i) {
    Batch b = MakeBatch({"{\"k\":\"k" + std::to_string(i % 9) + "\",\"value\":1}"});
    ASSERT_TRUE(t->Process(&b).ok());
  }
  std::string second;
  ASSERT_TRUE(t->SaveDelta(&second));
  want.clear();
  got.clear();
  t->SaveState(&want);
  ASSERT_TRUE(
      t->CompactState(empty, std::vector<std::string_view>{delta, second}, &got).ok());
  EXPECT_EQ(got, want);
}

// A delta sealed at the barrier and collected later (on the coordinator's
// thread) is byte for byte the delta SaveDelta would have written at the
// seal, however the window changed meanwhile: keys written again, expired,
// evicted and new before or while they are collected. A twin fed the same
// messages writes the expected deltas.
TEST_F(TransformTest, RollingWindowSealedDeltasAreTheDeltasAtTheSeal) {
  const std::string cfg =
      "rolling_window: {key: k, field: value, window_secs: 5, time_field: ts, "
      "idle_timeout_secs: 30, max_keys: 6000}";
  auto t = Make(cfg);
  auto twin = Make(cfg);
  std::mt19937 rng(7);
  int64_t ts = 1'700'000'000'000;
  // Messages for both, as batches of up to 100; keys from a range that
  // outgrows max_keys now and then (eviction).
  auto batches = [&](int n, int keys) {
    std::vector<std::string> all;
    for (int i = 0; i < n; ++i) {
      ts += static_cast<int64_t>(rng() % 40) - 10;
      all.push_back("{\"k\":\"k" + std::to_string(rng() % keys) + "\",\"value\":" +
                    std::to_string(rng() % 50) + ",\"ts\":" + std::to_string(ts) + "}");
    }
    std::vector<std::vector<std::string>> out;
    for (size_t i = 0; i < all.size(); i += 100) {
      out.emplace_back(all.begin() + static_cast<long>(i),
                       all.begin() + static_cast<long>(std::min(all.size(), i + 100)));
    }
    return out;
  };
  auto feed = [&](Transform* x, const std::vector<std::string>& batch) {
    Batch b = MakeBatch(batch, clock_.NowMs());
    ASSERT_TRUE(x->Process(&b).ok());
  };
  auto tick = [&](Transform* x) {
    Batch none;
    x->Tick(clock_.NowMs(), &none);
  };
  for (const auto& b : batches(8000, 7000)) {
    feed(t.get(), b);
    feed(twin.get(), b);
  }
  std::string base, twin_base;
  t->SaveState(&base);
  twin->SaveState(&twin_base);
  ASSERT_EQ(base, twin_base);
  std::vector<std::string> chain;
  for (int round = 0; round < 12; ++round) {
    for (const auto& b : batches(static_cast<int>(3000 + rng() % 9000), 7000)) {
      feed(t.get(), b);
      feed(twin.get(), b);
    }
    std::string want;
    if (!twin->SaveDelta(&want)) {
      // Too many keys dropped since (every key expired): a full save, for both.
      EXPECT_FALSE(t->SealDelta());
      std::string twin_full;
      base.clear();
      t->SaveState(&base);
      twin->SaveState(&twin_full);
      ASSERT_EQ(base, twin_full);
      chain.clear();
      continue;
    }
    std::string at_seal;
    twin->SaveState(&at_seal);  // what the window is at the seal
    ASSERT_TRUE(t->SealDelta());
    EXPECT_FALSE(t->StateChanged());
    EXPECT_FALSE(t->SealDelta()) << "a second seal before the first is collected";
    // The window goes on before the collection, or during it on another
    // thread; the twin follows with the same messages.
    const auto after = batches(static_cast<int>(rng() % 6000), round % 3 == 0 ? 800 : 7000);
    const bool idle = round % 4 == 2;  // every key expires before it is collected
    auto go_on = [&] {
      for (const auto& b : after) {
        feed(t.get(), b);
        feed(twin.get(), b);
      }
      if (idle) {
        clock_.AdvanceMs(31'000);
        tick(t.get());
        tick(twin.get());
      }
    };
    std::string got;
    Status collected;
    if (round % 2 == 0) {
      go_on();
      collected = t->CollectDelta(&got);
    } else {
      std::thread coordinator([&] { collected = t->CollectDelta(&got); });
      go_on();
      coordinator.join();
    }
    ASSERT_TRUE(collected.ok()) << collected.message();
    ASSERT_EQ(got, want) << "round " << round;
    // The full state and the chain of sealed deltas restore the window as
    // it was at the seal.
    chain.push_back(got);
    auto r = Make(cfg);
    ASSERT_TRUE(r->RestoreState(base).ok());
    for (const auto& d : chain) ASSERT_TRUE(r->ApplyDelta(d).ok());
    std::string restored;
    r->SaveState(&restored);
    ASSERT_EQ(restored, at_seal) << "round " << round;
  }
}

// A seal whose checkpoint was abandoned is never collected: a full save
// gives it up, and the collection fails rather than write a delta that
// does not follow the chain.
TEST_F(TransformTest, RollingWindowAbandonedSealIsGivenUp) {
  auto t = Make("rolling_window: {key: k, field: value, window_messages: 3}");
  EXPECT_FALSE(t->SealDelta()) << "nothing saved yet: no delta to seal";
  One(*t, R"({"k":"a","value":1})");
  std::string full;
  t->SaveState(&full);
  One(*t, R"({"k":"a","value":2})");
  ASSERT_TRUE(t->SealDelta());
  std::string delta;
  EXPECT_FALSE(t->SaveDelta(&delta)) << "the sealed changes would be missing from it";
  std::string again;
  t->SaveState(&again);
  EXPECT_FALSE(t->CollectDelta(&delta).ok());
  One(*t, R"({"k":"b","value":5})");
  ASSERT_TRUE(t->SealDelta());
  ASSERT_TRUE(t->CollectDelta(&delta).ok());
  auto r = Make("rolling_window: {key: k, field: value, window_messages: 3}");
  ASSERT_TRUE(r->RestoreState(again).ok());
  ASSERT_TRUE(r->ApplyDelta(delta).ok());
  std::string want, got;
  t->SaveState(&want);
  r->SaveState(&got);
  EXPECT_EQ(got, want);
}

TEST_F(TransformTest, RollingWindowBadConfig) {
  EXPECT_NE(MakeError("rolling_window: {field: v}").find("exactly one of"), std::string::npos);
  EXPECT_NE(MakeError("rolling_window: {field: v, window_secs: 1, aggregates: [median]}")
                .find("unknown aggregate 'median'"),
            std::string::npos);
  auto t = Make("rolling_window: {key: k, field: value, window_messages: 3}");
  Batch b = MakeBatch({R"({"k":"A","value":"high"})"});
  EXPECT_NE(t->Process(&b).message().find("not a number"), std::string::npos);
}

TEST_F(TransformTest, BucketOps) {
  buckets_.Add("b", 0);
  auto add = Make("bucket: {name: b, key: k, op: add, field: v, as: total}");
  EXPECT_EQ(One(*add, R"({"k":"x","v":2})")["total"], Json(2));
  EXPECT_EQ(One(*add, R"({"k":"x","v":3})")["total"], Json(5));
  EXPECT_EQ(One(*add, R"({"k":"y","v":1.5})")["total"], Json(1.5));
  auto mn = Make("bucket: {name: b, key: k, op: min, field: v, as: m}");
  EXPECT_EQ(One(*mn, R"({"k":"lo","v":4})")["m"], Json(4));
  EXPECT_EQ(One(*mn, R"({"k":"lo","v":9})")["m"], Json(4));
  EXPECT_EQ(One(*mn, R"({"k":"lo","v":-1})")["m"], Json(-1));
  auto mx = Make("bucket: {name: b, key: k, op: max, field: v, as: m}");
  EXPECT_EQ(One(*mx, R"({"k":"hi","v":4})")["m"], Json(4));
  EXPECT_EQ(One(*mx, R"({"k":"hi","v":2})")["m"], Json(4));
  auto cnt = Make("bucket: {name: b, key: k, op: count, as: n}");
  EXPECT_EQ(One(*cnt, R"({"k":"c"})")["n"], Json(1));
  EXPECT_EQ(One(*cnt, R"({"k":"c"})")["n"], Json(2));
  auto set = Make("bucket: {name: b, key: k, op: set, field: v}");
  One(*set, R"({"k":"s","v":{"any":"json"}})");
  auto app = Make("bucket: {name: b, key: k, op: append, field: v, as: l, max_items: 2}");
  EXPECT_EQ(One(*app, R"({"k":"a","v":1})")["l"], Json::parse("[1]"));
  EXPECT_EQ(One(*app, R"({"k":"a","v":2})")["l"], Json::parse("[1,2]"));
  EXPECT_EQ(One(*app, R"({"k":"a","v":3})")["l"], Json::parse("[2,3]"));
  // lookup, as a bucket op and as its own transform
  auto look = Make("bucket: {name: b, key: k, op: lookup, as: found}");
  EXPECT_EQ(One(*look, R"({"k":"s"})")["found"], Json::parse(R"({"any":"json"})"));
  EXPECT_EQ(One(*look, R"({"k":"none"})")["found"], Json(nullptr));
  auto look2 = Make("lookup: {bucket: b, key: k, as: t}");
  EXPECT_EQ(One(*look2, R"({"k":"x"})")["t"], Json(5));
  Bucket* b = buckets_.Find("b");
  EXPECT_EQ(b->Get("x", clock_.NowMs())->value, Json(5));
  EXPECT_EQ(b->Get("c", clock_.NowMs())->last_write_ms, clock_.NowMs());
  // add onto a non-number is an error and leaves the entry alone
  Batch bad = MakeBatch({R"({"k":"s","v":1})"});
  EXPECT_FALSE(add->Process(&bad).ok());
  EXPECT_EQ(b->Get("s", clock_.NowMs())->value, Json::parse(R"({"any":"json"})"));
  Batch nokey = MakeBatch({R"({"v":1})"});
  EXPECT_NE(add->Process(&nokey).message().find("key field 'k' is missing"), std::string::npos);
}

TEST_F(TransformTest, BucketIdleTimeout) {
  buckets_.Add("t", 60'000);
  auto cnt = Make("bucket: {name: t, key: k, op: count, as: n}");
  EXPECT_EQ(One(*cnt, R"({"k":"a"})")["n"], Json(1));
  clock_.AdvanceMs(59'000);
  EXPECT_EQ(One(*cnt, R"({"k":"a"})")["n"], Json(2));
  clock_.AdvanceMs(60'000);
  Batch none;
  cnt->Tick(clock_.NowMs(), &none);
  EXPECT_EQ(buckets_.Find("t")->Size(), 0u);
  EXPECT_EQ(One(*cnt, R"({"k":"a"})")["n"], Json(1));
}

TEST_F(TransformTest, BufferReleasesByCount) {
  auto t = Make("buffer: {max_messages: 3}");
  for (int i = 0; i < 2; ++i) {
    Batch b = MakeBatch({R"({"i":1})"});
    ASSERT_TRUE(t->Process(&b).ok());
    EXPECT_TRUE(b.empty());
  }
  Batch b = MakeBatch({R"({"i":3})"});
  ASSERT_TRUE(t->Process(&b).ok());
  EXPECT_EQ(b.size(), 3u);
  Batch again = MakeBatch({R"({"i":4})"});
  ASSERT_TRUE(t->Process(&again).ok());
  EXPECT_TRUE(again.empty());
  Batch drained;
  t->Drain(&drained);
  EXPECT_EQ(drained.size(), 1u);
}

TEST_F(TransformTest, BufferReleasesByBytes) {
  auto t = Make("buffer: {max_bytes: 20}");
  Batch a = MakeBatch({R"({"x":"1234"})"});  // 12 bytes
  ASSERT_TRUE(t->Process(&a).ok());
  EXPECT_TRUE(a.empty());
  Batch b = MakeBatch({R"({"x":"5678"})"});
  ASSERT_TRUE(t->Process(&b).ok());
  EXPECT_EQ(b.size(), 2u);
}

TEST_F(TransformTest, BufferReleasesByTime) {
  auto t = Make("buffer: {max_secs: 5, max_messages: 1000}");
  Batch a = MakeBatch({R"({"x":1})", R"({"x":2})"});
  ASSERT_TRUE(t->Process(&a).ok());
  EXPECT_TRUE(a.empty());
  clock_.AdvanceMs(4'999);
  Batch out;
  t->Tick(clock_.NowMs(), &out);
  EXPECT_TRUE(out.empty());
  clock_.AdvanceMs(1);
  t->Tick(clock_.NowMs(), &out);
  EXPECT_EQ(Payloads(out), (std::vector<std::string>{R"({"x":1})", R"({"x":2})"}));
  EXPECT_NE(MakeError("buffer: {}").find("at least one"), std::string::npos);
}

TEST_F(TransformTest, LuaTransformsAndDrops) {
  auto t = Make(R"(lua:
  script: |
    function process(m)
      if m.drop then return nil end
      m.double = m.v * 2
      m.tags = {"a", "b"}
      return m
    end
)");
  Json j = One(*t, R"({"v":21,"s":"x"})");
  EXPECT_EQ(j["double"], Json(42));
  EXPECT_EQ(j["tags"], Json::parse(R"(["a","b"])"));
  EXPECT_EQ(j["s"], Json("x"));
  EXPECT_TRUE(One(*t, R"({"v":1,"drop":true})").is_null());
}

TEST_F(TransformTest, LuaIsSandboxed) {
  for (const char* body : {R"(return io.open("/etc/passwd"))", R"(return os.execute("true"))",
                           R"(return require("os"))", R"(return dofile("/etc/passwd"))",
                           R"(return load("\27Lua")())", R"(return string.dump(process))"}) {
    auto t = Make(std::string("lua: {script: 'function process(m) ") + body + " end'}");
    Batch b = MakeBatch({R"({"v":1})"});
    Status st = t->Process(&b);
    EXPECT_FALSE(st.ok()) << body;
  }
  auto binary = Make(R"(lua: {script: 'function process(m) local f, err = load("\27Lua") m.err = err return m end'})");
  EXPECT_NE(One(*binary, R"({"v":1})")["err"].get<std::string>().find("binary chunk"),
            std::string::npos);
  auto loop = Make(R"(lua: {script: "function process(m) while true do end end", max_instructions: 100000})");
  Batch b = MakeBatch({R"({"v":1})"});
  Status st = loop->Process(&b);
  EXPECT_NE(st.message().find("instruction limit"), std::string::npos) << st.message();
  EXPECT_NE(MakeError("lua: {script: 'function process(m'}").find("lua transform"), std::string::npos);
  EXPECT_NE(MakeError("lua: {script: 'x = 1'}").find("must define a function process"),
            std::string::npos);
}

}  // namespace
}  // namespace kayak::testing
