#include "core/monitor_csv.h"

#include <cmath>

#include "core/python_text.h"

namespace msprobe {

std::string monitor_csv_name(const std::string& prefix, int64_t step, int64_t steps_per_file) {
  const int64_t first = step / steps_per_file * steps_per_file;
  return prefix + "_" + std::to_string(first) + "-" + std::to_string(first + steps_per_file - 1) +
         ".csv";
}

std::string monitor_csv_header(bool micro_step, const std::vector<std::string>& ops) {
  std::vector<std::string> fields = {"vpp_stage", "name", "step"};
  if (micro_step) fields.push_back("micro_step");
  fields.insert(fields.end(), ops.begin(), ops.end());
  return csv_row(fields, "\n");
}

double numpy_round(double x, int ndigits) {
  if (!std::isfinite(x)) return x;
  // numpy scales by an exact power of ten, rounds half to even and scales back.
  const double scale = std::pow(10.0, ndigits);
  return std::nearbyint(x * scale) / scale;
}

namespace {

// How pandas types a column of one write: integers alone stay int64; integers with reals or
// missing values become float64; a column holding text is an object column, whose reals print
// as they are (pandas rounds float columns only).
enum class Column { Integers, Reals, Objects };

Column column_kind(const std::vector<MonitorRow>& rows, size_t op) {
  bool integers = false, reals = false, text = false;
  for (const MonitorRow& r : rows) {
    if (op >= r.values.size()) continue;
    switch (r.values[op].kind) {
      case MonitorValue::Kind::Integer: integers = true; break;
      case MonitorValue::Kind::Real:
      case MonitorValue::Kind::Missing: reals = true; break;
      case MonitorValue::Kind::Text: text = true; break;
    }
  }
  if (text) return Column::Objects;
  return integers && !reals ? Column::Integers : Column::Reals;
}

std::string cell(const MonitorValue& v, Column column, int ndigits) {
  switch (v.kind) {
    case MonitorValue::Kind::Missing: return "nan";
    case MonitorValue::Kind::Text: return v.text;
    case MonitorValue::Kind::Integer:
      if (column == Column::Reals) return python_float(static_cast<double>(v.integer));
      return std::to_string(v.integer);
    case MonitorValue::Kind::Real: break;
  }
  return python_float(column == Column::Reals ? numpy_round(v.real, ndigits) : v.real);
}

}  // namespace

std::string monitor_csv_rows(const std::vector<MonitorRow>& rows, int ndigits) {
  size_t ops = 0;
  for (const MonitorRow& r : rows) ops = std::max(ops, r.values.size());
  std::vector<Column> columns;
  for (size_t op = 0; op < ops; ++op) columns.push_back(column_kind(rows, op));
  std::string out;
  std::vector<std::string> fields;
  for (const MonitorRow& r : rows) {
    fields.assign({r.vpp_stage, r.name, std::to_string(r.step)});
    fields.insert(fields.end(), r.after.begin(), r.after.end());
    for (size_t op = 0; op < ops; ++op) {
      fields.push_back(op < r.values.size() ? cell(r.values[op], columns[op], ndigits) : "nan");
    }
    out += csv_row(fields, "\n");
  }
  return out;
}

}  // namespace msprobe
