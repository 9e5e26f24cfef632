#include "torch/tensor_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace msprobe {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kQInt8: return "torch.qint8";
    case at::kQUInt8: return "torch.quint8";
    case at::kQInt32: return "torch.qint32";
    case at::kQUInt4x2: return "torch.quint4x2";
    default: return "torch.unknown";
  }
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Moments {
  double max = -std::numeric_limits<double>::infinity();
  double min = std::numeric_limits<double>::infinity();
  double sum = 0.0;
  double sumsq = 0.0;
};

// One pass, branch-free so that the compiler can keep several lanes busy: NaN is ignored by the
// min/max comparisons and shows up in the sum instead, which the caller checks.
template <typename T>
Moments scan(const T* p, int64_t n) {
  constexpr int kLanes = 8;
  double s[kLanes] = {}, q[kLanes] = {};
  double hi[kLanes], lo[kLanes];
  std::fill(hi, hi + kLanes, -std::numeric_limits<double>::infinity());
  std::fill(lo, lo + kLanes, std::numeric_limits<double>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const double v = static_cast<double>(static_cast<float>(p[i + k]));
      s[k] += v;
      q[k] += v * v;
      hi[k] = v > hi[k] ? v : hi[k];
      lo[k] = v < lo[k] ? v : lo[k];
    }
  }
  for (; i < n; ++i) {
    const double v = static_cast<double>(static_cast<float>(p[i]));
    s[0] += v;
    q[0] += v * v;
    hi[0] = v > hi[0] ? v : hi[0];
    lo[0] = v < lo[0] ? v : lo[0];
  }
  Moments m;
  for (int k = 0; k < kLanes; ++k) {
    m.sum += s[k];
    m.sumsq += q[k];
    m.max = std::max(m.max, hi[k]);
    m.min = std::min(m.min, lo[k]);
  }
  return m;
}

// float64 and integer data go through double directly (the float cast above would round them).
template <typename T>
Moments scan_wide(const T* p, int64_t n) {
  Moments m;
  double s[4] = {}, q[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double v = static_cast<double>(p[i + k]);
      s[k] += v;
      q[k] += v * v;
      m.max = v > m.max ? v : m.max;
      m.min = v < m.min ? v : m.min;
    }
  }
  for (; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    s[0] += v;
    q[0] += v * v;
    m.max = v > m.max ? v : m.max;
    m.min = v < m.min ? v : m.min;
  }
  m.sum = (s[0] + s[1]) + (s[2] + s[3]);
  m.sumsq = (q[0] + q[1]) + (q[2] + q[3]);
  return m;
}

struct Summary {
  double max, min, mean, norm;
};

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

template <typename T>
Summary cpu_summary(const at::Tensor& c, bool narrow_float) {
  const T* p = c.data_ptr<T>();
  const int64_t n = c.numel();
  return summarize(p, n, narrow_float ? scan(p, n) : scan_wide(p, n));
}

bool cpu_fast_path(const at::Tensor& t, Summary& out) {
  if (t.device().type() != at::kCPU || t.layout() != at::kStrided) return false;
  const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  switch (c.scalar_type()) {
    case at::kFloat: out = cpu_summary<float>(c, true); return true;
    case at::kHalf: out = cpu_summary<at::Half>(c, true); return true;
    case at::kBFloat16: out = cpu_summary<at::BFloat16>(c, true); return true;
    case at::kDouble: out = cpu_summary<double>(c, false); return true;
    case at::kLong: out = cpu_summary<int64_t>(c, false); return true;
    case at::kInt: out = cpu_summary<int32_t>(c, false); return true;
    case at::kShort: out = cpu_summary<int16_t>(c, false); return true;
    case at::kChar: out = cpu_summary<int8_t>(c, false); return true;
    case at::kByte: out = cpu_summary<uint8_t>(c, false); return true;
    default: return false;
  }
}

// Any device: a handful of reductions whose results are stacked and copied to the host once.
Summary device_summary(const at::Tensor& t) {
  const at::Tensor x = t.detach();
  auto minmax = at::aminmax(x);
  const at::Tensor sum = at::sum(x, at::kDouble);
  // Scaling by the largest magnitude keeps the squares finite for any finite data.
  const at::Tensor scale =
      at::maximum(std::get<0>(minmax).abs(), std::get<1>(minmax).abs()).to(at::kDouble);
  const at::Tensor safe =
      at::where(at::isfinite(scale) & (scale > 0), scale, at::ones_like(scale));
  const at::Tensor norm =
      at::linalg_vector_norm(x.to(at::kDouble) / safe, 2, c10::nullopt, false, c10::nullopt) * safe;
  const at::Tensor packed = at::stack({std::get<1>(minmax).to(at::kDouble),
                                       std::get<0>(minmax).to(at::kDouble), sum, norm})
                                .cpu();
  const double* v = packed.data_ptr<double>();
  return {v[0], v[1], v[2] / static_cast<double>(x.numel()), v[3]};
}

bool has_statistics(const at::Tensor& t) {
  if (t.layout() != at::kStrided || t.is_quantized() || t.is_meta() || t.is_complex()) {
    return false;
  }
  return t.numel() > 0;
}

}  // namespace

Entry describe_tensor(const at::Tensor& t) {
  Entry e;
  if (!t.defined()) return e;
  e.kind = Entry::Kind::Object;
  e.type = "torch.Tensor";
  e.dtype = dtype_name(t.scalar_type());
  e.has_shape = true;
  e.shape.assign(t.sizes().begin(), t.sizes().end());
  e.requires_grad = Scalar::of_bool(t.requires_grad());
  if (!has_statistics(t)) {
    e.max = e.min = e.mean = e.norm = Scalar::null();
    return e;
  }
  if (t.scalar_type() == at::kBool) {
    const at::Tensor x = t.detach();
    const at::Tensor packed = at::stack({x.any(), x.all()}).cpu();
    e.max = Scalar::of_bool(packed[0].item<bool>());
    e.min = Scalar::of_bool(packed[1].item<bool>());
    e.mean = e.norm = Scalar::null();
    return e;
  }
  Summary s;
  if (!cpu_fast_path(t, s)) s = device_summary(t);
  e.max = Scalar::of_float(s.max);
  e.min = Scalar::of_float(s.min);
  e.mean = Scalar::of_float(s.mean);
  e.norm = Scalar::of_float(s.norm);
  return e;
}

}  // namespace msprobe
