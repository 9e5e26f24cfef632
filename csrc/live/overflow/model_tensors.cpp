#include "live/overflow/model_tensors.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "live/stats/device_stats.h"
#include "live/stats/scan_vectors.h"

namespace msprobe {

namespace {

bool is_running_stat(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  return leaf == "running_mean" || leaf == "running_var";
}

// Whether every element's exponent bits are short of all ones (NaN and ±inf have all ones): the
// largest magnitude's bits (sign cleared) below the exponent's. A max reduction over blocks, which
// the compiler vectorizes (unsigned max needs SSE4.1 or AVX2: hence the clones; the x86-64
// baseline's scalar loop read 2.7 GB/s, a quarter of the statistics scan's rate). Stops at the
// first bad block.
template <typename Bits>
__attribute__((always_inline)) inline bool all_finite_bits(const Bits* p, int64_t n,
                                                           Bits exponent) {
  constexpr int64_t kBlock = 4096;
  const Bits magnitude = static_cast<Bits>(~(Bits{1} << (sizeof(Bits) * 8 - 1)));
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t end = std::min(n, at + kBlock);
    Bits peak = 0;
    for (int64_t i = at; i < end; ++i) {
      const Bits m = static_cast<Bits>(p[i] & magnitude);
      peak = m > peak ? m : peak;
    }
    if (peak >= exponent) return false;
  }
  return true;
}

MSPROBE_SCAN_CLONES bool all_finite_32(const uint32_t* p, int64_t n) {
  return all_finite_bits<uint32_t>(p, n, 0x7f800000u);
}
MSPROBE_SCAN_CLONES bool all_finite_64(const uint64_t* p, int64_t n) {
  return all_finite_bits<uint64_t>(p, n, 0x7ff0000000000000ull);
}
MSPROBE_SCAN_CLONES bool all_finite_16(const uint16_t* p, int64_t n, uint16_t exponent) {
  return all_finite_bits<uint16_t>(p, n, exponent);
}

// A CPU tensor's finiteness read in place, without dispatching an op: the optimizer-step check
// runs every step. Nothing for other devices and dtypes.
std::optional<bool> cpu_all_finite(const at::Tensor& t) {
  if (generic_statistics_forced()) return std::nullopt;  // the tests' way to the device path
  if (t.device().type() != at::kCPU || t.layout() != at::kStrided || !t.is_contiguous()) {
    return std::nullopt;
  }
  const void* data = t.data_ptr();
  switch (t.scalar_type()) {
    case at::kFloat:
      return all_finite_32(static_cast<const uint32_t*>(data), t.numel());
    case at::kDouble:
      return all_finite_64(static_cast<const uint64_t*>(data), t.numel());
    case at::kHalf:
      return all_finite_16(static_cast<const uint16_t*>(data), t.numel(), 0x7c00u);
    case at::kBFloat16:
      return all_finite_16(static_cast<const uint16_t*>(data), t.numel(), 0x7f80u);
    default:
      return std::nullopt;
  }
}

// Inference tensors have no version counter.
uint32_t version_of(const at::Tensor& t) {
  return t.is_inference() ? 0 : static_cast<uint32_t>(t._version());
}

}  // namespace

void ModelTensors::add(const std::string& name, const at::Tensor& t, bool buffer) {
  if (!t.defined()) return;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (auto it = index_.find(impl); it != index_.end() && entries_[it->second].weak.lock()) {
    return;  // shared between modules or models: the first name stays
  }
  const uint32_t v = version_of(t);
  index_[impl] = entries_.size();
  if (buffer) by_name_.emplace(name, entries_.size());
  entries_.push_back(Item{name, WeakImpl(t.getIntrusivePtr()), buffer, v, v, std::nullopt, false});
}

void ModelTensors::new_step() {
  bool gradients = false;
  for (Item& item : entries_) {
    auto strong = item.weak.lock();
    if (!strong) continue;
    const at::Tensor t(std::move(strong));
    item.version_at_step = version_of(t);
    if (!item.buffer) {
      gradients = gradients || t.grad().defined();
    } else if (is_running_stat(item.name) && item.version_looked_at != item.version_at_step &&
               t.is_floating_point() && t.layout() == at::kStrided && !t.is_meta()) {
      // A handful of channels, and only when something other than a norm wrote them.
      const std::optional<bool> finite = cpu_all_finite(t);
      item.nonfinite_when_looked_at =
          finite ? !*finite : !at::isfinite(t.detach()).all().item<bool>();
      item.version_looked_at = item.version_at_step;
    }
  }
  gradients_left_ = stepped_ && gradients;
  stepped_ = true;
}

std::optional<ModelTensors::Found> ModelTensors::find(const at::Tensor& t) const {
  auto it = index_.find(t.unsafeGetTensorImpl());
  if (it == index_.end()) return std::nullopt;
  const Item& item = entries_[it->second];
  if (item.weak.lock().get() != t.unsafeGetTensorImpl()) return std::nullopt;  // address reused
  const uint32_t v = version_of(t);
  const bool running = item.buffer && is_running_stat(item.name);
  return Found{item.name, item.buffer, v == item.version_at_add && !running,
               v != item.version_at_step, running};
}

std::optional<std::string> ModelTensors::nonfinite_under(const std::string& qualname) const {
  const std::string prefix = qualname.empty() ? "" : qualname + ".";
  for (const Item& item : entries_) {
    if (item.name.compare(0, prefix.size(), prefix) != 0) continue;
    auto strong = item.weak.lock();
    if (!strong) continue;
    const at::Tensor t(std::move(strong));
    if (!t.is_floating_point() || t.layout() != at::kStrided || t.is_meta()) continue;
    if (!at::isfinite(t.detach()).all().item<bool>()) return item.name;
  }
  return std::nullopt;
}

ModelTensors::RunningStats ModelTensors::running_stats_of(const std::string& qualname) const {
  RunningStats out;
  for (const char* leaf : {".running_mean", ".running_var", ".num_batches_tracked"}) {
    auto it = by_name_.find(qualname + leaf);
    if (it == by_name_.end()) continue;
    const Item& item = entries_[it->second];
    auto strong = item.weak.lock();
    if (!strong) continue;
    at::Tensor t(std::move(strong));
    if (leaf[1] == 'n') {
      out.trained_this_step = version_of(t) != item.version_at_step;
    } else {
      // Written since the step began by something other than a norm: unknown, taken as come in.
      const bool came_in_bad =
          item.nonfinite_when_looked_at || version_of(t) != item.version_at_step;
      out.stats.push_back({item.name, std::move(t), came_in_bad});
    }
  }
  return out;
}

std::optional<std::string> ModelTensors::gradient_of(const at::Tensor& t) const {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  for (const Item& item : entries_) {
    if (item.buffer) continue;
    auto strong = item.weak.lock();
    if (!strong) continue;
    if (at::Tensor(std::move(strong)).grad().unsafeGetTensorImpl() == impl) return item.name;
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, at::Tensor>> ModelTensors::gradients() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const Item& item : entries_) {
    if (item.buffer) continue;
    auto strong = item.weak.lock();
    if (!strong) continue;
    at::Tensor grad = at::Tensor(std::move(strong)).grad();
    if (!grad.defined() || !grad.is_floating_point() || grad.layout() != at::kStrided) continue;
    // A DTensor's (FSDP2): reading it would be a collective. The optimizer-step check reads its
    // local shard.
    if (grad.key_set().has(c10::DispatchKey::Python)) continue;
    out.emplace_back(item.name, grad.detach());
  }
  return out;
}

namespace {

// Which of `grads` (one device, one dtype) hold NaN or ±inf, in one multi-tensor pass and one
// sync when none does: a tensor's 2-norm is NaN or ±inf wherever one element is. A norm can also
// overflow for finite values (a large fp16 gradient), so a group whose norms are not all finite
// is looked at tensor by tensor, once more.
std::vector<size_t> non_finite_on_device(const std::vector<at::Tensor>& grads,
                                         const std::vector<size_t>& items) {
  const at::Tensor norms = at::stack(at::_foreach_norm(grads));
  if (at::isfinite(norms).all().item<bool>()) return {};
  std::vector<at::Tensor> flags;
  flags.reserve(grads.size());
  for (const at::Tensor& g : grads) flags.push_back(at::isfinite(g).all());
  const at::Tensor finite = at::stack(flags).cpu();
  const bool* ok = finite.data_ptr<bool>();
  std::vector<size_t> bad;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!ok[k]) bad.push_back(items[k]);
  }
  return bad;
}

}  // namespace

std::vector<std::string> non_finite_gradients(
    const std::vector<std::pair<std::string, at::Tensor>>& gradients) {
  struct Group {
    c10::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> grads;
    std::vector<size_t> items;
  };
  std::vector<Group> groups;
  std::vector<size_t> bad;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const at::Tensor& grad = gradients[i].second;
    if (std::optional<bool> finite = cpu_all_finite(grad)) {
      if (!*finite) bad.push_back(i);
      continue;
    }
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.device == grad.device() && g.dtype == grad.scalar_type();
    });
    if (group == groups.end())
      group = groups.insert(groups.end(), Group{grad.device(), grad.scalar_type(), {}, {}});
    group->grads.push_back(grad);
    group->items.push_back(i);
  }
  for (const Group& g : groups) {
    for (size_t i : non_finite_on_device(g.grads, g.items)) bad.push_back(i);
  }
  std::sort(bad.begin(), bad.end());
  std::vector<std::string> names;
  for (size_t i : bad) names.push_back(gradients[i].first);
  return names;
}

}  // namespace msprobe
