// One field list per fact type (Finding, ArgFacts, ReplayFacts, OverflowFacts: their fields_of()
// in core/overflow_facts.h): each field once,
// with its key in overflow_report.json, its attribute on the Python objects (Overflow,
// OverflowError) and its line in the stop's message. The JSON writer, the Python dict
// (live/overflow/python_side.cpp) and the message read the same list, as nlohmann's
// NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE gives every conversion one declaration of the members. A
// field a renderer has no place for has no key (or no line) there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_writer.h"

namespace msprobe {

struct FactField;

// A field's value: a JSON-like tree, where a record is a fact type's own field list (each
// renderer takes its own keys of it).
struct FactValue {
  enum class Kind { Null, Bool, Int, Float, String, List, Record };
  Kind kind = Kind::Null;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0.0;
  std::string text;
  std::vector<FactValue> items;   // List
  std::vector<FactField> record;  // Record

  static FactValue of(bool b);
  static FactValue of(int i) { return of(static_cast<int64_t>(i)); }
  static FactValue of(int64_t i);
  static FactValue of(size_t i) { return of(static_cast<int64_t>(i)); }
  static FactValue of(double d);
  static FactValue of(const char* s) { return of(std::string(s)); }
  static FactValue of(std::string s);
  static FactValue of(const std::optional<std::string>& s);  // null when none
  static FactValue of(const std::optional<double>& d);
  static FactValue of(std::vector<FactField> record);
  template <typename T>
  static FactValue list(const std::vector<T>& values) {
    FactValue v;
    v.kind = Kind::List;
    for (const T& x : values) v.items.push_back(of(x));
    return v;
  }
  static FactValue list_of_records(std::vector<std::vector<FactField>> records);
};

struct FactField {
  FactField(const char* json_key, const char* attr_name, FactValue v, std::string text = "",
            bool written = true)
      : json(json_key),
        attr(attr_name),
        value(std::move(v)),
        line(std::move(text)),
        in_json(written) {}

  const char* json;  // overflow_report.json's key; nullptr: not written there
  const char* attr;  // the Python objects' attribute; nullptr: none
  FactValue value;
  std::string line;  // the message's line(s), "" for none
  bool in_json;      // false: an optional member of the report, left out this time
};

// The fields that have a JSON key, as members of the object the caller opened.
void write_json_fields(JsonWriter& w, const std::vector<FactField>& fields);
// The lines of the fields that have one, each after "\n  ".
std::string field_lines(const std::vector<FactField>& fields);

}  // namespace msprobe
