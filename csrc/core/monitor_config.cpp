#include "core/monitor_config.h"

#include <regex>

#include "core/config_checks.h"
#include "core/monitor_append.h"

namespace msprobe {

using config_checks::ErrorList;
using config_checks::fail;
using config_checks::Loc;
using nlohmann::json;

namespace {

constexpr config_checks::EnumName<MonitorOp> kOps[] = {
    {"norm", MonitorOp::Norm}, {"min", MonitorOp::Min},     {"max", MonitorOp::Max},
    {"zeros", MonitorOp::Zeros}, {"nans", MonitorOp::Nans}, {"id", MonitorOp::Id},
    {"mean", MonitorOp::Mean}, {"shape", MonitorOp::Shape}, {"dtype", MonitorOp::Dtype},
};

constexpr config_checks::EnumName<MonitorOutput::Format> kFormats[] = {
    {"csv", MonitorOutput::Format::Csv},
    {"tensorboard", MonitorOutput::Format::TensorBoard},
};

constexpr config_checks::EnumName<MonitorAlertRule::Kind> kRules[] = {
    {"AnomalyTurbulence", MonitorAlertRule::Kind::Turbulence},
    {"AnomalyNan", MonitorAlertRule::Kind::Nan},
};

int64_t parse_int_in(const json& v, const Loc& at, int64_t low, int64_t high,
                     const std::string& allowed) {
  const std::optional<int64_t> n = config_checks::as_int64(v);
  if (!n || *n < low || *n > high) fail(at, allowed, v);
  return *n;
}

double parse_number(const json& v, const Loc& at, const std::string& allowed) {
  if (!v.is_number() || v.get<double>() < 0) fail(at, allowed, v);
  return v.get<double>();
}

std::vector<std::string> parse_targets(const json& v, const Loc& at) {
  // msprobe reads the keys alone (1.1.1's {"input": ..., "output": ...} values are let be).
  if (!v.is_object()) fail(at, "an object of module names (msprobe's targets)", v);
  std::vector<std::string> names;
  for (const auto& entry : v.items()) {
    if (!entry.value().is_object()) fail(at.child(entry.key()), "an object", entry.value());
    names.push_back(entry.key());
  }
  return names;
}

std::vector<MonitorOp> parse_ops(const json& v, const Loc& at) {
  if (!v.is_array()) fail(at, "a list of " + config_checks::enum_names(kOps), v);
  std::vector<MonitorOp> ops;
  for (size_t i = 0; i < v.size(); ++i) {
    ops.push_back(config_checks::parse_enum(v[i], at.item(i), kOps));
  }
  // msprobe's columns: the ops in the order given (norm when none is), then shape and dtype
  // where they are not named.
  if (ops.empty()) ops.push_back(MonitorOp::Norm);
  for (MonitorOp always : {MonitorOp::Shape, MonitorOp::Dtype}) {
    if (std::find(ops.begin(), ops.end(), always) == ops.end()) ops.push_back(always);
  }
  return ops;
}

std::vector<int64_t> parse_ranks(const json& v, const Loc& at) {
  if (!v.is_array()) fail(at, "a list of ranks (integers >= 0)", v);
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < v.size(); ++i) {
    ranks.push_back(parse_int_in(v[i], at.item(i), 0, INT32_MAX, "a rank (an integer >= 0)"));
  }
  return ranks;
}

MonitorAlertRule parse_rule(const json& v, const Loc& at) {
  config_checks::require_object(v, at);
  config_checks::check_keys(v, at, {"rule_name", "args"});
  const json* name = config_checks::find(v, "rule_name");
  if (!name) config_checks::fail_missing(at.child("rule_name"), config_checks::enum_names(kRules));
  MonitorAlertRule rule;
  rule.kind = config_checks::parse_enum(*name, at.child("rule_name"), kRules);
  if (const json* args = config_checks::find(v, "args")) {
    config_checks::require_object(*args, at.child("args"));
    config_checks::check_keys(*args, at.child("args"), {"threshold"});
    if (const json* t = config_checks::find(*args, "threshold")) {
      rule.threshold = parse_number(*t, at.child("args").child("threshold"), "a number >= 0");
    }
  }
  return rule;
}

void parse_alert(const json& v, const Loc& at, MonitorConfig& out) {
  config_checks::require_object(v, at);
  config_checks::check_keys(v, at, {"rules", "dump", "dump_step_on"});
  const json* rules = config_checks::find(v, "rules");
  if (!rules) config_checks::fail_missing(at.child("rules"), "a list of rules");
  if (!rules->is_array()) fail(at.child("rules"), "a list of rules", *rules);
  for (size_t i = 0; i < rules->size(); ++i) {
    out.alerts.rules.push_back(parse_rule((*rules)[i], at.child("rules").item(i)));
  }
  if (const json* dump = config_checks::find(v, "dump")) {
    out.alerts.dump = config_checks::parse_bool(*dump, at.child("dump"));
  }
  if (const json* on = config_checks::find(v, "dump_step_on")) {
    out.alerts.dump_step_on = config_checks::parse_string_list(*on, at.child("dump_step_on"));
  }
}

void parse_cc(const json& v, const Loc& at, MonitorConfig& out) {
  config_checks::require_object(v, at);
  config_checks::check_keys(v, at, {"enable", "cc_pre_hook", "cc_log_only", "cc_codeline"});
  MonitorCollectivesConfig& cc = out.collectives;
  const std::pair<const char*, bool*> flags[] = {
      {"enable", &cc.enable}, {"cc_pre_hook", &cc.pre_hook}, {"cc_log_only", &cc.log_only}};
  for (const auto& [key, flag] : flags) {
    if (const json* b = config_checks::find(v, key)) {
      *flag = config_checks::parse_bool(*b, at.child(key));
    }
  }
  if (const json* lines = config_checks::find(v, "cc_codeline")) {
    const Loc where = at.child("cc_codeline");
    cc.codeline = config_checks::parse_string_list(*lines, where);
    for (const std::string& pattern : cc.codeline) {
      try {
        std::regex compiled(pattern);
      } catch (const std::regex_error&) {
        fail(where, "regular expressions", pattern);
      }
    }
  }
}

// A key that needs what cannot run here: accepted at its "off" value only.
void refuse_unless_off(const json& v, const Loc& at, const std::string& why) {
  const bool off = v.is_boolean() ? !v.get<bool>() : v.empty();
  if (!off) fail(at, "its off value (" + why + ")", v);
}

using Reader = void (*)(const json&, const Loc&, MonitorConfig&);
struct MonitorKey {
  const char* key;
  Reader read;
};

#define MONITOR_BOOL(part, name)                           \
  {#name, [](const json& v, const Loc& at, MonitorConfig& c) { \
     c.part.name = config_checks::parse_bool(v, at);           \
   }}

const MonitorKey kMonitorKeys[] = {
    {"targets", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.targets = parse_targets(v, at);
     }},
    MONITOR_BOOL(families, all_xy),
    MONITOR_BOOL(families, xy_distribution),
    MONITOR_BOOL(families, forward_only),
    MONITOR_BOOL(families, backward_only),
    MONITOR_BOOL(families, wg_distribution),
    MONITOR_BOOL(families, mv_distribution),
    MONITOR_BOOL(families, ur_distribution),
    MONITOR_BOOL(families, param_distribution),
    MONITOR_BOOL(families, mg_direction),
    {"cc_distribution", &parse_cc},
    {"ops", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.output.ops = parse_ops(v, at);
     }},
    {"eps", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.output.eps = parse_number(v, at, "a number >= 0");
     }},
    {"ndigits", [](const json& v, const Loc& at, MonitorConfig& c) {
       // msprobe keeps its default for 0.
       const int64_t n = parse_int_in(v, at, 0, 20, "an integer from 1 to 20");
       if (n > 0) c.output.ndigits = static_cast<int>(n);
     }},
    {"start_step", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.schedule.start_step = parse_int_in(v, at, 0, INT64_MAX, "an integer >= 0");
     }},
    {"step_interval", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.schedule.step_interval = parse_int_in(v, at, 1, INT64_MAX, "an integer >= 1");
     }},
    {"collect_times", [](const json& v, const Loc& at, MonitorConfig& c) {
       // msprobe stops after one written step when it is 0.
       const int64_t n = parse_int_in(v, at, 0, INT64_MAX, "an integer >= 0");
       c.schedule.collect_times = std::max<int64_t>(1, n);
     }},
    {"module_ranks", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.output.module_ranks = parse_ranks(v, at);
     }},
    {"format", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.output.format = config_checks::parse_enum(v, at, kFormats);
     }},
    {"alert", &parse_alert},
    MONITOR_BOOL(output, squash_name),
    MONITOR_BOOL(output, print_struct),
    {"step_count_per_record", [](const json& v, const Loc& at, MonitorConfig& c) {
       c.schedule.step_count_per_record =
           parse_int_in(v, at, 1, 999999, "an integer from 1 to 999999");
     }},
    MONITOR_BOOL(schedule, dynamic_on),
    MONITOR_BOOL(families, monitor_mbs_grad),
    MONITOR_BOOL(output, stack_info),
    {"append_output", [](const json& v, const Loc& at, MonitorConfig& c) {
       const std::string allowed = "[] or two time tags of run folders, the first no later "
                                   "(\"Dec03_21-34-40\")";
       if (!v.is_array() || (!v.empty() && v.size() != 2)) fail(at, allowed, v);
       if (v.empty()) return;
       for (const json& tag : v) {
         if (!tag.is_string() || !monitor_time_order(tag.get<std::string>())) fail(at, allowed, v);
       }
       if (*monitor_time_order(v[0].get<std::string>()) >
           *monitor_time_order(v[1].get<std::string>())) {
         fail(at, allowed, v);
       }
       c.output.append_output = {v[0].get<std::string>(), v[1].get<std::string>()};
     }},
    {"recording_l2_features", [](const json& v, const Loc& at, MonitorConfig&) {
       if (!v.is_boolean()) fail(at, "true or false", v);
       refuse_unless_off(v, at, "its hooks are Megatron's attention and MoE layers");
     }},
    {"l2_targets", [](const json& v, const Loc& at, MonitorConfig&) {
       if (!v.is_object()) fail(at, "an object", v);
       refuse_unless_off(v, at, "its hooks are Megatron's attention and MoE layers");
     }},
    {"sa_order", [](const json& v, const Loc& at, MonitorConfig&) {
       if (v != "s,b,h,d" && v != "b,s,h,d") fail(at, "\"s,b,h,d\" or \"b,s,h,d\"", v);
     }},
};

#undef MONITOR_BOOL

}  // namespace

const char* monitor_op_name(MonitorOp op) {
  return config_checks::name_of(kOps, op);
}

std::vector<std::string> monitor_key_names() {
  std::vector<std::string> names;
  for (const MonitorKey& k : kMonitorKeys) names.emplace_back(k.key);
  return names;
}

MonitorConfig parse_monitor_config(const json& doc, const std::string& source) {
  const Loc top(source);
  config_checks::require_object(doc, top);
  MonitorConfig config;
  config.source = source;
  ErrorList errors;
  errors.attempt([&] { config_checks::check_keys(doc, top, monitor_key_names()); });
  for (const MonitorKey& k : kMonitorKeys) {
    if (const json* v = config_checks::find(doc, k.key)) {
      errors.attempt([&] { k.read(*v, top.child(k.key), config); });
    }
  }
  errors.throw_if_any();
  if (config.targets.empty() && config.families.xy_distribution) config.families.all_xy = true;
  if (config.families.ur_distribution && config.output.format == MonitorOutput::Format::Csv) {
    config.families.ur_distribution = false;
    config.notes.push_back(
        "ur_distribution is not supported in CSV format, cancel ur_distribution");
  }
  if (config.families.forward_only && config.families.backward_only) {
    config.notes.push_back("not enable backward_only and forward_only simultaneously");
  }
  return config;
}

}  // namespace msprobe
