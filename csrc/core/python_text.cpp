#include "core/python_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace msprobe {

std::string python_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  // The shortest round-trip digits, then laid out as Python's float_repr_style "short" does.
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const int decpt = exponent + 1;  // value = 0.<digits> * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    // Appends, not `"." + text`: GCC 12 under C++20 warns (-Wrestrict) inside libstdc++'s
    // operator+ for a literal and a string.
    if (decpt <= 0) {
      out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out.append(digits).append(static_cast<size_t>(decpt) - digits.size(), '0').append(".0");
    } else {
      const size_t point = static_cast<size_t>(decpt);
      out.append(digits, 0, point).append(1, '.').append(digits, point, std::string::npos);
    }
    return out;
  }
  out.append(digits, 0, 1);
  if (digits.size() > 1) out.append(1, '.').append(digits, 1, std::string::npos);
  const int shown = decpt - 1;
  const std::string exp_digits = std::to_string(std::abs(shown));
  out.append(1, 'e').append(1, shown < 0 ? '-' : '+');
  if (exp_digits.size() < 2) out.append(1, '0');
  return out.append(exp_digits);
}

std::string python_int_list(const std::vector<int64_t>& values) {
  return python_int_list(values.data(), values.size());
}

std::string python_int_list(const int64_t* values, size_t count) {
  std::string out = "[";
  for (size_t i = 0; i < count; ++i) {
    if (i) out += ", ";
    out += std::to_string(values[i]);
  }
  out += ']';
  return out;
}

std::string csv_row(const std::vector<std::string>& fields, const char* line_end) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\r\n") == std::string::npos) {
      out += f;
      continue;
    }
    out += '"';
    for (char c : f) {
      if (c == '"') out += '"';
      out += c;
    }
    out += '"';
  }
  return out.append(line_end);
}

std::vector<std::string> parse_csv_line(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

}  // namespace msprobe
