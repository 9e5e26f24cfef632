// The reading direction of a MemberField table (core/fact_fields.h): a JSON object that a
// renderer wrote (overflow_report.json) back into its struct, by the same keys.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/fact_fields.h"

namespace msprobe {

namespace member_fields {
// A value of another JSON type than the member's is left as it was: a reader of a report takes
// what it can (the check goes on without the rest).
inline void assign(bool& to, const nlohmann::json& v) {
  if (v.is_boolean()) to = v.get<bool>();
}
inline void assign(int& to, const nlohmann::json& v) {
  if (v.is_number_integer()) to = v.get<int>();
}
inline void assign(int64_t& to, const nlohmann::json& v) {
  if (v.is_number_integer()) to = v.get<int64_t>();
}
inline void assign(double& to, const nlohmann::json& v) {
  if (v.is_number()) to = v.get<double>();
}
inline void assign(std::optional<double>& to, const nlohmann::json& v) {
  if (v.is_number()) to = v.get<double>();
}
inline void assign(std::string& to, const nlohmann::json& v) {
  if (v.is_string()) to = v.get<std::string>();
}
}  // namespace member_fields

// Members whose key is absent or null keep their defaults.
template <typename T>
T read_json(const std::vector<MemberField<T>>& table, const nlohmann::json& object) {
  T out{};
  if (!object.is_object()) return out;
  for (const MemberField<T>& f : table) {
    const auto it = object.find(f.key);
    if (it == object.end() || it->is_null()) continue;
    std::visit([&](auto member) { member_fields::assign(out.*member, *it); }, f.member);
  }
  return out;
}

}  // namespace msprobe
