#include "live/stats/fused_range.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "live/stats/device_stats.h"

namespace msprobe {

namespace {

struct Group {
  c10::Device device;
  at::ScalarType dtype;
  std::vector<at::Tensor> tensors;
  std::vector<size_t> items;
};

std::vector<Group> grouped(const std::vector<at::Tensor>& tensors) {
  std::vector<Group> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (t.numel() == 0) continue;  // nothing to read: finite, range 0
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
      return x.device == t.device() && x.dtype == t.scalar_type();
    });
    if (g == groups.end())
      g = groups.insert(groups.end(), Group{t.device(), t.scalar_type(), {}, {}});
    g->tensors.push_back(t.detach());
    g->items.push_back(i);
  }
  return groups;
}

}  // namespace

std::vector<FiniteAndRange> fused_finite_and_range(const std::vector<at::Tensor>& tensors) {
  std::vector<FiniteAndRange> out(tensors.size());
  for (const Group& g : grouped(tensors)) {
    // Both norms of the whole group, then one copy to the host.
    const at::Tensor sums = at::stack(at::_foreach_norm(g.tensors, 1));
    const at::Tensor peaks = at::stack(at::_foreach_norm(g.tensors, INFINITY));
    const at::Tensor host = at::stack({sums, peaks}).to(at::kCPU, at::kDouble);
    count_host_sync();
    const double* s = host.data_ptr<double>();
    const double* m = s + g.items.size();
    for (size_t k = 0; k < g.items.size(); ++k) {
      FiniteAndRange& r = out[g.items[k]];
      r.max_abs = m[k];
      r.finite = std::isfinite(s[k]);
      if (!r.finite && std::isfinite(m[k])) {
        // Finite peaks, a sum beyond the dtype's range, or a NaN the inf-norm's max skipped:
        // the tensor itself decides.
        r.finite = at::isfinite(g.tensors[k]).all().item<bool>();
        count_host_sync();
        if (!r.finite) r.max_abs = std::numeric_limits<double>::quiet_NaN();
      }
    }
  }
  return out;
}

}  // namespace msprobe
