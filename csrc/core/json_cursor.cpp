#include "core/json_cursor.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace msprobe {

TextPosition position_of(std::string_view text, size_t offset) {
  TextPosition p;
  const size_t end = offset < text.size() ? offset : text.size();
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

void JsonCursor::skip_ws() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
    ++pos_;
  }
}

bool JsonCursor::at_end() {
  skip_ws();
  return pos_ >= text_.size();
}

char JsonCursor::peek() {
  skip_ws();
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

void JsonCursor::expect(char c) {
  if (peek() != c) {
    if (pos_ >= text_.size()) fail(std::string("expected '") + c + "', got end of file");
    fail(std::string("expected '") + c + "', got '" + text_[pos_] + "'");
  }
  ++pos_;
}

bool JsonCursor::consume(char c) {
  if (peek() != c) return false;
  ++pos_;
  return true;
}

bool JsonCursor::just_opened() const {
  size_t i = pos_;
  while (i > 0) {
    const char c = text_[i - 1];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c == '{' || c == '[';
    --i;
  }
  return false;
}

bool JsonCursor::next_key(std::string& key) {
  if (consume('}')) {
    --depth_;
    return false;
  }
  if (!just_opened()) {
    if (pos_ >= text_.size()) fail("expected ',' or '}', got end of file");
    if (!consume(',')) fail(std::string("expected ',' or '}', got '") + text_[pos_] + "'");
  }
  if (peek() != '"') fail("expected a key string");
  key = read_string();
  expect(':');
  return true;
}

bool JsonCursor::next_item() {
  if (consume(']')) {
    --depth_;
    return false;
  }
  if (!just_opened()) {
    if (pos_ >= text_.size()) fail("expected ',' or ']', got end of file");
    if (!consume(',')) fail(std::string("expected ',' or ']', got '") + text_[pos_] + "'");
  }
  if (peek() == ']') fail("expected a value after ','");
  return true;
}

static void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void JsonCursor::append_escape(std::string& out) {
  // pos_ is on the character after the backslash.
  if (pos_ >= text_.size()) fail("unterminated string");
  const char c = text_[pos_++];
  switch (c) {
    case '"':
      out += '"';
      return;
    case '\\':
      out += '\\';
      return;
    case '/':
      out += '/';
      return;
    case 'b':
      out += '\b';
      return;
    case 'f':
      out += '\f';
      return;
    case 'n':
      out += '\n';
      return;
    case 'r':
      out += '\r';
      return;
    case 't':
      out += '\t';
      return;
    case 'u':
      break;
    default:
      fail_at(pos_ - 1, std::string("invalid escape '\\") + c + "'");
  }
  auto hex4 = [this]() -> uint32_t {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= h - '0';
      else if (h >= 'a' && h <= 'f')
        v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        v |= h - 'A' + 10;
      else
        fail_at(pos_ - 1, "invalid \\u escape");
    }
    return v;
  };
  uint32_t cp = hex4();
  if (cp >= 0xD800 && cp < 0xDC00 && pos_ + 1 < text_.size() && text_[pos_] == '\\' &&
      text_[pos_ + 1] == 'u') {
    pos_ += 2;
    const uint32_t low = hex4();
    if (low >= 0xDC00 && low < 0xE000) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else {
      append_utf8(out, cp);
      cp = low;
    }
  }
  append_utf8(out, cp);
}

std::string JsonCursor::read_string() {
  if (peek() != '"') fail("expected a string");
  ++pos_;
  std::string out;
  size_t run = pos_;
  while (true) {
    if (pos_ >= text_.size()) fail_at(run, "unterminated string");
    const char c = text_[pos_];
    if (c == '"') {
      out.append(text_.data() + run, pos_ - run);
      ++pos_;
      return out;
    }
    if (c == '\\') {
      out.append(text_.data() + run, pos_ - run);
      ++pos_;
      append_escape(out);
      run = pos_;
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
    ++pos_;
  }
}

bool JsonCursor::match_word(std::string_view word) {
  if (text_.compare(pos_, word.size(), word) != 0) return false;
  pos_ += word.size();
  return true;
}

Scalar JsonCursor::read_number() {
  const size_t start = pos_;
  if (match_word("-Infinity")) return Scalar::of_float(-std::numeric_limits<double>::infinity());
  size_t i = pos_;
  if (i < text_.size() && text_[i] == '-') ++i;
  const size_t digits = i;
  while (i < text_.size() && text_[i] >= '0' && text_[i] <= '9') ++i;
  if (i == digits) fail("invalid number");
  if (text_[digits] == '0' && i - digits > 1) fail("invalid number: leading zero");
  bool integral = true;
  if (i < text_.size() && text_[i] == '.') {
    integral = false;
    const size_t frac = ++i;
    while (i < text_.size() && text_[i] >= '0' && text_[i] <= '9') ++i;
    if (i == frac) fail_at(i, "invalid number: digits expected after '.'");
  }
  if (i < text_.size() && (text_[i] == 'e' || text_[i] == 'E')) {
    integral = false;
    ++i;
    if (i < text_.size() && (text_[i] == '+' || text_[i] == '-')) ++i;
    const size_t exp = i;
    while (i < text_.size() && text_[i] >= '0' && text_[i] <= '9') ++i;
    if (i == exp) fail_at(i, "invalid number: digits expected in exponent");
  }
  pos_ = i;
  const char* first = text_.data() + start;
  const char* last = text_.data() + i;
  if (integral) {
    int64_t v = 0;
    auto r = std::from_chars(first, last, v);
    if (r.ec == std::errc() && r.ptr == last) return Scalar::of_int(v);
    // Integers beyond int64 keep their value as a double, as Python's float() would.
  }
  double d = 0.0;
  auto r = std::from_chars(first, last, d);
  if (r.ec == std::errc::result_out_of_range) {
    // from_chars leaves d unset on overflow; Python reads 1e999 as inf and 1e-999 as 0.
    bool negative_exp = false;
    for (const char* p = first; p != last; ++p) {
      if ((*p == 'e' || *p == 'E') && p + 1 != last && p[1] == '-') negative_exp = true;
    }
    const double mag = negative_exp ? 0.0 : std::numeric_limits<double>::infinity();
    d = *first == '-' ? -mag : mag;
  } else if (r.ec != std::errc() || r.ptr != last) {
    fail_at(start, "invalid number");
  }
  return Scalar::of_float(d);
}

Scalar JsonCursor::read_scalar() {
  const char c = peek();
  if (c == '"') return Scalar::of_string(read_string());
  if (c == '-' || (c >= '0' && c <= '9')) return read_number();
  if (match_word("null")) return Scalar::null();
  if (match_word("true")) return Scalar::of_bool(true);
  if (match_word("false")) return Scalar::of_bool(false);
  if (match_word("NaN")) return Scalar::of_float(std::numeric_limits<double>::quiet_NaN());
  if (match_word("Infinity")) return Scalar::of_float(std::numeric_limits<double>::infinity());
  if (c == '\0') fail("expected a value, got end of file");
  if (c == '{' || c == '[') fail("expected a scalar value");
  fail(std::string("unexpected character '") + c + "'");
}

void JsonCursor::skip_value() {
  const char c = peek();
  if (c == '{') {
    begin_object();
    std::string key;
    while (next_key(key)) skip_value();
  } else if (c == '[') {
    begin_array();
    while (next_item()) skip_value();
  } else if (c == '"') {
    // Strings are skipped without building them.
    ++pos_;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char s = text_[pos_++];
      if (s == '"') break;
      if (s == '\\') ++pos_;
    }
  } else {
    read_scalar();
  }
}

std::string_view JsonCursor::raw_value() {
  peek();
  const size_t start = pos_;
  skip_value();
  return text_.substr(start, pos_ - start);
}

std::string describe_next(JsonCursor& cur) {
  switch (cur.peek()) {
    case '{':
      return "an object";
    case '[':
      return "a list";
    case '"':
      return "a string";
    case '\0':
      return "end of file";
    case 't':
    case 'f':
      return "a boolean";
    case 'n':
      return "null";
    default:
      return "a number";
  }
}

}  // namespace msprobe
