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

Column column_kind(const std::vector<std::vector<MonitorValue>>& rows, size_t column) {
  bool integers = false, reals = false, text = false;
  for (const std::vector<MonitorValue>& r : rows) {
    if (column >= r.size()) {
      reals = true;  // a shorter row: pandas fills it with nan
      continue;
    }
    switch (r[column].kind) {
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

std::vector<MonitorValue> monitor_row_cells(const MonitorRow& row) {
  std::vector<MonitorValue> cells = {MonitorValue::of_text(row.vpp_stage),
                                     MonitorValue::of_text(row.name),
                                     MonitorValue::of_integer(row.step)};
  for (const std::string& a : row.after) cells.push_back(MonitorValue::of_text(a));
  cells.insert(cells.end(), row.values.begin(), row.values.end());
  return cells;
}

std::string monitor_csv_cells(const std::vector<std::vector<MonitorValue>>& rows, int ndigits) {
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  std::vector<Column> columns;
  for (size_t c = 0; c < width; ++c) columns.push_back(column_kind(rows, c));
  std::string out;
  std::vector<std::string> fields;
  for (const auto& r : rows) {
    fields.clear();
    for (size_t c = 0; c < width; ++c) {
      fields.push_back(c < r.size() ? cell(r[c], columns[c], ndigits) : "nan");
    }
    out += csv_row(fields, "\n");
  }
  return out;
}

std::string monitor_csv_rows(const std::vector<MonitorRow>& rows, int ndigits) {
  std::vector<std::vector<MonitorValue>> cells;
  cells.reserve(rows.size());
  for (const MonitorRow& r : rows) cells.push_back(monitor_row_cells(r));
  return monitor_csv_cells(cells, ndigits);
}

}  // namespace msprobe
