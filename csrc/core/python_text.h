// Values written as Python writes them, so that files made here equal msprobe's byte for byte:
// str(float) (the shortest text that reads back as the same double), str(list of ints), and rows
// of csv.writer's default dialect.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace msprobe {

// repr(float(x)): "0.1", "1e-05", "1e+16", "-0.0", "inf", "nan", "3.0".
std::string python_float(double x);
// str(list_of_ints): "[2, 3]", "[]".
std::string python_int_list(const std::vector<int64_t>& values);
std::string python_int_list(const int64_t* values, size_t count);

// One CSV row as Python's csv.writer writes it (excel dialect): fields joined by ',', a field
// holding ',', '"', '\r' or '\n' quoted with its quotes doubled, the row ended by "\r\n"
// (pandas' to_csv ends it by "\n").
std::string csv_row(const std::vector<std::string>& fields, const char* line_end = "\r\n");
// The byte-order mark msprobe's write_csv puts first (encoding utf-8-sig).
inline constexpr const char* kUtf8Bom = "\xEF\xBB\xBF";

// The inverse of csv_row for one line (without its line end): fields unquoted.
std::vector<std::string> parse_csv_line(const std::string& line);

}  // namespace msprobe
