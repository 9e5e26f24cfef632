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
#include <variant>
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

// A struct whose fields are its members, declared once as a table of MemberFields: fields_from()
// renders them (the report, the Python dict, the message), and the readers set them back from
// what a renderer made (read_json in core/fact_fields_read.h: the CLI's reader of a report;
// read_dict in live/crossing/dict_fields.h: a dict from Python). One declaration, both
// directions, as nlohmann's NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE gives to_json and from_json.
template <typename T>
struct MemberField {
  using Member = std::variant<bool T::*, int T::*, int64_t T::*, double T::*,
                              std::optional<double> T::*, std::string T::*>;
  const char* key;   // the report's key, and the key of the dict Python hands over or gets
  const char* attr;  // the Python objects' attribute; nullptr: none
  Member member;
  bool null_if_empty = false;  // a string written as null when empty (read back as "")
  bool is_line = false;        // its text is the message's line
};

namespace member_fields {
inline FactValue value_of(bool b, bool) { return FactValue::of(b); }
inline FactValue value_of(int i, bool) { return FactValue::of(i); }
inline FactValue value_of(int64_t i, bool) { return FactValue::of(i); }
inline FactValue value_of(double d, bool) { return FactValue::of(d); }
inline FactValue value_of(const std::optional<double>& d, bool) { return FactValue::of(d); }
inline FactValue value_of(const std::string& s, bool null_if_empty) {
  return null_if_empty && s.empty() ? FactValue() : FactValue::of(s);
}
}  // namespace member_fields

template <typename T>
std::vector<FactField> fields_from(const std::vector<MemberField<T>>& table, const T& value) {
  std::vector<FactField> out;
  out.reserve(table.size());
  for (const MemberField<T>& f : table) {
    FactValue v = std::visit(
        [&](auto member) { return member_fields::value_of(value.*member, f.null_if_empty); },
        f.member);
    std::string line = f.is_line ? v.text : std::string();
    out.emplace_back(f.key, f.attr, std::move(v), std::move(line));
  }
  return out;
}

}  // namespace msprobe
