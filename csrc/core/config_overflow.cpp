// The overflow_check section of config.json (docs/config.md): its keys, each with its reader in
// one table (kOverflowKeys), and the section's parse. Declared in core/config_checks.h.
#include "core/config.h"
#include "core/config_checks.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

namespace msprobe {
namespace {

using nlohmann::json;
using namespace config_checks;
namespace fs = std::filesystem;

constexpr EnumName<Action> kActions[] = {{"raise", Action::Raise}, {"continue", Action::Continue}};
constexpr EnumName<SyncMode> kSyncModes[] = {
    {"auto", SyncMode::Auto}, {"call", SyncMode::Call}, {"batch", SyncMode::Batch}};
constexpr EnumName<Origin> kOrigins[] = {{"op", Origin::Op},
                                         {"input", Origin::Input},
                                         {"parameter", Origin::Parameter},
                                         {"peer", Origin::Peer}};
constexpr EnumName<Severity> kSeverities[] = {
    {"critical", Severity::Critical}, {"high", Severity::High}, {"medium", Severity::Medium}};

int64_t parse_overflow_nums(const json& value, const Loc& at) {
  auto number = as_int64(value);
  if (!number || (*number != -1 && *number < 1)) fail(at, "-1 or an integer >= 1", value);
  return *number;
}

double parse_threshold(const json& value, const Loc& at) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
    fail(at, "a finite number > 0", value);
  }
  return value.get<double>();
}

std::vector<std::string> parse_rules(const json& value, const Loc& at,
                                     const std::string& base_dir) {
  std::vector<std::string> rules = parse_string_list(value, at);
  if (base_dir.empty()) return rules;
  for (auto& rule : rules) {
    if (fs::path(rule).is_relative())
      rule = (fs::path(base_dir) / rule).lexically_normal().string();
  }
  return rules;
}

std::vector<Origin> parse_stop_on(const json& value, const Loc& at) {
  const std::string allowed = "a list of origins (" + enum_names(kOrigins) + ")";
  if (!value.is_array()) fail(at, allowed, value);
  std::vector<Origin> out;
  for (size_t i = 0; i < value.size(); ++i) {
    const Origin o = parse_enum(value[i], at.item(i), kOrigins);
    if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
  }
  return out;
}

double parse_min_loss_scale(const json& value, const Loc& at) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
    fail(at, "a finite number >= 0", value);
  }
  return value.get<double>();
}

double parse_headroom(const json& value, const Loc& at) {
  if (!value.is_number() || !(value.get<double>() >= 0.0 && value.get<double>() < 1.0)) {
    fail(at, "a number from 0 (off) up to, not including, 1", value);
  }
  return value.get<double>();
}

int64_t parse_sync_batch_calls(const json& value, const Loc& at) {
  auto number = as_int64(value);
  if (!number || *number < 1 || *number > 1000000) fail(at, "an integer from 1 to 1000000", value);
  return *number;
}

// The overflow_check section's keys, each with its reader: the one list that the section's key
// check allows, PrecisionDebugger's keywords name, and parse_overflow() reads. `base_dir`: the
// config file's folder for a value from the file ("" for a keyword's: the working directory).
struct OverflowKey {
  const char* key;
  void (*read)(const json& v, const Loc& at, const std::string& base_dir, OverflowSection& out);
};
const OverflowKey kOverflowKeys[] = {
    {"overflow_nums",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.overflow_nums = parse_overflow_nums(v, at);
     }},
    {"action",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.action = parse_enum(v, at, kActions);
     }},
    {"stop_level",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.stop_level = parse_enum(v, at, kSeverities);
     }},
    {"stop_on",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.stop_on = parse_stop_on(v, at);
     }},
    {"mutation_threshold",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.mutation_threshold = parse_threshold(v, at);
     }},
    {"rules",
     [](const json& v, const Loc& at, const std::string& base_dir, OverflowSection& out) {
       out.rules = parse_rules(v, at, base_dir);
     }},
    {"compat",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.compat = parse_bool(v, at);
     }},
    {"dump_skipped_steps",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.dump_skipped_steps = parse_bool(v, at);
     }},
    {"min_loss_scale",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.min_loss_scale = parse_min_loss_scale(v, at);
     }},
    {"sync",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.sync = parse_enum(v, at, kSyncModes);
     }},
    {"sync_batch_calls",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.sync_batch_calls = parse_sync_batch_calls(v, at);
     }},
    {"replay",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.replay = parse_bool(v, at);
     }},
    {"headroom",
     [](const json& v, const Loc& at, const std::string&, OverflowSection& out) {
       out.headroom = parse_headroom(v, at);
     }},
};

}  // namespace

std::vector<std::string> overflow_key_names() {
  std::vector<std::string> names;
  for (const OverflowKey& k : kOverflowKeys) names.push_back(k.key);
  return names;
}

OverflowSection parse_overflow(const json* section, const Loc& at, const json& overrides,
                               const std::string& base_dir) {
  ErrorList errors;
  if (section) {
    require_object(*section, at);
    errors.attempt([&] { check_keys(*section, at, overflow_key_names(), {"check_mode"}); });
  }
  struct Value {
    const json* value;
    Loc at;
    bool from_file;
  };
  auto get = [&](const std::string& key) -> std::optional<Value> {
    if (const json* v = overrides.is_object() ? find(overrides, key) : nullptr; v && !v->is_null())
      return Value{v, Loc(std::string(kDebugger) + "(" + key + "=...)"), false};
    if (const json* v = section ? find(*section, key) : nullptr)
      return Value{v, at.child(key), true};
    return std::nullopt;
  };

  OverflowSection out;
  // Each key on its own, so that every bad one is told.
  for (const OverflowKey& k : kOverflowKeys) {
    errors.attempt([&] {
      if (auto v = get(k.key)) k.read(*v->value, v->at, v->from_file ? base_dir : "", out);
    });
  }
  if (const json* v = section ? find(*section, "check_mode") : nullptr) {
    if (!v->is_string()) errors.attempt([&] { fail(at.child("check_mode"), "a string", *v); });
  }
  errors.throw_if_any();
  return out;
}

const char* to_string(Origin o) {
  return name_of(kOrigins, o);
}

bool OverflowSection::stops_on(Origin o) const {
  return std::find(stop_on.begin(), stop_on.end(), o) != stop_on.end();
}

const char* to_string(Severity s) {
  return name_of(kSeverities, s);
}

}  // namespace msprobe
