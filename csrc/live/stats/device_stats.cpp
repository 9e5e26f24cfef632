#include "live/stats/device_stats.h"

#include <atomic>
#include <cmath>
#include <vector>

namespace msprobe {

namespace {

// Elements reduced at a time where a reduction would otherwise cast the whole tensor first (CPU
// and NPU reductions with a dtype other than the input's make a converted copy): 1 M elements,
// 4 MB in float32.
constexpr int64_t kChunk = int64_t{1} << 20;

bool float64_allowed(const at::Tensor& t) {
  return t.device().is_cpu() || t.device().is_cuda();
}

at::ScalarType accumulation_type(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble && float64_allowed(t) ? at::kDouble : at::kFloat;
}

// CUDA reduces half and bfloat16 into float32 inside the kernel; elsewhere, and for any other
// mismatch, a reduction with a dtype argument converts its input in full.
bool reductions_copy(const at::Tensor& t, at::ScalarType acc) {
  if (t.scalar_type() == acc) return false;
  if (!t.is_floating_point()) return true;
  return !(t.is_cuda() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16));
}

// Calls f on views of `t` that together hold each element once, each at most kChunk elements
// where it can: flat slices of a contiguous tensor, else slices along the first dimension.
template <typename F>
void for_each_chunk(const at::Tensor& t, const F& f) {
  if (t.numel() <= kChunk || t.dim() == 0) {
    f(t);
    return;
  }
  if (t.is_contiguous()) {
    const at::Tensor flat = t.view({-1});
    for (int64_t start = 0; start < flat.numel(); start += kChunk) {
      f(flat.narrow(0, start, std::min(kChunk, flat.numel() - start)));
    }
    return;
  }
  const int64_t rows = t.size(0);
  const int64_t per_row = t.numel() / rows;
  const int64_t step = std::max<int64_t>(1, kChunk / std::max<int64_t>(per_row, 1));
  for (int64_t start = 0; start < rows; start += step) {
    const at::Tensor piece = t.narrow(0, start, std::min(step, rows - start));
    if (piece.numel() > kChunk && piece.size(0) == 1) {
      for_each_chunk(piece.squeeze(0), f);  // one row larger than a chunk: split it in turn
    } else {
      f(piece);
    }
  }
}

// Sum and norm of `t` (optionally divided by `scale`, a device scalar) in `acc`, chunk by chunk
// where the reductions would copy: {sum, norm} as device scalars.
std::pair<at::Tensor, at::Tensor> sum_and_norm(const at::Tensor& t, at::ScalarType acc,
                                               const at::Tensor* scale) {
  // Scaled or converted chunks go through one buffer: a fresh chunk-sized tensor each time
  // fragments the host heap (the small results land in the block just freed, and the next
  // chunk no longer fits there), so the peak grew by the tensor's size on torch 2.x.
  at::Tensor buffer;
  auto one = [&](const at::Tensor& c) {
    at::Tensor x = c;
    // Integers are converted a chunk at a time: the norm takes floating input only.
    if (scale || !c.is_floating_point()) {
      if (!buffer.defined() || buffer.numel() < c.numel()) {
        buffer = at::empty({c.numel()}, c.options().dtype(acc));
      }
      x = buffer.narrow(0, 0, c.numel()).view(c.sizes());
      if (scale) {
        at::div_out(x, c, *scale);
      } else {
        x.copy_(c);
      }
    }
    return std::make_pair(at::sum(x, acc), at::linalg_vector_norm(x, 2, c10::nullopt, false, acc));
  };
  if (!scale && !reductions_copy(t, acc)) return one(t);
  std::vector<at::Tensor> sums, norms;
  for_each_chunk(t, [&](const at::Tensor& c) {
    auto [s, n] = one(c);
    sums.push_back(s);
    norms.push_back(n);
  });
  if (sums.size() == 1) return {sums[0], norms[0]};
  // The norm of the chunks' norms is the norm of the whole.
  return {at::stack(sums).sum(), at::linalg_vector_norm(at::stack(norms), 2)};
}

// NPUs without float64: such a tensor is reduced in float32 (documented).
at::Tensor reducible(const at::Tensor& t) {
  at::Tensor x = t.detach();
  if (x.scalar_type() == at::kDouble && !float64_allowed(x)) x = x.to(at::kFloat);
  return x;
}

std::atomic<int64_t> g_host_syncs{0};

}  // namespace

void count_host_sync() {
  g_host_syncs.fetch_add(1, std::memory_order_relaxed);
}
int64_t host_syncs() {
  return g_host_syncs.load(std::memory_order_relaxed);
}

// In the tensor's own dtype, without a copy. CUDA has the one-pass aminmax for every dtype; other
// backends do not all (the CPU's lacks float16 in torch 1.13), while max and min exist everywhere.
std::pair<at::Tensor, at::Tensor> max_and_min(const at::Tensor& x) {
  if (x.is_cuda()) {
    auto minmax = at::aminmax(x);
    return {std::get<1>(minmax), std::get<0>(minmax)};
  }
  return {x.max(), x.min()};
}

at::Tensor device_reductions(const at::Tensor& t) {
  const at::Tensor x = reducible(t);
  const at::ScalarType acc = accumulation_type(x);
  auto [hi, lo] = max_and_min(x);
  auto [sum, norm] = sum_and_norm(x, acc, nullptr);
  return at::stack({hi.to(acc), lo.to(acc), sum, norm});
}

DeviceSummary finish_device_summary(const at::Tensor& t, const double r[4]) {
  const double n = static_cast<double>(t.numel());
  DeviceSummary s{r[0], r[1], r[2] / n, r[3]};
  const bool finite_data = std::isfinite(s.max) && std::isfinite(s.min);
  if (finite_data && (!std::isfinite(s.mean) || !std::isfinite(s.norm))) {
    // The accumulation overflowed, not the data: once more, scaled into range.
    const double scale = std::max(std::fabs(s.max), std::fabs(s.min));
    const at::Tensor x = reducible(t);
    const at::ScalarType acc = accumulation_type(x);
    const at::Tensor scale_t = at::scalar_tensor(scale, x.options().dtype(acc));
    auto [sum, norm] = sum_and_norm(x, acc, &scale_t);
    const at::Tensor host = at::stack({sum, norm}).cpu().to(at::kDouble);
    count_host_sync();
    const double* v = host.data_ptr<double>();
    s.mean = v[0] / n * scale;
    s.norm = v[1] * scale;
  }
  return s;
}

DeviceSummary device_summary(const at::Tensor& t) {
  // Widened on the host: the four values never become float64 on the device.
  const at::Tensor host = device_reductions(t).cpu().to(at::kDouble);
  count_host_sync();
  return finish_device_summary(t, host.data_ptr<double>());
}

namespace {
std::atomic<bool> g_force_generic{false};
}  // namespace

void force_generic_statistics(bool on) {
  g_force_generic = on;
}

bool generic_statistics_forced() {
  return g_force_generic.load(std::memory_order_relaxed);
}

}  // namespace msprobe
