#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kayak::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                       bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  if (v > 0) sum_micro_.fetch_add(static_cast<uint64_t>(std::llround(v * 1e6)),
                                  std::memory_order_relaxed);
}

void Histogram::Read(std::vector<uint64_t>* buckets, uint64_t* count, double* sum) const {
  buckets->resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    (*buckets)[i] = counts_[i].load(std::memory_order_relaxed);
  }
  *count = count_.load(std::memory_order_relaxed);
  *sum = static_cast<double>(sum_micro_.load(std::memory_order_relaxed)) / 1e6;
}

std::vector<double> LatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

Registry& Registry::Global() {
  static Registry* r = new Registry();  // never destroyed: threads may record at exit
  return *r;
}

Counter* Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = families_[name];
  if (f.help.empty()) f.help = help;
  auto& slot = f.counters[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

Histogram* Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const Labels& labels, const std::vector<double>& bounds) {
  std::lock_guard lock(mu_);
  Family& f = families_[name];
  if (f.help.empty()) f.help = help;
  f.histogram = true;
  auto& slot = f.histograms[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Histogram>(bounds);
  return slot.get();
}

std::string RenderLabels(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k;
    out += "=\"";
    for (char c : v) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  // The shortest form that reads back the same.
  for (int prec = 1; prec < 17; ++prec) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) return b;
  }
  return buf;
}

void Registry::Render(std::string* out) const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> buckets;
  for (const auto& [name, f] : families_) {
    *out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " +
            (f.histogram ? "histogram" : "counter") + "\n";
    for (const auto& [labels, c] : f.counters) {
      *out += name + (labels.empty() ? "" : "{" + labels + "}") + " " +
              std::to_string(c->value()) + "\n";
    }
    for (const auto& [labels, h] : f.histograms) {
      uint64_t count = 0;
      double sum = 0;
      h->Read(&buckets, &count, &sum);
      const std::string sep = labels.empty() ? "" : labels + ",";
      uint64_t cumulative = 0;
      for (size_t i = 0; i < buckets.size(); ++i) {
        cumulative += buckets[i];
        const std::string le =
            i < h->bounds().size() ? FormatValue(h->bounds()[i]) : std::string("+Inf");
        *out += name + "_bucket{" + sep + "le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
      }
      const std::string braces = labels.empty() ? "" : "{" + labels + "}";
      *out += name + "_sum" + braces + " " + FormatValue(sum) + "\n";
      // (The buckets' total, not `count`: a sample taken between the two
      // stays consistent.)
      *out += name + "_count" + braces + " " + std::to_string(cumulative) + "\n";
    }
  }
}

}  // namespace kayak::metrics
