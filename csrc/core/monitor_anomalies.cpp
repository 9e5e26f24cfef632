#include "core/monitor_anomalies.h"

#include <cmath>
#include <cstdlib>

#include "core/headroom.h"
#include "core/python_text.h"

namespace msprobe {
namespace {

// The value as msprobe's writer holds it: a float (nan for a missing one) or an int.
double number_of(const MonitorValue& v) {
  if (v.kind == MonitorValue::Kind::Integer) return static_cast<double>(v.integer);
  if (v.kind == MonitorValue::Kind::Real) return v.real;
  return std::nan("");
}

std::string python_number(const MonitorValue& v) {
  return v.kind == MonitorValue::Kind::Integer ? std::to_string(v.integer)
                                               : python_float(number_of(v));
}

const char* rule_name(MonitorAlertRule::Kind k) {
  return k == MonitorAlertRule::Kind::Turbulence ? "AnomalyTurbulence" : "AnomalyNan";
}

bool applies(const MonitorAlertRule& rule, double cur, double history) {
  if (rule.kind == MonitorAlertRule::Kind::Turbulence) {
    return std::fabs(cur) > history * (1 + *rule.threshold);
  }
  return std::isnan(cur) || (rule.threshold && std::fabs(cur) > *rule.threshold);
}

// The row's dtype and largest magnitude, from its dtype, min and max columns where it has them.
std::pair<std::string, double> dtype_and_magnitude(const MonitorRow& row,
                                                   const std::vector<MonitorOp>& ops) {
  std::string dtype;
  double magnitude = std::nan("");
  for (size_t i = 0; i < ops.size() && i < row.values.size(); ++i) {
    const MonitorValue& v = row.values[i];
    if (ops[i] == MonitorOp::Dtype && v.kind == MonitorValue::Kind::Text) dtype = v.text;
    if ((ops[i] == MonitorOp::Min || ops[i] == MonitorOp::Max) &&
        v.kind == MonitorValue::Kind::Real && std::isfinite(v.real)) {
      magnitude = std::isnan(magnitude) ? std::fabs(v.real)
                                        : std::fmax(magnitude, std::fabs(v.real));
    }
  }
  return {dtype, magnitude};
}

}  // namespace

MonitorAnomalies::MonitorAnomalies(std::vector<MonitorAlertRule> rules, double headroom)
    : headroom_(headroom) {
  // msprobe skips a turbulence rule without a threshold (it has no args), with a warning.
  for (MonitorAlertRule& r : rules) {
    if (r.kind == MonitorAlertRule::Kind::Nan || r.threshold) rules_.push_back(std::move(r));
  }
}

void MonitorAnomalies::scan(const MonitorRow& row, const std::string& tag,
                            const std::vector<MonitorOp>& ops, int64_t call_id,
                            const MonitorRowOrigin& origin) {
  for (size_t i = 0; i < ops.size() && i < row.values.size(); ++i) {
    if (ops[i] == MonitorOp::Shape || ops[i] == MonitorOp::Dtype) continue;
    const std::string op = monitor_op_name(ops[i]);
    const MonitorValue& value = row.values[i];
    const double cur = number_of(value);
    // An exponential mean of |value| (beta 0.99), begun at the first; the one before this value
    // is what it is judged against, so a first value never fires.
    auto [it, first] = history_.try_emplace({tag, op});
    if (first) it->second = {std::fabs(cur), value.kind == MonitorValue::Kind::Integer};
    const History before = it->second;
    it->second = {0.99 * before.mean + (1 - 0.99) * std::fabs(cur), false};
    for (const MonitorAlertRule& rule : rules_) {
      if (!applies(rule, cur, before.mean)) continue;
      // msprobe keeps a turbulence only of a norm or a mean, and tries no other rule then.
      const bool kept = rule.kind != MonitorAlertRule::Kind::Turbulence || op == "norm" ||
                        op == "mean";
      if (kept) fired({rule_name(rule.kind), tag, op, value, before, call_id}, row, ops, origin);
      break;
    }
  }
}

void MonitorAnomalies::fired(const Fired& f, const MonitorRow& row,
                             const std::vector<MonitorOp>& ops, const MonitorRowOrigin& origin) {
  const std::string mean = f.before.integer
                               ? std::to_string(static_cast<int64_t>(f.before.mean))
                               : python_float(f.before.mean);
  const std::string message = std::string("Rule ") + f.rule + " reports anomaly signal in ('" +
                              f.tag + "', '" + f.op + "') at step " + std::to_string(row.step) +
                              ", current value " + python_number(f.value) + ", history mean " +
                              mean + ".";
  const std::string key =
      f.tag + "_step_" + std::to_string(row.step) + "_call_" + std::to_string(f.call_id);
  // msprobe's vpp_stage: the int before the name's first ':', 0 without one.
  const std::string name = f.tag.substr(0, f.tag.find('/'));
  const int vpp = name.find(':') == std::string::npos ? 0 : std::atoi(name.c_str());
  anomalies_[key] = {{"rank", place_.rank},          {"step", row.step},
                     {"micro_step", 0},               {"pp_stage", place_.pp_stage},
                     {"vpp_stage", vpp},              {"call_id", f.call_id},
                     {"tag_name", f.tag},             {"message", message},
                     {"group_mates", place_.group_mates}};
  const auto [dtype, magnitude] = dtype_and_magnitude(row, ops);
  const double largest = largest_16bit(dtype);
  nlohmann::ordered_json context = {{"module", origin.module},
                                    {"call", origin.call},
                                    {"source", origin.source},
                                    {"dtype", dtype}};
  if (largest > 0 && !std::isnan(magnitude)) {
    context["range_used"] = magnitude / largest;
    context["near_limit"] = magnitude / largest >= headroom_;
  }
  lines_.push_back("> " + message + said_beyond(context));
  contexts_[key] = std::move(context);
  fresh_ = true;
}

std::string MonitorAnomalies::said_beyond(const nlohmann::ordered_json& context) const {
  std::string text = context["call"].get<std::string>();
  const std::string source = context["source"].get<std::string>();
  if (!source.empty()) text += " at " + source;
  if (context.contains("range_used")) {
    const double used = context["range_used"].get<double>();
    text += (text.empty() ? "" : "; ") + std::to_string(static_cast<int>(std::lround(used * 100))) +
            "% of " + context["dtype"].get<std::string>().substr(6) + "'s range" +
            (context["near_limit"].get<bool>() ? ", near its limit" : "");
  }
  return text.empty() ? "" : " [" + text + "]";
}

std::vector<std::string> MonitorAnomalies::take_lines() {
  std::vector<std::string> out;
  out.swap(lines_);
  return out;
}

std::string MonitorAnomalies::anomaly_json() {
  fresh_ = false;
  return anomalies_.dump(1, ' ', true);
}

std::string MonitorAnomalies::context_json() const {
  return contexts_.dump(1, ' ', true);
}

}  // namespace msprobe
