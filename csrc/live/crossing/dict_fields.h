// The Python side of a member table (core/fact_fields.h): a dict that Python hands over (a
// replay's verdict, a peer's published stop) read into its struct, and a struct handed to Python
// as a dict, by the table's keys. No type has a hand-written reader or dict of its own. GIL
// required (the caller holds it: bound functions and the guard's crossings).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <type_traits>
#include <vector>

#include "core/fact_fields.h"

namespace msprobe {

// Members whose key is absent or None keep their defaults; a value of another type raises
// pybind11's cast_error (the caller's crossing says what it does with it).
template <typename T>
T read_dict(const std::vector<MemberField<T>>& table, const pybind11::handle& dict) {
  T out{};
  for (const MemberField<T>& f : table) {
    if (!pybind11::bool_(dict.attr("__contains__")(f.key))) continue;
    const pybind11::object value = dict[pybind11::str(f.key)];
    if (value.is_none()) continue;
    std::visit(
        [&](auto member) {
          using Value = std::remove_reference_t<decltype(out.*member)>;
          out.*member = value.cast<Value>();
        },
        f.member);
  }
  return out;
}

template <typename T>
pybind11::dict to_dict(const std::vector<MemberField<T>>& table, const T& value) {
  pybind11::dict out;
  for (const MemberField<T>& f : table) {
    std::visit([&](auto member) { out[pybind11::str(f.key)] = pybind11::cast(value.*member); },
               f.member);
  }
  return out;
}

// (key, attribute) of each field: Python builds the dict it hands over from its objects'
// attributes by these.
template <typename T>
std::vector<std::pair<std::string, std::string>> keys_of(const std::vector<MemberField<T>>& table) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const MemberField<T>& f : table) out.emplace_back(f.key, f.attr ? f.attr : "");
  return out;
}

}  // namespace msprobe
