#include "live/monitor/monitor_alerting.h"

#include <filesystem>

#include "core/monitor_events.h"
#include "live/log/tool_log.h"

namespace msprobe {

MonitorAlerting::MonitorAlerting(const MonitorConfig& config, std::string output_root,
                                 double headroom, std::shared_ptr<MonitorHookRows> hook_rows)
    : ops_(config.output.ops),
      dump_(config.alerts.dump),
      output_root_(std::move(output_root)),
      hook_rows_(std::move(hook_rows)),
      anomalies_(config.alerts.rules, headroom > 0 ? headroom : 0.5),
      dump_step_on_(config.alerts.dump_step_on) {}

std::string MonitorAlerting::begin(int rank) {
  rank_ = rank < 0 ? 0 : rank;
  MonitorAnomalies::Place at;
  at.rank = rank_;
  at.group_mates = {rank_};
  anomalies_.set_place(std::move(at));
  if (!on() || !dump_) return "";
  folder_ = (std::filesystem::path(output_root_) / "anomaly_detected" /
             ("rank" + std::to_string(rank_)))
                .string();
  return folder_;
}

void MonitorAlerting::place(int pp_stage, std::vector<int> group_mates,
                            std::map<std::string, std::string> module_classes) {
  MonitorAnomalies::Place at;
  at.rank = rank_;
  at.pp_stage = pp_stage;
  at.group_mates = std::move(group_mates);
  anomalies_.set_place(std::move(at));
  module_classes_ = std::move(module_classes);
}


MonitorRowOrigin MonitorAlerting::origin_of(const std::string& prefix,
                                           const std::string& tag) const {
  // "0:fc1.input_1:0" (a module's slot) or "0:fc1.weight" (a parameter).
  const size_t colon = tag.find(':');
  std::string name = tag.substr(colon + 1);
  const bool module_row = prefix == "actv" || prefix == "actv_grad";
  if (module_row) name = name.substr(0, name.rfind(':'));
  const size_t dot = name.rfind('.');
  MonitorRowOrigin o;
  o.module = dot == std::string::npos ? "" : name.substr(0, dot);
  const std::string module_tag = tag.substr(0, colon + 1) + o.module;
  auto cls = module_classes_.find(module_tag);
  const std::string call_base =
      "Module." + (o.module.empty() ? std::string() : o.module + ".") +
      (cls == module_classes_.end() ? std::string("Module") : cls->second);
  if (module_row) {
    o.call = call_base + (prefix == "actv" ? ".forward" : ".backward");
  } else {
    o.call = call_base + ".parameters." + name.substr(dot == std::string::npos ? 0 : dot + 1);
  }
  o.source = hook_rows_->source_of(module_tag);
  return o;
}

void MonitorAlerting::scan(const std::string& prefix, const MonitorRowTable& table,
                           int64_t step) {
  const std::string rank = "/rank" + std::to_string(rank_) + "/";
  const std::string family = monitor_family_tag(prefix);
  const std::vector<MonitorRow> rows = table.rows(step);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string& tag = table.tag(i);
    anomalies_.scan(rows[i], tag + rank + family, ops_, hook_rows_->call_id(tag + "/" + family),
                    origin_of(prefix, tag));
  }
}

void MonitorAlerting::scan_collectives(const std::vector<MonitorCallSlot>& slots, int64_t step) {
  for (const MonitorCallSlot& slot : slots) {
    MonitorRow row;
    row.step = step;
    row.values = slot.values;
    MonitorRowOrigin origin;
    origin.call = "Distributed." + slot.collective;  // the guard's name of the call
    anomalies_.scan(row, slot.collective + "/rank" + std::to_string(rank_) + "/" + slot.slot, ops_,
                    -1, origin);
  }
}

std::vector<std::pair<std::string, std::string>> MonitorAlerting::step_written() {
  for (std::string& line : anomalies_.take_lines()) {
    // msprobe's line: "Rule <rule> reports anomaly signal in ('<tag>', '<op>') at step ...".
    const size_t from = line.find("('"), to = line.find("', '");
    const std::string tag =
        from != std::string::npos && to > from ? line.substr(from + 2, to - from - 2) : "";
    for (const std::string& fragment : dump_step_on_) {
      if (dump_reason_.empty() && tag.find(fragment) != std::string::npos) dump_reason_ = line;
    }
    say(LogLevel::Info, std::move(line));
  }
  if (folder_.empty() || !anomalies_.fresh()) return {};
  return {{folder_ + "/anomaly.json", anomalies_.anomaly_json()},
          {folder_ + "/anomaly_context.json", anomalies_.context_json()}};
}

}  // namespace msprobe
