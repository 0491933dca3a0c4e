// Metrics that components and the engine record as they work and /metrics
// renders in Prometheus's text format (docs/api.md, "Metrics"): counters and
// histograms with fixed buckets, each found by its name and labels. A series
// lives as long as the process, so a counter of a pipeline that is rebuilt
// (a change through the API) keeps counting from where it was.
//
// Recording is lock-free (relaxed atomics); finding a series takes a lock,
// so components look theirs up once, when they are made.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kayak::metrics {

class Counter {
 public:
  void Add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// Observations in seconds (or any base unit) counted into cumulative
// buckets with upper bounds `bounds` (ascending), plus +Inf.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), the last one +Inf; the count and sum.
  void Read(std::vector<uint64_t>* buckets, uint64_t* count, double* sum) const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_micro_{0};  // the sum in millionths
};

// Bucket bounds for durations from 100 µs to about a minute.
std::vector<double> LatencyBounds();

// A label set: name and value pairs, in order.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Registry {
 public:
  // The process's registry (kayak serves one graph per process).
  static Registry& Global();

  // The series of `name` with `labels`, made on first use. `help` is kept
  // from the first call of a name; a name is one kind only.
  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels);
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const Labels& labels, const std::vector<double>& bounds);

  // Every family, in the text format, appended to `out`.
  void Render(std::string* out) const;

 private:
  struct Family {
    std::string help;
    bool histogram = false;
    std::map<std::string, std::unique_ptr<Counter>> counters;      // by rendered labels
    std::map<std::string, std::unique_ptr<Histogram>> histograms;  // by rendered labels
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// `labels` rendered as name="value",... with the text format's escapes.
std::string RenderLabels(const Labels& labels);

// A double as the text format writes it (+Inf, shortest round trip).
std::string FormatValue(double v);

}  // namespace kayak::metrics
