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
  // 2**63 is the first double past the range; -2**63 is in it.
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) fail(at, allowed, value);
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

}  // namespace

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
