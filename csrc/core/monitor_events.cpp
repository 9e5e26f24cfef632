#include "core/monitor_events.h"

#include <cmath>

#include "core/tensorboard_events.h"

namespace msprobe {

std::string monitor_family_tag(const std::string& prefix) {
  if (prefix == "grad_unreduced") return "acc_grad";
  if (prefix == "grad_reduced") return "post_grad";
  return prefix;
}

std::string monitor_event_records(const MonitorRowTable& table, const std::string& tag_tail,
                                  const std::vector<MonitorOp>& ops, int64_t step,
                                  double wall_time) {
  std::string out;
  const std::vector<MonitorRow> rows = table.rows(step);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t k = 0; k < ops.size() && k < rows[i].values.size(); ++k) {
      const MonitorValue& v = rows[i].values[k];
      if (v.kind == MonitorValue::Kind::Text) continue;  // shape, dtype
      const double value = v.kind == MonitorValue::Kind::Integer ? static_cast<double>(v.integer)
                           : v.kind == MonitorValue::Kind::Real  ? v.real
                                                                 : std::nan("");
      out += tensorboard_scalar_record(
          table.tag(i) + tag_tail + "_" + monitor_op_name(ops[k]), static_cast<float>(value),
          step, wall_time);
    }
  }
  return out;
}

}  // namespace msprobe
