#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "live/stats/device_stats.h"
#include "live/stats/nonfinite_facts.h"
#include "live/stats/scan_vectors.h"

namespace msprobe {

namespace {

constexpr double kNoFinite = std::numeric_limits<double>::quiet_NaN();
constexpr double kPosInf = std::numeric_limits<double>::infinity();

// One branch-free pass: counts of NaN, +inf and -inf, and the extremes of the finite elements
// (a mask's tensor is half -inf: branches on the value would mispredict at every element).
// Inlined, so that the AVX-512 clone's tail is its own code (cpu_summary.cpp's fold: an
// out-of-line call into the default instruction set paid the AVX-to-SSE transition).
template <typename T>
__attribute__((always_inline)) inline NonFiniteFacts scan_nonfinite_scalar(const T* p, int64_t n) {
  int64_t nan = 0, posinf = 0, neginf = 0;
  double hi = -kPosInf, lo = kPosInf;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    const bool is_nan = v != v, is_pos = v == kPosInf, is_neg = v == -kPosInf;
    nan += is_nan;
    posinf += is_pos;
    neginf += is_neg;
    const bool finite = !(is_nan || is_pos || is_neg);
    hi = finite && v > hi ? v : hi;
    lo = finite && v < lo ? v : lo;
  }
  NonFiniteFacts f{kNoFinite, kNoFinite, {nan, posinf, neginf}};
  if (nan + posinf + neginf < n) f.max_except = hi, f.min_except = lo;
  return f;
}

// float32 eight at a time: comparisons give -1 lanes, subtracted into 32-bit counters that are
// emptied into 64-bit ones before they could overflow.
MSPROBE_SCAN_CLONES NonFiniteFacts scan_nonfinite_f32(const float* p, int64_t n) {
  const float finf = std::numeric_limits<float>::infinity();
  const v8f pinf = {finf, finf, finf, finf, finf, finf, finf, finf};
  v8f hi = -pinf, lo = pinf;
  int64_t total[3] = {0, 0, 0};
  int64_t i = 0;
  constexpr int64_t kFlush = int64_t{1} << 30;  // elements per lane before 32 bits could overflow
  while (i + 8 <= n) {
    v8i cnan = {}, cpos = {}, cneg = {};
    const int64_t end = std::min(n - 7, i + 8 * kFlush);
    for (; i < end; i += 8) {
      v8f f;
      std::memcpy(&f, p + i, sizeof(f));
      const v8i is_nan = f != f, is_pos = f == pinf, is_neg = f == -pinf;
      cnan -= is_nan;
      cpos -= is_pos;
      cneg -= is_neg;
      const v8i finite = ~(is_nan | is_pos | is_neg);
      hi = (finite & (f > hi)) ? f : hi;
      lo = (finite & (f < lo)) ? f : lo;
    }
    for (int k = 0; k < 8; ++k) total[0] += cnan[k], total[1] += cpos[k], total[2] += cneg[k];
  }
  NonFiniteFacts f = scan_nonfinite_scalar(p + i, n - i);
  f.counts = {total[0] + f.counts.nan, total[1] + f.counts.posinf, total[2] + f.counts.neginf};
  double vhi = f.max_except, vlo = f.min_except;  // the tail's (NaN when it had none)
  for (int k = 0; k < 8; ++k) {
    if (hi[k] != -finf || lo[k] != finf) {  // this lane saw a finite element
      vhi = std::isnan(vhi) ? hi[k] : std::max<double>(vhi, hi[k]);
      vlo = std::isnan(vlo) ? lo[k] : std::min<double>(vlo, lo[k]);
    }
  }
  f.max_except = vhi;
  f.min_except = vlo;
  return f;
}

// Half and bfloat16 are widened to float a block at a time, like the statistics scan.
template <typename T>
NonFiniteFacts scan_nonfinite_narrow(const T* p, int64_t n) {
  constexpr int64_t kBlock = 1024;
  float buf[kBlock];
  NonFiniteFacts all{kNoFinite, kNoFinite, {0, 0, 0}};
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t len = std::min(kBlock, n - start);
    for (int64_t i = 0; i < len; ++i) buf[i] = static_cast<float>(p[start + i]);
    const NonFiniteFacts b = scan_nonfinite_f32(buf, len);
    all.counts.nan += b.counts.nan;
    all.counts.posinf += b.counts.posinf;
    all.counts.neginf += b.counts.neginf;
    if (!std::isnan(b.max_except)) {
      all.max_except =
          std::isnan(all.max_except) ? b.max_except : std::max(all.max_except, b.max_except);
      all.min_except =
          std::isnan(all.min_except) ? b.min_except : std::min(all.min_except, b.min_except);
    }
  }
  return all;
}

bool cpu_nonfinite(const at::Tensor& t, NonFiniteFacts& out) {
  if (t.device().type() != at::kCPU || t.layout() != at::kStrided) return false;
  const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  switch (c.scalar_type()) {
    case at::kFloat:
      out = scan_nonfinite_f32(c.data_ptr<float>(), c.numel());
      return true;
    case at::kDouble:
      out = scan_nonfinite_scalar(c.data_ptr<double>(), c.numel());
      return true;
    case at::kHalf:
      out = scan_nonfinite_narrow(c.data_ptr<at::Half>(), c.numel());
      return true;
    case at::kBFloat16:
      out = scan_nonfinite_narrow(c.data_ptr<at::BFloat16>(), c.numel());
      return true;
    default:
      return false;
  }
}

}  // namespace

NonFiniteFacts nonfinite_facts(const at::Tensor& t, double max, double min) {
  if (std::isfinite(max) && std::isfinite(min)) return {kNoFinite, kNoFinite, {}};
  NonFiniteFacts f;
  if (!generic_statistics_forced() && cpu_nonfinite(t, f)) return f;
  // Other devices: a few reductions and one sync, for anomalous tensors only.
  const at::Tensor x = t.detach();
  const at::Tensor counts =
      at::stack({at::isnan(x).sum(), at::isposinf(x).sum(), at::isneginf(x).sum()}).cpu();
  if (!x.is_cpu()) count_host_sync();
  const int64_t* c = counts.data_ptr<int64_t>();
  f = {kNoFinite, kNoFinite, {c[0], c[1], c[2]}};
  const at::Tensor finite = x.masked_select(at::isfinite(x));
  if (finite.numel() == 0) return f;
  auto [fmax, fmin] = max_and_min(finite);  // the tensor's own dtype, widened on the host
  const at::Tensor packed = at::stack({fmax, fmin}).cpu().to(at::kDouble);
  if (!x.is_cpu()) count_host_sync();
  f.max_except = packed[0].item<double>();
  f.min_except = packed[1].item<double>();
  return f;
}

void set_statistics(Entry& e, double max, double min, double mean, double norm,
                    const NonFiniteFacts& facts) {
  e.max = Scalar::of_float(max);
  e.min = Scalar::of_float(min);
  e.mean = Scalar::of_float(mean);
  e.norm = Scalar::of_float(norm);
  e.pending_stats = -1;
  if (!std::isfinite(max)) e.finite.max = Scalar::of_float(facts.max_except);
  if (!std::isfinite(min)) e.finite.min = Scalar::of_float(facts.min_except);
  e.nonfinite = facts.counts;
}

}  // namespace msprobe
