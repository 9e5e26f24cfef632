#include "core/task_sections.h"

#include <cmath>

#include "core/python_text.h"

namespace msprobe {
namespace {

using nlohmann::json;
using namespace config_checks;

constexpr EnumName<GradLevel> kGradLevels[] = {
    {"L0", GradLevel::L0}, {"L1", GradLevel::L1}, {"L2", GradLevel::L2}};

// msprobe's BaseConfig reads these of every section; grad_probe uses none of them.
const std::vector<std::string> kBaseConfigKeys = {
    "scope",         "list",       "data_mode",   "file_format",  "summary_mode",
    "overflow_nums", "check_mode", "fuzz_device", "pert_mode",    "handler_type",
    "fuzz_level",    "fuzz_stage", "if_preheat",  "preheat_step", "max_sample"};

// An int64 or a float within int64's range (msprobe's check_bounds), with its Python text.
GradBound parse_bound(const json& value, const Loc& at) {
  const char* allowed = "a number from -2**63 to 2**63-1";
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX))
      fail(at, allowed, value);
    const int64_t v = value.get<int64_t>();
    return {static_cast<double>(v), std::to_string(v)};
  }
  if (!value.is_number_float()) fail(at, allowed, value);
  const double v = value.get<double>();
  // 2**63 is the first double past the range. -2**63 is in it, but a JSON integer below int64
  // (-2**63-1, which msprobe refuses) arrives as that same double: a float bound of exactly
  // -2**63 is refused with it.
  if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0)) fail(at, allowed, value);
  return {v, python_float(v)};
}

std::vector<GradBound> parse_bounds(const json& value, const Loc& at) {
  if (!value.is_array()) fail(at, "a list of numbers in ascending order", value);
  std::vector<GradBound> out;
  for (size_t i = 0; i < value.size(); ++i) {
    GradBound b = parse_bound(value[i], at.item(i));
    if (!out.empty() && !(out.back().value < b.value))
      fail(at.item(i), "a number above the one before it (bounds ascend)", value[i]);
    out.push_back(std::move(b));
  }
  return out;
}

constexpr EnumName<PertMode> kPertModes[] = {{"improve_precision", PertMode::ImprovePrecision},
                                             {"add_noise", PertMode::AddNoise},
                                             {"bit_noise", PertMode::BitNoise},
                                             {"change_value", PertMode::ChangeValue},
                                             {"no_change", PertMode::NoChange},
                                             {"to_cpu", PertMode::ToCpu}};
constexpr EnumName<HandlerType> kHandlers[] = {{"check", HandlerType::Check},
                                               {"fix", HandlerType::Fix}};
constexpr EnumName<FuzzStage> kStages[] = {{"forward", FuzzStage::Forward},
                                           {"backward", FuzzStage::Backward}};
constexpr EnumName<bool> kFuzzDevices[] = {{"npu", false}, {"cpu", true}};
constexpr EnumName<int> kFuzzLevels[] = {{"L1", 1}};

int64_t parse_positive(const json& value, const Loc& at) {
  auto number = as_int64(value);
  if (!number || *number <= 0 || value.is_boolean()) fail(at, "an integer > 0", value);
  return *number;
}

// msprobe's scope: a name, or a list of names.
std::vector<std::string> parse_scope_names(const json& value, const Loc& at) {
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) fail(at, "a call name or a list of call names", value);
  return parse_string_list(value, at);
}

// The combinations msprobe refuses, each told against the key that makes it wrong.
void check_free_benchmark_combinations(const FreeBenchmarkSection& s, const json& section,
                                       const Loc& at) {
  const bool to_cpu = s.pert_mode == PertMode::ToCpu;
  if (s.fuzz_on_cpu != to_cpu) {
    fail(at.child("fuzz_device"),
         to_cpu ? "\"cpu\" with pert_mode to_cpu"
                : "\"npu\" (\"cpu\" goes with pert_mode to_cpu only)",
         section.value("fuzz_device", json("npu")));
  }
  if (s.handler == HandlerType::Fix) {
    if (s.preheat) fail(at.child("if_preheat"), "false with handler_type fix (no preheat)", true);
    if (s.stage != FuzzStage::Forward)
      fail(at.child("fuzz_stage"), "\"forward\" with handler_type fix", "backward");
    if (s.pert_mode != PertMode::ImprovePrecision && !to_cpu)
      fail(at.child("pert_mode"), "improve_precision or to_cpu with handler_type fix",
           to_string(s.pert_mode));
  }
  if (!s.scope.empty() && !s.list.empty())
    fail(at.child("list"), "[] when scope is given (msprobe takes one or the other)",
         section.at("list"));
}

}  // namespace

FreeBenchmarkSection parse_free_benchmark(const json* section, const Loc& at) {
  FreeBenchmarkSection out;
  if (!section) return out;
  if (!section->is_object()) fail(at, "an object", *section);
  ErrorList errors;
  errors.attempt([&] {
    check_keys(*section, at,
               {"pert_mode", "fuzz_device", "handler_type", "fuzz_level", "fuzz_stage",
                "if_preheat", "preheat_step", "max_sample", "scope", "list"},
               {"data_mode", "file_format", "summary_mode", "overflow_nums", "check_mode"});
  });
  auto read = [&](const char* key, auto&& parse) {
    errors.attempt([&] {
      if (const json* v = find(*section, key)) parse(*v, at.child(key));
    });
  };
  read("pert_mode",
       [&](const json& v, const Loc& w) { out.pert_mode = parse_enum(v, w, kPertModes); });
  read("fuzz_device",
       [&](const json& v, const Loc& w) { out.fuzz_on_cpu = parse_enum(v, w, kFuzzDevices); });
  read("handler_type",
       [&](const json& v, const Loc& w) { out.handler = parse_enum(v, w, kHandlers); });
  read("fuzz_stage", [&](const json& v, const Loc& w) { out.stage = parse_enum(v, w, kStages); });
  read("fuzz_level", [&](const json& v, const Loc& w) { parse_enum(v, w, kFuzzLevels); });
  read("if_preheat", [&](const json& v, const Loc& w) { out.preheat = parse_bool(v, w); });
  read("scope", [&](const json& v, const Loc& w) { out.scope = parse_scope_names(v, w); });
  read("list", [&](const json& v, const Loc& w) { out.list = parse_string_list(v, w); });
  errors.throw_if_any();
  // msprobe checks these only when preheat is on.
  if (out.preheat) {
    read("preheat_step",
         [&](const json& v, const Loc& w) { out.preheat_step = parse_positive(v, w); });
    read("max_sample", [&](const json& v, const Loc& w) { out.max_sample = parse_positive(v, w); });
  }
  errors.attempt([&] { check_free_benchmark_combinations(out, *section, at); });
  errors.throw_if_any();
  return out;
}

GradProbeSection parse_grad_probe(const json* section, const Loc& at) {
  GradProbeSection out;
  if (!section) return out;
  if (!section->is_object()) fail(at, "an object", *section);
  ErrorList errors;
  errors.attempt([&] {
    check_keys(*section, at, {"grad_level", "param_list", "bounds"}, kBaseConfigKeys);
  });
  errors.attempt([&] {
    if (const json* v = find(*section, "grad_level"))
      out.level = parse_enum(*v, at.child("grad_level"), kGradLevels);
  });
  errors.attempt([&] {
    if (const json* v = find(*section, "param_list"))
      out.param_list = parse_string_list(*v, at.child("param_list"));
  });
  errors.attempt([&] {
    if (const json* v = find(*section, "bounds")) out.bounds = parse_bounds(*v, at.child("bounds"));
  });
  errors.throw_if_any();
  return out;
}

}  // namespace msprobe
