#include "live/monitor/moment_prefetch.h"

namespace msprobe {

void MomentPrefetch::add(const at::Tensor& t) {
  // A plain CPU tensor only: a subclass's (FSDP2's DTensor) ops dispatch to Python, which needs
  // the GIL the training thread holds while it waits for this read.
  if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided ||
      t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python) ||
      index_.count(t.unsafeGetTensorImpl())) {
    return;
  }
  index_.emplace(t.unsafeGetTensorImpl(), reads_.size());
  reads_.push_back({t, static_cast<int64_t>(t._version()), {}});
}

void MomentPrefetch::read_ahead(const std::vector<StepParameter>& params) {
  forget();
  for (const StepParameter& p : params) {
    if (!p.in_state) continue;
    add(p.exp_avg);
    add(p.exp_avg_sq);
  }
  if (reads_.empty()) return;
  pending_ = true;
  thread_.post([this] {
    for (Read& r : reads_) r.values = monitor_values(r.tensor, metrics_);
  });
}

void MomentPrefetch::finish() {
  if (!pending_) return;
  thread_.drain();
  pending_ = false;
}

std::optional<std::vector<MonitorValue>> MomentPrefetch::take(const at::Tensor& t) {
  if (!t.defined()) return std::nullopt;
  finish();
  auto it = index_.find(t.unsafeGetTensorImpl());
  if (it == index_.end()) return std::nullopt;
  const Read& r = reads_[it->second];
  if (r.values.empty() || r.version != static_cast<int64_t>(t._version())) return std::nullopt;
  return r.values;
}

void MomentPrefetch::forget() {
  finish();
  reads_.clear();
  index_.clear();
}

}  // namespace msprobe
