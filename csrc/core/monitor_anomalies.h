// The training monitor's alerts (issue 55): msprobe 26.2.0's rules (core/monitor/
// anomaly_processor.py; docs/monitor-reference.md §6) over every value written, and what they
// leave: the log line, and with `alert.dump` its anomaly.json, byte for byte msprobe's. Beyond
// msprobe, each alert says what the guard would say of it (anomaly_context.json beside it: the
// module, its call and the source line that called it; the dtype and how much of a 16-bit
// dtype's range the value takes), in a file of its own so that msprobe's anomaly analyser reads
// anomaly.json as it reads its own. No torch: the values come in computed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/monitor_config.h"
#include "core/monitor_csv.h"

namespace msprobe {

// What is known of a row beyond msprobe's tag: where it came from.
struct MonitorRowOrigin {
  std::string module;  // "fc1" ("" for the model itself)
  std::string call;    // "Module.fc1.Linear.forward", or the parameter "fc1.weight"
  std::string source;  // "train.py:42": the line that called the module; may be empty
};

class MonitorAnomalies {
 public:
  // Where this rank is, as msprobe's anomaly.json says it: its rank (0 when not distributed),
  // its rank in the monitor's process group (pp_stage) and that group's ranks (group_mates).
  struct Place {
    int rank = 0;
    int pp_stage = 0;
    std::vector<int> group_mates = {0};
  };
  // `headroom`: the share of a 16-bit dtype's range from which an alert says the value nears
  // the limit.
  MonitorAnomalies(std::vector<MonitorAlertRule> rules, double headroom);
  void set_place(Place place) { place_ = std::move(place); }
  bool on() const { return !rules_.empty(); }

  // One written row of family tag `family` ("actv", "acc_grad", "post_grad", ...): each value
  // but shape and dtype is scanned, in the ops' order, as msprobe's writer scans it.
  // `call_id`: the order in which its tag came in the step (-1: never).
  void scan(const MonitorRow& row, const std::string& tag, const std::vector<MonitorOp>& ops,
            int64_t call_id, const MonitorRowOrigin& origin);
  // The log lines of the alerts since the last call, msprobe's text and then ours.
  std::vector<std::string> take_lines();
  // Whether an alert fired since the last anomaly.json was taken.
  bool fresh() const { return fresh_; }
  // anomaly.json as msprobe writes it (json.dump(indent=1), no final newline): every alert so
  // far, by "<tag>_step_<s>_call_<id>".
  std::string anomaly_json();
  // anomaly_context.json: the same keys, what the guard knows of each.
  std::string context_json() const;

 private:
  struct History {
    double mean = 0;
    bool integer = false;  // the first value was an integer: msprobe prints the mean as one
  };
  struct Fired {
    const char* rule;
    const std::string& tag;
    const std::string& op;
    const MonitorValue& value;
    History before;
    int64_t call_id;
  };
  void fired(const Fired& f, const MonitorRow& row, const std::vector<MonitorOp>& ops,
             const MonitorRowOrigin& origin);
  // What the guard would add to msprobe's line: the call, its source line, the range used.
  std::string said_beyond(const nlohmann::ordered_json& context) const;

  std::vector<MonitorAlertRule> rules_;
  double headroom_;
  Place place_;
  std::map<std::pair<std::string, std::string>, History> history_;  // by (tag, op)
  nlohmann::ordered_json anomalies_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json contexts_ = nlohmann::ordered_json::object();
  std::vector<std::string> lines_;
  bool fresh_ = false;
};

}  // namespace msprobe
