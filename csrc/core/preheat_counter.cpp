#include "core/preheat_counter.h"

#include <algorithm>

namespace msprobe {
namespace {

FloatKind kind_of(const std::string& dtype) {
  if (dtype == "torch.float16") return FloatKind::Half;
  if (dtype == "torch.bfloat16") return FloatKind::BFloat16;
  if (dtype == "torch.float32") return FloatKind::Float;
  if (dtype == "torch.float64") return FloatKind::Double;
  return FloatKind::Other;
}

}  // namespace

bool PreheatCounter::counting(const std::string& api, int64_t step) {
  if (step != 0) return false;
  ++calls_in_step0_[api];
  return true;
}

double PreheatCounter::threshold(const std::string& api, const std::string& dtype) const {
  auto by_api = threshold_.find(api);
  if (by_api == threshold_.end()) return kStartThreshold;
  auto t = by_api->second.find(dtype);
  return t == by_api->second.end() ? kStartThreshold : t->second;
}

int64_t PreheatCounter::sample_count(const std::string& api) const {
  auto found = calls_in_step0_.find(api);
  const int64_t total = found == calls_in_step0_.end() ? 0 : found->second;
  const int64_t per_step = (total + preheat_step_ - 1) / preheat_step_;  // ceil
  return std::min(per_step, max_sample_);
}

std::set<int64_t> PreheatCounter::samples_of(const std::string& api, int64_t step) const {
  std::set<int64_t> out;
  auto found = calls_in_step0_.find(api);
  const int64_t total = found == calls_in_step0_.end() ? 0 : found->second;
  if (total == 0) return out;
  for (int64_t i = 1; i <= sample_count(api); ++i) {
    const int64_t at = (preheat_step_ * (i - 1) + step) % total;
    out.insert(at == 0 ? total : at);
  }
  return out;
}

bool PreheatCounter::sampled(const std::string& api, int64_t step) {
  if (step != sample_step_) {
    records_.clear();
    called_.clear();
    sampled_.clear();
    sample_step_ = step;
  }
  if (preheat_step_ <= step) return false;
  const int64_t seq = ++called_[api];
  return samples_of(api, step).count(seq) > 0;
}

void PreheatCounter::record(const std::string& api, const std::string& dtype, double max_ratio,
                            bool cpu_agrees) {
  const int64_t samples = ++sampled_[api];
  if (settled_[api].count(dtype)) return;
  records_[api][dtype].emplace_back(max_ratio, cpu_agrees);
  if (samples >= sample_count(api)) adjust(api);
}

void PreheatCounter::adjust(const std::string& api) {
  for (const auto& [dtype, rec] : records_[api]) {
    std::vector<double> agreed, disagreed;
    for (const auto& [ratio, ok] : rec) (ok ? agreed : disagreed).push_back(ratio);
    const double old = threshold(api, dtype);
    double updated = old;
    if (!disagreed.empty()) {
      const double lowest_bad = *std::min_element(disagreed.begin(), disagreed.end());
      if (agreed.empty() || lowest_bad > *std::max_element(agreed.begin(), agreed.end())) {
        updated = std::min(lowest_bad, old);
        settled_[api].insert(dtype);
      }
    } else if (!agreed.empty()) {
      updated = *std::max_element(agreed.begin(), agreed.end()) > old ? 1 + (old - 1) * 2.0
                                                                      : 1 + (old - 1) / 2.0;
    }
    threshold_[api][dtype] = std::max(updated, ratio_threshold(kind_of(dtype), mode_));
  }
}

}  // namespace msprobe
