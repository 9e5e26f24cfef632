#include "live/stats/tensor_stats.h"

#include "live/stats/cpu_summary.h"
#include "live/stats/device_stats.h"
#include "live/stats/nonfinite_facts.h"
#include "live/stats/pending_stats.h"
#include "live/stats/readable.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>

namespace msprobe {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kByte:
      return "torch.uint8";
    case at::kChar:
      return "torch.int8";
    case at::kShort:
      return "torch.int16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kBool:
      return "torch.bool";
    case at::kComplexHalf:
      return "torch.complex32";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    case at::kQInt8:
      return "torch.qint8";
    case at::kQUInt8:
      return "torch.quint8";
    case at::kQInt32:
      return "torch.qint32";
    case at::kQUInt4x2:
      return "torch.quint4x2";
    default:
      return "torch.unknown";
  }
}

namespace {

bool has_statistics(const at::Tensor& t) {
  if (t.layout() != at::kStrided || t.is_quantized() || t.is_meta() || t.is_complex()) {
    return false;
  }
  return t.numel() > 0;
}

}  // namespace

Entry tensor_layout_entry(const at::Tensor& t) {
  Entry e;
  if (!t.defined()) return e;
  e.kind = Entry::Kind::Object;
  e.type = "torch.Tensor";
  e.dtype = dtype_name(t.scalar_type());
  e.has_shape = true;
  e.shape.assign(t.sizes().begin(), t.sizes().end());
  e.requires_grad = Scalar::of_bool(t.requires_grad());
  return e;
}

// What the statistics of `t` are taken over, when not its own elements: the magnitudes of a
// complex tensor (NaN or inf in either part shows in them), the stored values of a sparse one.
at::Tensor statistics_source(const at::Tensor& t) {
  at::Tensor x = t.detach();
  if (x.is_sparse()) x = x.coalesce().values();
  if (x.is_complex()) x = at::abs(x);
  return x;
}

Entry tensor_stats_entry(const at::Tensor& t, PendingStats* pending) {
  Entry e = tensor_layout_entry(t);
  if (!t.defined()) return e;
  if ((t.is_complex() || t.is_sparse()) && !t.is_meta() && !t.is_quantized()) {
    const Entry inner = tensor_stats_entry(statistics_source(t));
    e.max = inner.max;
    e.min = inner.min;
    e.mean = inner.mean;
    e.norm = inner.norm;
    e.finite = inner.finite;
    e.nonfinite = inner.nonfinite;
    return e;
  }
  if (!has_statistics(t)) {
    e.max = e.min = e.mean = e.norm = Scalar::null();
    return e;
  }
  if (t.scalar_type() == at::kBool) {
    if (const auto any_all = cpu_any_all(t)) {
      e.max = Scalar::of_bool(any_all->first);
      e.min = Scalar::of_bool(any_all->second);
      e.mean = e.norm = Scalar::null();
      return e;
    }
    const at::Tensor x = t.detach();
    const at::Tensor packed = at::stack({x.any(), x.all()}).cpu();
    if (!x.is_cpu()) count_host_sync();
    e.max = Scalar::of_bool(packed[0].item<bool>());
    e.min = Scalar::of_bool(packed[1].item<bool>());
    e.mean = e.norm = Scalar::null();
    return e;
  }
  // Never dereferenced where there is nothing to read: tensor_entry turns this into null
  // statistics and the warning's reason.
  if (std::string why = unreadable_reason(t); !why.empty()) throw std::runtime_error(why);
  Summary s;
  if (!cpu_fast_path(t, s)) {
    if (pending) {
      e.pending_stats = pending->add(t);
      return e;
    }
    const DeviceSummary d = device_summary(t);
    s = {d.max, d.min, d.mean, d.norm};
  }
  set_statistics(e, s.max, s.min, s.mean, s.norm, nonfinite_facts(t, s.max, s.min));
  return e;
}

}  // namespace msprobe
