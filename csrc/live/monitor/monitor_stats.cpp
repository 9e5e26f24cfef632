#include "live/monitor/monitor_stats.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <string>
#include <tuple>

#include "core/python_text.h"

namespace msprobe {
namespace {

// A 0-d tensor's item(), as the Python value pandas receives: an int stays an int.
MonitorValue item_of(const at::Tensor& t) {
  const at::Scalar s = t.item();
  if (s.isIntegral(/*includeBool=*/true)) return MonitorValue::of_integer(s.toLong());
  return MonitorValue::of_real(s.toDouble());
}

std::string shape_text(const at::Tensor& x) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  return python_int_list(sizes);
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
    case MonitorOp::Norm: return item_of(at::norm(shared.as_double(), 2));
    case MonitorOp::Mean: return item_of(at::mean(shared.as_double()));
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

}  // namespace

std::vector<MonitorValue> monitor_values(const at::Tensor& x, const std::vector<MonitorOp>& ops,
                                         double eps) {
  std::vector<MonitorValue> out;
  out.reserve(ops.size());
  const at::NoGradGuard no_grad;  // msprobe's ops run under torch.no_grad()
  SharedWork shared(x);
  for (MonitorOp op : ops) {
    try {
      out.push_back(op_value(x, op, eps, shared));
    } catch (const c10::Error&) {
      out.push_back(MonitorValue::of_real(std::nan("")));  // msprobe's torch.tensor(nan)
    }
  }
  return out;
}

}  // namespace msprobe
