#include "live/stats/pending_stats.h"

#include "live/stats/nonfinite_facts.h"

namespace msprobe {

int32_t PendingStats::add(const at::Tensor& t) {
  at::Tensor results = device_reductions(t);
  std::lock_guard<std::mutex> lock(mu_);
  results_.push_back(std::move(results));
  slots_.store(results_.size(), std::memory_order_relaxed);
  tensors_.push_back(t.detach());
  return static_cast<int32_t>(results_.size() - 1);
}

void PendingStats::resolve() {
  std::lock_guard<std::mutex> lock(mu_);
  if (results_.size() == resolved_.size()) return;
  // One copy per device and result dtype, all but the last without waiting; the last one's wait
  // covers the others (same stream), so the host waits once.
  std::vector<std::pair<std::vector<size_t>, at::Tensor>> groups;
  for (size_t i = resolved_.size(); i < results_.size(); ++i) {
    const at::Tensor& r = results_[i];
    auto it = groups.begin();
    while (it != groups.end() && !(results_[it->first[0]].device() == r.device() &&
                                   results_[it->first[0]].scalar_type() == r.scalar_type())) {
      ++it;
    }
    if (it == groups.end()) {
      groups.push_back({{i}, at::Tensor()});
    } else {
      it->first.push_back(i);
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<at::Tensor> parts;
    for (size_t i : groups[g].first) parts.push_back(results_[i]);
    const at::Tensor stacked = at::stack(parts);
    const bool last = g + 1 == groups.size();
    if (stacked.is_cuda() && !last) {
      at::Tensor host =
          at::empty(stacked.sizes(), stacked.options().device(at::kCPU).pinned_memory(true));
      host.copy_(stacked, /*non_blocking=*/true);
      groups[g].second = host;
    } else {
      groups[g].second = stacked.cpu();
    }
  }
  count_host_sync();
  resolved_.resize(results_.size());
  for (auto& [slots, host] : groups) {
    const at::Tensor values = host.to(at::kDouble);
    const double* v = values.data_ptr<double>();
    for (size_t k = 0; k < slots.size(); ++k) {
      const size_t slot = slots[k];
      Resolved& r = resolved_[slot];
      r.summary = finish_device_summary(tensors_[slot], v + 4 * k);
      r.facts = nonfinite_facts(tensors_[slot], r.summary.max, r.summary.min);
      // Activations are not kept alive longer than a batch.
      tensors_[slot] = at::Tensor();
      results_[slot] = at::Tensor();
    }
  }
}

void PendingStats::fill(Entry& e) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Resolved& r = resolved_.at(static_cast<size_t>(e.pending_stats));
  set_statistics(e, r.summary.max, r.summary.min, r.summary.mean, r.summary.norm, r.facts);
}

void PendingStats::clear() {
  if (empty()) return;  // nothing was launched this step (a CPU run's sync, a step without calls)
  std::lock_guard<std::mutex> lock(mu_);
  results_.clear();
  tensors_.clear();
  resolved_.clear();
  slots_.store(0, std::memory_order_relaxed);
}

}  // namespace msprobe
