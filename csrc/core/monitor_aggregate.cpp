#include "core/monitor_aggregate.h"

#include <cmath>

namespace msprobe {
namespace {

double real_of(const MonitorValue& v) {
  switch (v.kind) {
    case MonitorValue::Kind::Integer: return static_cast<double>(v.integer);
    case MonitorValue::Kind::Real: return v.real;
    default: return std::nan("");
  }
}

// Python's min() and max(): the first value, replaced by each later one that compares before
// it (a nan compares before nothing, and nothing compares before a nan).
MonitorValue pick(const std::vector<MonitorValue>& values, bool max) {
  MonitorValue best = values.front();
  for (size_t i = 1; i < values.size(); ++i) {
    const double v = real_of(values[i]), b = real_of(best);
    if (max ? v > b : v < b) best = values[i];
  }
  return best;
}

MonitorValue sum(const std::vector<MonitorValue>& values) {
  bool integers = true;
  int64_t whole = 0;
  double real = 0;
  for (const MonitorValue& v : values) {
    integers = integers && v.kind == MonitorValue::Kind::Integer;
    whole += v.integer;
    real += real_of(v);
  }
  return integers ? MonitorValue::of_integer(whole) : MonitorValue::of_real(real);
}

}  // namespace

MonitorValue monitor_aggregate(MonitorOp op, const std::vector<MonitorValue>& values) {
  if (values.empty()) return MonitorValue::of_real(std::nan(""));
  const double n = static_cast<double>(values.size());
  switch (op) {
    case MonitorOp::Min: return pick(values, false);
    case MonitorOp::Max: return pick(values, true);
    case MonitorOp::Norm:
    case MonitorOp::Nans: return sum(values);
    case MonitorOp::Mean: return MonitorValue::of_real(real_of(sum(values)) / n);
    case MonitorOp::Zeros: {
      float share = 0;  // float32 tensors, added and divided in float32
      for (const MonitorValue& v : values) share += static_cast<float>(real_of(v));
      return MonitorValue::of_real(share / static_cast<float>(values.size()));
    }
    default: return MonitorValue::of_real(std::nan(""));
  }
}

}  // namespace msprobe
