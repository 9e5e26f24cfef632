#include "live/monitor/monitor_stats.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <string>
#include <tuple>

#include "core/python_text.h"
#include "live/stats/cpu_summary.h"
#include "live/stats/device_stats.h"

namespace msprobe {
namespace {

// A 0-d tensor's item(), as the Python value pandas receives: an int stays an int.
MonitorValue item_of(const at::Tensor& t) {
  const at::Scalar s = t.item();
  if (s.isIntegral(/*includeBool=*/true)) return MonitorValue::of_integer(s.toLong());
  return MonitorValue::of_real(s.toDouble());
}

std::string shape_text(const at::Tensor& x) {
  return python_int_list(x.sizes().data(), x.sizes().size());
}

// "torch.float32": str() of a torch dtype.
std::string dtype_text(const at::Tensor& x) {
  std::string name = c10::toString(x.scalar_type());  // "Float"
  static const std::pair<const char*, const char*> kNames[] = {
      {"Float", "float32"},   {"Double", "float64"}, {"Half", "float16"},  {"BFloat16", "bfloat16"},
      {"Long", "int64"},      {"Int", "int32"},      {"Short", "int16"},   {"Char", "int8"},
      {"Byte", "uint8"},      {"Bool", "bool"},      {"ComplexFloat", "complex64"},
      {"ComplexDouble", "complex128"}};
  for (const auto& [aten, python] : kNames) {
    if (name == aten) return std::string("torch.") + python;
  }
  return "torch." + name;
}

// What several ops share, made once per tensor: its float64 copy (norm, mean) and its min and
// max from one pass (aminmax gives the same values as min and max).
class SharedWork {
 public:
  explicit SharedWork(const at::Tensor& x) : x_(x) {}
  const at::Tensor& as_double() {
    if (!double_.defined()) double_ = x_.to(at::kDouble);
    return double_;
  }
  MonitorValue min_or_max(bool max) {
    if (!min_.defined() && x_.is_floating_point() && x_.numel() > 0) {
      try {
        std::tie(min_, max_) = at::aminmax(x_);
      } catch (const c10::Error&) {  // a dtype aminmax lacks: each on its own below
      }
    }
    if (!min_.defined()) {
      // An empty tensor's min raises: nan, as msprobe's (monitor_values).
      min_ = at::min(x_);
      max_ = at::max(x_);
    }
    return item_of(max ? max_ : min_);
  }

 private:
  const at::Tensor& x_;
  at::Tensor double_, min_, max_;
};

MonitorValue op_value(const at::Tensor& x, MonitorOp op, double eps, SharedWork& shared) {
  switch (op) {
    case MonitorOp::Min: return shared.min_or_max(false);
    case MonitorOp::Max: return shared.min_or_max(true);
    case MonitorOp::Norm:
      return item_of(x.is_floating_point()
                         ? at::linalg_vector_norm(x, 2, c10::nullopt, false, at::kDouble)
                         : at::norm(shared.as_double(), 2));
    case MonitorOp::Mean:
      return item_of(x.is_floating_point() ? at::mean(x, at::kDouble)
                                           : at::mean(shared.as_double()));
    case MonitorOp::Zeros:
      if (x.numel() == 0) return MonitorValue::of_real(std::nan(""));
      // int64 count / int: true division gives the default float dtype, float32.
      return item_of(at::div(at::sum(at::abs(x) < eps), x.numel()).to(at::kFloat));
    case MonitorOp::Nans: return item_of(at::isnan(x).sum());
    case MonitorOp::Id: return x.dim() == 0 ? item_of(x) : MonitorValue::missing();
    case MonitorOp::Shape: return MonitorValue::of_text(shape_text(x));
    case MonitorOp::Dtype: return MonitorValue::of_text(dtype_text(x));
  }
  return MonitorValue::missing();
}

// A one-pass read's sums; an integer tensor's min and max exactly too.
struct OnePassSums : WideSums {
  int64_t int_min = 0, int_max = 0;
};

// A value of the tensor's own kind: an integer tensor's is an int, as item() gives it.
template <typename T>
MonitorValue extreme(double as_real, int64_t as_integer) {
  if constexpr (std::is_integral_v<T>) {
    return MonitorValue::of_integer(as_integer);
  } else {
    return MonitorValue::of_real(as_real);
  }
}

template <typename T>
OnePassSums integer_sums(const at::Tensor& x) {
  const T* data = x.data_ptr<T>();
  OnePassSums m{};
  m.int_min = m.int_max = static_cast<int64_t>(data[0]);
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    const auto v = static_cast<int64_t>(data[i]);
    m.int_min = std::min(m.int_min, v);
    m.int_max = std::max(m.int_max, v);
    const auto d = static_cast<double>(v);
    m.sum += d;
    m.sumsq += d * d;
  }
  m.min = static_cast<double>(m.int_min);
  m.max = static_cast<double>(m.int_max);
  return m;
}

// The rarer ops' counts, each a read of its own when asked.
template <typename T, typename Test>
int64_t count_where(const T* data, int64_t n, Test test) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += test(static_cast<double>(data[i])) ? 1 : 0;
  return count;
}

// msprobe's zeros, |x| < eps, with torch's abs: an integer's in its own type, so that the most
// negative one stays negative (abs of int8 -128 is -128, a "zero").
template <typename T>
int64_t count_zeros(const T* data, int64_t n, double eps) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return count_where(data, n, [eps](double v) {
      const auto x = static_cast<T>(v);
      const auto magnitude = x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
      return static_cast<double>(magnitude) < eps;
    });
  } else {
    return count_where(data, n, [eps](double v) { return std::fabs(v) < eps; });
  }
}

// A dense CPU tensor's ops from one read of its elements: each op's own ATen call (a dispatch, an
// item(), and for norm and mean a float64 reduction of their own) cost more than the read, on a
// small tensor by the calls, on a large one by the reads. min, max, nans and zeros are exact in
// any order. norm and mean from the read's float64 sums (another order than torch's: they may
// differ from msprobe's in the last bits, 1e-13 tested), or with exact_sums torch's own.
//
// An integer tensor (ids, positions) is read the same way: its min and max exact as integers,
// as torch's item() gives them, its sums widened to float64 (exact while they stay below 2^53,
// then in another order than torch's float64 copy, as for floats).
template <typename T>
std::vector<MonitorValue> one_pass(const at::Tensor& x, const OnePassSums& m,
                                   const MonitorMetrics& metrics) {
  const std::vector<MonitorOp>& ops = metrics.ops;
  const double eps = metrics.eps;
  const T* data = x.data_ptr<T>();
  const int64_t n = x.numel();
  const bool has_nan = std::isnan(m.sumsq);
  const double nan = std::nan("");
  SharedWork shared(x);  // exact_sums: torch's own float64 reductions
  std::vector<MonitorValue> out;
  out.reserve(ops.size());
  for (MonitorOp op : ops) {
    switch (op) {
      case MonitorOp::Min: out.push_back(extreme<T>(has_nan ? nan : m.min, m.int_min)); break;
      case MonitorOp::Max: out.push_back(extreme<T>(has_nan ? nan : m.max, m.int_max)); break;
      case MonitorOp::Norm:
        out.push_back(metrics.exact_sums ? op_value(x, op, eps, shared)
                                         : MonitorValue::of_real(std::sqrt(m.sumsq)));
        break;
      case MonitorOp::Mean:
        out.push_back(metrics.exact_sums ? op_value(x, op, eps, shared)
                                         : MonitorValue::of_real(m.sum / static_cast<double>(n)));
        break;
      case MonitorOp::Zeros: {  // float32, as torch divides an int64 count by an int
        const int64_t zeros = count_zeros(data, n, eps);
        out.push_back(MonitorValue::of_real(static_cast<float>(zeros) / static_cast<float>(n)));
        break;
      }
      case MonitorOp::Nans:
        out.push_back(MonitorValue::of_integer(
            has_nan ? count_where(data, n, [](double v) { return std::isnan(v); }) : 0));
        break;
      case MonitorOp::Id:
        out.push_back(x.dim() == 0 ? extreme<T>(static_cast<double>(data[0]),
                                                static_cast<int64_t>(data[0]))
                                   : MonitorValue::missing());
        break;
      case MonitorOp::Shape: out.push_back(MonitorValue::of_text(shape_text(x))); break;
      case MonitorOp::Dtype: out.push_back(MonitorValue::of_text(dtype_text(x))); break;
    }
  }
  return out;
}

// The one read where it applies: a dense, contiguous CPU tensor of a floating or integer dtype
// (not bool: its min is a bool).
bool one_pass_applies(const at::Tensor& x) {
  // A tensor subclass (DTensor) or a fake one has no data of its own to read.
  return x.device().is_cpu() && x.layout() == at::kStrided && x.is_contiguous() &&
         !x.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python) &&
         x.has_storage() && x.storage().data() != nullptr && x.numel() > 0 && !x.is_conj() &&
         !x.is_neg();
}

std::optional<std::vector<MonitorValue>> one_pass_values(const at::Tensor& x,
                                                         const MonitorMetrics& metrics) {
  const auto floating = [&](auto tag) -> std::optional<std::vector<MonitorValue>> {
    using T = decltype(tag);
    const std::optional<WideSums> sums = cpu_wide_sums(x);
    if (!sums) return std::nullopt;
    OnePassSums m{};
    static_cast<WideSums&>(m) = *sums;
    return one_pass<T>(x, m, metrics);
  };
  const auto integral = [&](auto tag) -> std::optional<std::vector<MonitorValue>> {
    using T = decltype(tag);
    if (generic_statistics_forced()) return std::nullopt;  // the other devices' path, tested
    return one_pass<T>(x, integer_sums<T>(x), metrics);
  };
  switch (x.scalar_type()) {
    case at::kFloat: return floating(float{});
    case at::kDouble: return floating(double{});
    case at::kHalf: return floating(at::Half{});
    case at::kBFloat16: return floating(at::BFloat16{});
    case at::kLong: return integral(int64_t{});
    case at::kInt: return integral(int32_t{});
    case at::kShort: return integral(int16_t{});
    case at::kChar: return integral(int8_t{});
    case at::kByte: return integral(uint8_t{});
    default: return std::nullopt;
  }
}

}  // namespace

MonitorMetrics monitor_metrics(const MonitorConfig& config) {
  constexpr int kMostDigitsOfTheOnePass = 12;
  return {config.output.ops, config.output.eps,
          !config.alerts.rules.empty() || config.output.ndigits > kMostDigitsOfTheOnePass};
}

std::vector<MonitorValue> monitor_values(const at::Tensor& x, const MonitorMetrics& metrics) {
  const at::NoGradGuard no_grad;  // msprobe's ops run under torch.no_grad()
  const std::vector<MonitorOp>& ops = metrics.ops;
  if (one_pass_applies(x)) {
    if (std::optional<std::vector<MonitorValue>> values = one_pass_values(x, metrics)) {
      return std::move(*values);
    }
  }
  std::vector<MonitorValue> out;
  out.reserve(ops.size());
  SharedWork shared(x);
  for (MonitorOp op : ops) {
    try {
      out.push_back(op_value(x, op, metrics.eps, shared));
    } catch (const c10::Error&) {
      out.push_back(MonitorValue::of_real(std::nan("")));  // msprobe's torch.tensor(nan)
    }
  }
  return out;
}

std::string monitor_dtype_text(const at::Tensor& x) {
  return dtype_text(x);
}

}  // namespace msprobe
