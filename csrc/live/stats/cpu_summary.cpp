#include "live/stats/cpu_summary.h"

#include "live/stats/device_stats.h"
#include "live/stats/scan_vectors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace msprobe {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Moments {
  double max = -std::numeric_limits<double>::infinity();
  double min = std::numeric_limits<double>::infinity();
  double sum = 0.0;
  double sumsq = 0.0;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// Lanes of partial results, folded into one Moments.
template <int N>
struct Lanes {
  double sum[N], sumsq[N], max[N], min[N];
};

// Inlined into each scan, so that it is compiled for the scan's own instruction set: called from
// an AVX-512 clone, an out-of-line copy in the default set's SSE cost more than a small
// tensor's whole scan (perf: 85 % of its samples on its first load).
template <int N>
__attribute__((always_inline)) inline Moments fold(const Lanes<N>& l) {
  Moments m;
  for (int k = 0; k < N; ++k) {
    m.sum += l.sum[k];
    m.sumsq += l.sumsq[k];
    m.max = std::max(m.max, l.max[k]);
    m.min = std::min(m.min, l.min[k]);
  }
  return m;
}

// The scalar tail, in float64 like the vectors.
template <typename T>
__attribute__((always_inline)) inline void scan_tail(const T* p, int64_t i, int64_t n, Moments& m) {
  for (; i < n; ++i) {
    const double v = p[i];
    m.sum += v;
    m.sumsq += v * v;
    m.max = v > m.max ? v : m.max;
    m.min = v < m.min ? v : m.min;
  }
}

// float32 in float64, sixteen elements at a time: the careful scan, for a block whose squares
// overflow float32 (see scan_floats).
__attribute__((always_inline)) inline void scan_floats_wide(const float* p, int64_t n, v4d* s,
                                                            v4d* q) {
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    for (int a = 0; a < 2; ++a) {
      v8f f;
      std::memcpy(&f, p + i + 8 * a, sizeof(f));
      const v4d d0 = __builtin_convertvector(__builtin_shufflevector(f, f, 0, 1, 2, 3), v4d);
      const v4d d1 = __builtin_convertvector(__builtin_shufflevector(f, f, 4, 5, 6, 7), v4d);
      s[2 * a] += d0;
      s[2 * a + 1] += d1;
      q[2 * a] += d0 * d0;
      q[2 * a + 1] += d1 * d1;
    }
  }
}

// float32, sixteen elements at a time, at the read rate of torch.sum: Max and Min in float32
// (exact), sums of values and squares in float32 over a block of 256 elements (16 per lane:
// relative error within 1e-6 of the block's magnitude, below what msprobe's float32 torch.sum
// gives), each block's partial sums then added in float64 (no drift over many blocks, as a
// float32 running sum would have). A block whose float32 squares overflow (values beyond 1.8e19,
// or NaN/inf) is summed again in float64, so finite data keeps finite sums. Branch-free within a
// block: NaN fails the min/max comparisons and shows up in the sum instead, which summarize()
// checks. 256-bit vectors: AVX2 keeps them in registers; AVX-512 and SSE handle them as well.
// Vectors go through references: by value they would change calling convention between clones.
// U vectors a step; FmaSum: the running sum as f * 1 + sum, which puts it on the FMA units
// beside the squares and leaves the add units to Max and Min (a third faster where they are
// separate ports, as on AMD's Zen); the 1 is hidden from the optimizer, which would fold it back.
template <int U, bool FmaSum>
__attribute__((always_inline)) inline Moments scan_floats(const float* p, int64_t n) {
  constexpr int64_t kStep = 8 * U;
  constexpr int64_t kBlock = 1024;  // a multiple of kStep
  const v4d zero = {0, 0, 0, 0};
  v4d s[4] = {zero, zero, zero, zero}, q[4] = {zero, zero, zero, zero};
  const float finf = std::numeric_limits<float>::infinity();
  const v8f fzero = {0, 0, 0, 0, 0, 0, 0, 0};
  v8f hi[U], lo[U];
  for (int a = 0; a < U; ++a) {
    for (int k = 0; k < 8; ++k) hi[a][k] = -finf, lo[a][k] = finf;
  }
  v8f one = {1, 1, 1, 1, 1, 1, 1, 1};
  if (FmaSum) asm("" : "+x"(one));
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    v8f bs[U], bq[U];
    for (int a = 0; a < U; ++a) bs[a] = bq[a] = fzero;
    for (int64_t j = i; j < i + kBlock; j += kStep) {
      for (int a = 0; a < U; ++a) {
        v8f f;
        std::memcpy(&f, p + j + 8 * a, sizeof(f));
        hi[a] = f > hi[a] ? f : hi[a];
        lo[a] = f < lo[a] ? f : lo[a];
        bs[a] += FmaSum ? f * one : f;
        bq[a] += f * f;
      }
    }
    v8f sum = bs[0], sq = bq[0];
    for (int a = 1; a < U; ++a) sum += bs[a], sq += bq[a];
    bool overflow = false;
    for (int k = 0; k < 8; ++k) overflow |= !(sq[k] < finf);
    if (overflow) {
      scan_floats_wide(p + i, kBlock, s, q);
      continue;
    }
    s[0] += __builtin_convertvector(__builtin_shufflevector(sum, sum, 0, 1, 2, 3), v4d);
    s[1] += __builtin_convertvector(__builtin_shufflevector(sum, sum, 4, 5, 6, 7), v4d);
    q[0] += __builtin_convertvector(__builtin_shufflevector(sq, sq, 0, 1, 2, 3), v4d);
    q[1] += __builtin_convertvector(__builtin_shufflevector(sq, sq, 4, 5, 6, 7), v4d);
  }
  const int64_t wide_end = i + (n - i) / 16 * 16;
  scan_floats_wide(p + i, wide_end - i, s, q);
  for (int64_t j = i; j < wide_end; j += 8) {
    v8f f;
    std::memcpy(&f, p + j, sizeof(f));
    hi[0] = f > hi[0] ? f : hi[0];
    lo[0] = f < lo[0] ? f : lo[0];
  }
  i = wide_end;
  for (int a = 1; a < U; ++a) {
    hi[0] = hi[a] > hi[0] ? hi[a] : hi[0];
    lo[0] = lo[a] < lo[0] ? lo[a] : lo[0];
  }
  Lanes<8> l;
  for (int k = 0; k < 4; ++k) {
    l.sum[k] = s[0][k] + s[2][k], l.sum[k + 4] = s[1][k] + s[3][k];
    l.sumsq[k] = q[0][k] + q[2][k], l.sumsq[k + 4] = q[1][k] + q[3][k];
  }
  for (int k = 0; k < 8; ++k) l.max[k] = hi[0][k], l.min[k] = lo[0][k];
  Moments m = fold(l);
  scan_tail(p, i, n, m);
  return m;
}

__attribute__((always_inline)) inline Moments scan_doubles(const double* p, int64_t n) {
  const v4d zero = {0, 0, 0, 0};
  v4d s[2] = {zero, zero}, q[2] = {zero, zero}, hi[2], lo[2];
  for (int a = 0; a < 2; ++a) {
    for (int k = 0; k < 4; ++k) hi[a][k] = -kInf, lo[a][k] = kInf;
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int a = 0; a < 2; ++a) {
      v4d d;
      std::memcpy(&d, p + i + 4 * a, sizeof(d));
      s[a] += d;
      q[a] += d * d;
      hi[a] = d > hi[a] ? d : hi[a];
      lo[a] = d < lo[a] ? d : lo[a];
    }
  }
  Lanes<8> l;
  for (int k = 0; k < 4; ++k) {
    for (int a = 0; a < 2; ++a) {
      l.sum[4 * a + k] = s[a][k], l.sumsq[4 * a + k] = q[a][k];
      l.max[4 * a + k] = hi[a][k], l.min[4 * a + k] = lo[a][k];
    }
  }
  Moments m = fold(l);
  scan_tail(p, i, n, m);
  return m;
}

#if defined(__x86_64__) && defined(__GNUC__)
// AVX-512 has 32 vector registers: four vectors a step keep every add's latency covered, where
// AVX2's sixteen would spill them, so the unrolling is picked per CPU, not cloned.
__attribute__((target("arch=x86-64-v4"))) Moments scan_f32_avx512(const float* p, int64_t n) {
  return scan_floats<4, true>(p, n);
}
__attribute__((target("arch=x86-64-v3"))) Moments scan_f32_avx2(const float* p, int64_t n) {
  return scan_floats<2, true>(p, n);
}
Moments scan_f32_portable(const float* p, int64_t n) {
  return scan_floats<2, false>(p, n);
}
using ScanF32 = Moments (*)(const float*, int64_t);
ScanF32 pick_scan_f32() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
    return scan_f32_avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return scan_f32_avx2;
  return scan_f32_portable;
}
Moments scan_f32(const float* p, int64_t n) {
  static const ScanF32 scan = pick_scan_f32();
  return scan(p, n);
}
#else
Moments scan_f32(const float* p, int64_t n) {
  return scan_floats<2, false>(p, n);
}
#endif
MSPROBE_SCAN_CLONES Moments scan_f64(const double* p, int64_t n) {
  return scan_doubles(p, n);
}

// float32 with each element widened to float64 before it is added, sixteen lanes of each (the
// compiler keeps them in vector registers): the training monitor's norm and mean are msprobe's
// float64 reductions, to its CSVs' digits, which scan_floats' float32 block sums are not.
MSPROBE_SCAN_CLONES Moments scan_f32_wide(const float* p, int64_t n) {
  constexpr int kLanes = 16;
  Lanes<kLanes> l;
  for (int k = 0; k < kLanes; ++k) l.sum[k] = l.sumsq[k] = 0.0, l.max[k] = -kInf, l.min[k] = kInf;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const double v = p[i + k];
      l.sum[k] += v;
      l.sumsq[k] += v * v;  // exact: a float's square fits a double
      l.max[k] = v > l.max[k] ? v : l.max[k];
      l.min[k] = v < l.min[k] ? v : l.min[k];
    }
  }
  Moments m = fold(l);
  scan_tail(p, i, n, m);
  return m;
}

// Half and bfloat16 are widened to float a block at a time and scanned like float (ScanFloats).
template <typename T, Moments (*ScanFloats)(const float*, int64_t) = scan_f32>
Moments scan_narrow(const T* p, int64_t n) {
  constexpr int64_t kBlock = 1024;
  float buf[kBlock];
  Moments m;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t len = std::min(kBlock, n - start);
    for (int64_t i = 0; i < len; ++i) buf[i] = static_cast<float>(p[start + i]);
    const Moments b = ScanFloats(buf, len);
    m.sum += b.sum;
    m.sumsq += b.sumsq;
    m.max = std::max(m.max, b.max);
    m.min = std::min(m.min, b.min);
  }
  return m;
}

// Integer data: exact in double up to 2^53, and rare enough not to need vectors.
template <typename T>
Moments scan_int(const T* p, int64_t n) {
  Moments m;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    m.sum += v;
    m.sumsq += v * v;
    m.max = std::max(m.max, v);
    m.min = std::min(m.min, v);
  }
  return m;
}

Moments scan(const float* p, int64_t n) {
  return scan_f32(p, n);
}
Moments scan(const double* p, int64_t n) {
  return scan_f64(p, n);
}
Moments scan(const at::Half* p, int64_t n) {
  return scan_narrow(p, n);
}
Moments scan(const at::BFloat16* p, int64_t n) {
  return scan_narrow(p, n);
}
template <typename T>
Moments scan(const T* p, int64_t n) {
  return scan_int(p, n);
}

template <typename T>
Summary summarize(const T* p, int64_t n, Moments m) {
  const bool has_nan = std::isnan(m.sum) && !(std::isinf(m.max) && std::isinf(m.min));
  bool any_nan = has_nan;
  if (std::isnan(m.sum) && !has_nan) {
    // +inf and -inf together also make the sum NaN: look for a real NaN.
    for (int64_t i = 0; i < n && !any_nan; ++i) any_nan = std::isnan(static_cast<double>(p[i]));
  }
  if (any_nan) return {kNaN, kNaN, kNaN, kNaN};
  const bool all_finite = std::isfinite(m.max) && std::isfinite(m.min);
  if (all_finite && (!std::isfinite(m.sum) || !std::isfinite(m.sumsq))) {
    // Only float64 data near its limit gets here: rescale by the largest magnitude.
    const double scale = std::max(std::fabs(m.max), std::fabs(m.min));
    double s = 0.0, q = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(p[i]) / scale;
      s += v;
      q += v * v;
    }
    return {m.max, m.min, s / static_cast<double>(n) * scale, std::sqrt(q) * scale};
  }
  return {m.max, m.min, m.sum / static_cast<double>(n), std::sqrt(m.sumsq)};
}

// The elements of `t` in memory order, where they fill one block without gaps: a contiguous
// tensor, and a permuted one (a transposed attention score, a channels-last activation) whose
// elements are the same block in another order. Max, min and the sums need no order, and a copy
// would cost more than the scan.
template <typename T>
const T* dense_block(const at::Tensor& t) {
  if (!t.is_contiguous() && !t.is_non_overlapping_and_dense()) return nullptr;
  return static_cast<const T*>(t.data_ptr());
}

// A strided tensor whose last dimension is contiguous (a slice of the last dimension, a narrowed
// batch), scanned row by row. Nothing where a row is too short to be worth it, or where the rows'
// sums are not finite: summarize() then needs the elements in one block for its second look.
template <typename T>
std::optional<Moments> scan_rows(const at::Tensor& t) {
  constexpr int64_t kMinRow = 16;
  const int64_t dims = t.dim();
  if (dims < 2 || t.stride(dims - 1) != 1 || t.size(dims - 1) < kMinRow) return std::nullopt;
  const int64_t row = t.size(dims - 1);
  const T* base = static_cast<const T*>(t.data_ptr());
  at::DimVector index(static_cast<size_t>(dims - 1), 0);  // inline: no allocation per tensor
  Moments m;
  for (int64_t r = 0, rows = t.numel() / row; r < rows; ++r) {
    int64_t offset = 0;
    for (int64_t d = 0; d < dims - 1; ++d) offset += index[static_cast<size_t>(d)] * t.stride(d);
    const Moments b = scan(base + offset, row);
    m.sum += b.sum;
    m.sumsq += b.sumsq;
    m.max = std::max(m.max, b.max);
    m.min = std::min(m.min, b.min);
    for (int64_t d = dims - 2; d >= 0; --d) {  // the next row's index, last dimension first
      if (++index[static_cast<size_t>(d)] < t.size(d)) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
  if (!std::isfinite(m.sum) || !std::isfinite(m.sumsq)) return std::nullopt;
  return m;
}

template <typename T>
Summary cpu_summary(const at::Tensor& t) {
  const int64_t n = t.numel();
  if (const T* p = dense_block<T>(t)) return summarize(p, n, scan(p, n));
  if (std::optional<Moments> m = scan_rows<T>(t)) {
    return {m->max, m->min, m->sum / static_cast<double>(n), std::sqrt(m->sumsq)};
  }
  const at::Tensor c = t.contiguous();
  const T* p = c.data_ptr<T>();
  return summarize(p, n, scan(p, n));
}

// cpu_wide_sums of a tensor of T, scanned by Scan, where its elements fill one block.
template <typename T, Moments (*Scan)(const T*, int64_t)>
std::optional<WideSums> wide_sums_of(const at::Tensor& t) {
  const T* p = dense_block<T>(t);
  if (!p) return std::nullopt;
  const Moments m = Scan(p, t.numel());
  return WideSums{m.max, m.min, m.sum, m.sumsq};
}

}  // namespace

bool cpu_fast_path(const at::Tensor& t, Summary& out) {
  if (generic_statistics_forced()) return false;
  if (t.device().type() != at::kCPU || t.layout() != at::kStrided) return false;
  switch (t.scalar_type()) {
    case at::kFloat:
      out = cpu_summary<float>(t);
      return true;
    case at::kHalf:
      out = cpu_summary<at::Half>(t);
      return true;
    case at::kBFloat16:
      out = cpu_summary<at::BFloat16>(t);
      return true;
    case at::kDouble:
      out = cpu_summary<double>(t);
      return true;
    case at::kLong:
      out = cpu_summary<int64_t>(t);
      return true;
    case at::kInt:
      out = cpu_summary<int32_t>(t);
      return true;
    case at::kShort:
      out = cpu_summary<int16_t>(t);
      return true;
    case at::kChar:
      out = cpu_summary<int8_t>(t);
      return true;
    case at::kByte:
      out = cpu_summary<uint8_t>(t);
      return true;
    default:
      return false;
  }
}

std::optional<WideSums> cpu_wide_sums(const at::Tensor& t) {
  if (generic_statistics_forced() || t.device().type() != at::kCPU || t.layout() != at::kStrided) {
    return std::nullopt;
  }
  switch (t.scalar_type()) {
    case at::kFloat: return wide_sums_of<float, scan_f32_wide>(t);
    case at::kDouble: return wide_sums_of<double, scan_f64>(t);
    case at::kHalf: return wide_sums_of<at::Half, scan_narrow<at::Half, scan_f32_wide>>(t);
    case at::kBFloat16:
      return wide_sums_of<at::BFloat16, scan_narrow<at::BFloat16, scan_f32_wide>>(t);
    default: return std::nullopt;
  }
}

std::optional<std::pair<bool, bool>> cpu_any_all(const at::Tensor& t) {
  if (generic_statistics_forced() || t.device().type() != at::kCPU || t.layout() != at::kStrided) {
    return std::nullopt;
  }
  const uint8_t* p = dense_block<uint8_t>(t);
  if (!p) return std::nullopt;
  bool any = false, all = true;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    any |= p[i] != 0;
    all &= p[i] != 0;
  }
  return std::make_pair(any, all);
}

}  // namespace msprobe
