#include "core/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

namespace msprobe {

void append_float(std::string& out, double d) {
  if (std::isnan(d)) {
    out += "NaN";
    return;
  }
  if (std::isinf(d)) {
    out += d > 0 ? "Infinity" : "-Infinity";
    return;
  }
  // Shortest round-trip digits, then laid out with Python's repr rules: scientific when the
  // decimal exponent is below -4 or at least 16, fixed with a ".0" otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e_at = sci.find('e');
  int exp10 = 0;
  const char* exp_text = sci.data() + e_at + 1;
  if (*exp_text == '+') ++exp_text;  // from_chars takes a '-' only
  std::from_chars(exp_text, sci.data() + sci.size(), exp10);
  std::string_view mant = sci.substr(0, e_at);
  bool negative = false;
  if (!mant.empty() && mant[0] == '-') {
    negative = true;
    mant.remove_prefix(1);
  }
  // Up to 17 significant digits: on the stack, as every statistic of every record comes here (a
  // std::string of them was an allocation a value on the write thread).
  char digit_buf[32];
  size_t digit_count = 0;
  for (char c : mant) {
    if (c != '.' && digit_count < sizeof(digit_buf)) digit_buf[digit_count++] = c;
  }
  const std::string_view digits(digit_buf, digit_count);
  if (negative) out += '-';
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += 'e';
    out += exp10 < 0 ? '-' : '+';
    const int a = std::abs(exp10);
    if (a < 10) out += '0';
    out += std::to_string(a);
    return;
  }
  const int decpt = exp10 + 1;  // digits before the decimal point
  if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits;
    out.append(static_cast<size_t>(decpt) - digits.size(), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  }
}

std::string format_float(double d) {
  std::string s;
  append_float(s, d);
  return s;
}

static void append_u_escape(std::string& out, uint32_t unit) {
  static const char* hex = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex[(unit >> shift) & 0xF];
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    // Copy the longest run that needs no escaping in one go: call names and file paths are
    // almost always plain ASCII.
    size_t run = i;
    while (run < s.size()) {
      const unsigned char r = static_cast<unsigned char>(s[run]);
      if (r < 0x20 || r >= 0x80 || r == '"' || r == '\\') break;
      ++run;
    }
    if (run > i) {
      out.append(s.data() + i, run - i);
      i = run;
      if (i == s.size()) break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      append_u_escape(out, c);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // Decode one UTF-8 sequence; escape as Python's ensure_ascii does. Invalid bytes pass
      // through as U+FFFD rather than producing invalid JSON.
      uint32_t cp = 0xFFFD;
      size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (len > 1 && i + len <= s.size()) {
        cp = c & (0x7F >> len);
        for (size_t k = 1; k < len; ++k)
          cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        i += len - 1;
      }
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u_escape(out, 0xD800 + (cp >> 10));
        append_u_escape(out, 0xDC00 + (cp & 0x3FF));
      } else {
        append_u_escape(out, cp);
      }
    }
  }
  out += '"';
}

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(has_members_.size() * static_cast<size_t>(indent_), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (has_members_.empty()) return;
  if (has_members_.back()) out_ += ',';
  has_members_.back() = true;
  newline();
}

void JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  has_members_.push_back(false);
}

void JsonWriter::close(char bracket) {
  const bool had = has_members_.back();
  has_members_.pop_back();
  if (had) newline();
  out_ += bracket;
}

void JsonWriter::end_object() {
  close('}');
}

void JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  has_members_.push_back(false);
}

void JsonWriter::end_array() {
  close(']');
}

void JsonWriter::key(std::string_view k) {
  before_value();
  append_json_string(out_, k);
  out_ += ": ";
  after_key_ = true;
}

void JsonWriter::value_string(std::string_view s) {
  before_value();
  append_json_string(out_, s);
}

void JsonWriter::value_int(int64_t i) {
  before_value();
  out_ += std::to_string(i);
}

void JsonWriter::value_float(double d) {
  before_value();
  append_float(out_, d);
}

void JsonWriter::value_bool(bool b) {
  before_value();
  out_ += b ? "true" : "false";
}

void JsonWriter::value_null() {
  before_value();
  out_ += "null";
}

void JsonWriter::value_raw(std::string_view json) {
  before_value();
  out_ += json;
}

}  // namespace msprobe
