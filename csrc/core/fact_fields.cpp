#include "core/fact_fields.h"

namespace msprobe {

FactValue FactValue::of(bool b) {
  FactValue v;
  v.kind = Kind::Bool;
  v.boolean = b;
  return v;
}

FactValue FactValue::of(int64_t i) {
  FactValue v;
  v.kind = Kind::Int;
  v.integer = i;
  return v;
}

FactValue FactValue::of(double d) {
  FactValue v;
  v.kind = Kind::Float;
  v.number = d;
  return v;
}

FactValue FactValue::of(std::string s) {
  FactValue v;
  v.kind = Kind::String;
  v.text = std::move(s);
  return v;
}

FactValue FactValue::of(const std::optional<std::string>& s) {
  return s ? of(*s) : FactValue();
}

FactValue FactValue::of(const std::optional<double>& d) {
  return d ? of(*d) : FactValue();
}

FactValue FactValue::of(std::vector<FactField> record) {
  FactValue v;
  v.kind = Kind::Record;
  v.record = std::move(record);
  return v;
}

FactValue FactValue::list_of_records(std::vector<std::vector<FactField>> records) {
  FactValue v;
  v.kind = Kind::List;
  for (std::vector<FactField>& r : records) v.items.push_back(of(std::move(r)));
  return v;
}

namespace {

void write_json_value(JsonWriter& w, const FactValue& v) {
  switch (v.kind) {
    case FactValue::Kind::Null:
      return w.value_null();
    case FactValue::Kind::Bool:
      return w.value_bool(v.boolean);
    case FactValue::Kind::Int:
      return w.value_int(v.integer);
    case FactValue::Kind::Float:
      return w.value_float(v.number);
    case FactValue::Kind::String:
      return w.value_string(v.text);
    case FactValue::Kind::List:
      w.begin_array();
      for (const FactValue& item : v.items) write_json_value(w, item);
      return w.end_array();
    case FactValue::Kind::Record:
      w.begin_object();
      write_json_fields(w, v.record);
      return w.end_object();
  }
}

}  // namespace

void write_json_fields(JsonWriter& w, const std::vector<FactField>& fields) {
  for (const FactField& f : fields) {
    if (!f.json || !f.in_json) continue;
    w.key(f.json);
    write_json_value(w, f.value);
  }
}

std::string field_lines(const std::vector<FactField>& fields) {
  std::string out;
  for (const FactField& f : fields) {
    if (!f.line.empty()) out += "\n  " + f.line;
  }
  return out;
}

}  // namespace msprobe
