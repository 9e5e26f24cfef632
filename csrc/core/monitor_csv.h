// The training monitor's CSV files as msprobe 26.2.0's TrainerMon writes them
// (monitor/data_writers.py, CSVWriterWithAD; docs/monitor-reference.md §3): the file of a step,
// the header, and each write's rows as pandas writes one DataFrame of them, so that a file made
// here equals msprobe's byte for byte. No torch: the values come in already computed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace msprobe {

// One statistic of a row, as the Python value msprobe puts in its DataFrame.
struct MonitorValue {
  enum class Kind { Missing, Integer, Real, Text };
  Kind kind = Kind::Missing;  // Missing: None (no gradient, a failed op), written "nan"
  int64_t integer = 0;        // `nans` (an int64 tensor's item())
  double real = 0;            // min, max, norm, mean, zeros (a float tensor's item())
  std::string text;           // shape "[16, 8]", dtype "torch.float32"

  static MonitorValue missing() { return {}; }
  static MonitorValue of_integer(int64_t v) { return {Kind::Integer, v, 0, {}}; }
  static MonitorValue of_real(double v) { return {Kind::Real, 0, v, {}}; }
  static MonitorValue of_text(std::string v) { return {Kind::Text, 0, 0, std::move(v)}; }
};

// One collective's slot since the last written step ("post_0": its first tensor after the call)
// and its values, op by op: what the alert rules scan of cc_distribution, as msprobe scans its
// "<collective>/rank<R>/<slot>" tags.
struct MonitorCallSlot {
  std::string collective;
  std::string slot;
  std::vector<MonitorValue> values;
};

// A row: the key columns before and after the step (vpp_stage, name | micro_step), the step, and
// one value per op column.
struct MonitorRow {
  std::string vpp_stage;             // "0": the model chunk
  std::string name;                  // "fc1.input", "fc1.weight"
  std::vector<std::string> after;    // {"0"}: the micro step, in the files that have one
  int64_t step = 0;
  std::vector<MonitorValue> values;  // in the header's op order
};

// "<prefix>_<a>-<b>.csv": the file holding `step` when each file holds `steps_per_file` steps
// (step_count_per_record), a = step rounded down to a multiple of it, b = a + steps_per_file - 1.
std::string monitor_csv_name(const std::string& prefix, int64_t step, int64_t steps_per_file);

// "vpp_stage,name,step[,micro_step],<ops>\n".
std::string monitor_csv_header(bool micro_step, const std::vector<std::string>& ops);

// The rows of one write (one prefix of one step), as pandas writes
// DataFrame(rows).round(ndigits).fillna("nan").to_csv(header=False, index=False): a column of
// integers alone prints integers, a column that also holds a real or a missing value prints
// each as a real; reals rounded as numpy rounds (rint(x * 10^n) / 10^n) and printed as Python's
// repr; missing values "nan"; fields quoted as csv does; each row ended by "\n".
std::string monitor_csv_rows(const std::vector<MonitorRow>& rows, int ndigits);

// A row's fields as the values pandas gets: its key columns as text, the step an integer.
std::vector<MonitorValue> monitor_row_cells(const MonitorRow& row);

// Rows of any length (msprobe's collectives' rows are longer than the header), each column typed
// as pandas types it (a column holding text prints its values as they are; the rows' missing
// tails are "nan"), as monitor_csv_rows() writes them.
std::string monitor_csv_cells(const std::vector<std::vector<MonitorValue>>& rows, int ndigits);

// numpy's round(x, ndigits) for ndigits >= 0.
double numpy_round(double x, int ndigits);

}  // namespace msprobe
