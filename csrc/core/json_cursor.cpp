#include "core/json_cursor.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace msprobe {

namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

bool ends_plain_run(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return c == '"' || c == '\\' || c < 0x20;
}

// The first '"', '\\' or control character in [p, limit), or limit: 16 bytes a step where SSE2
// exists (every x86-64), since the keys and names of a dump are most of its bytes.
const char* string_stop(const char* p, const char* limit) {
#ifdef __SSE2__
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i high_bits = _mm_set1_epi8(static_cast<char>(0xE0));
  const __m128i zero = _mm_setzero_si128();
  while (limit - p >= 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hit =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                     _mm_cmpeq_epi8(_mm_and_si128(x, high_bits), zero));
    const int mask = _mm_movemask_epi8(hit);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (p != limit && !ends_plain_run(*p)) ++p;
  return p;
}

// The first byte in [p, limit) that is not JSON whitespace, or limit. A dump's indentation is
// 29 % of its bytes, in runs of a newline and a few spaces: one 16-byte compare a run, mostly.
const char* whitespace_stop(const char* p, const char* limit) {
#ifdef __SSE2__
  const __m128i space = _mm_set1_epi8(' ');
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i carriage_return = _mm_set1_epi8('\r');
  const __m128i tab = _mm_set1_epi8('\t');
  while (limit - p >= 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i ws =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, space), _mm_cmpeq_epi8(x, newline)),
                     _mm_or_si128(_mm_cmpeq_epi8(x, carriage_return), _mm_cmpeq_epi8(x, tab)));
    const unsigned other = ~static_cast<unsigned>(_mm_movemask_epi8(ws)) & 0xFFFFu;
    if (other != 0) return p + __builtin_ctz(other);
    p += 16;
  }
#endif
  while (p != limit && is_ws(*p)) ++p;
  return p;
}

}  // namespace

TextPosition JsonCursor::position(size_t offset) const {
  if (offset == 0 || offset < base_) return offset == 0 ? TextPosition{} : base_position_;
  TextPosition p = base_position_;
  p.advance(data_, data_ + (std::min(offset, end_) - base_));
  return p;
}

void JsonCursor::resume_members(size_t offset, bool at_member, TextPosition position,
                                ReadFn read) {
  buf_.clear();
  data_ = buf_.data();
  base_ = end_ = pos_ = offset;
  pin_ = static_cast<size_t>(-1);
  read_ = std::move(read);
  eof_ = false;
  base_position_ = position;
  fresh_ = at_member;
}

bool JsonCursor::fill(size_t at) {
  if (!read_ || eof_) return false;
  // Drop what no pending token needs; count its lines so that later errors still say where.
  const size_t keep = std::min({pos_, pin_, end_});
  if (keep > base_) {
    base_position_.advance(data_, data_ + (keep - base_));
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(keep - base_));
    base_ = keep;
  }
  while (end_ <= at && !eof_) {
    const size_t held = buf_.size();
    buf_.resize(held + chunk_);
    const size_t n = read_(buf_.data() + held, chunk_);
    buf_.resize(held + n);
    eof_ = n == 0;
    data_ = buf_.data();
    end_ = base_ + buf_.size();
  }
  return at < end_;
}

void JsonCursor::skip_ws() {
  // The indentation of every line of a dump passes through here: pointers, no offsets.
  for (;;) {
    const char* const stop = data_ + (end_ - base_);
    const char* p = whitespace_stop(data_ + (pos_ - base_), stop);
    pos_ = base_ + static_cast<size_t>(p - data_);
    if (p != stop) return;
    if (!fill(pos_)) return;
  }
}

bool JsonCursor::at_end() {
  skip_ws();
  return !has(pos_);
}

char JsonCursor::peek_after_ws() {
  skip_ws();
  return has(pos_) ? at(pos_) : '\0';
}

void JsonCursor::fail_expected_char(char c) {
  if (!has(pos_)) fail(std::string("expected '") + c + "', got end of file");
  fail(std::string("expected '") + c + "', got '" + at(pos_) + "'");
}

// After an object's or array's first member, members are separated by ','.
bool JsonCursor::separator(char close, const char* expected) {
  if (consume(close)) {
    --depth_;
    fresh_ = false;
    return false;
  }
  if (!fresh_) {
    if (!has(pos_)) fail(std::string("expected ") + expected + ", got end of file");
    if (!consume(',')) fail(std::string("expected ") + expected + ", got '" + at(pos_) + "'");
  }
  fresh_ = false;
  return true;
}

bool JsonCursor::next_key(std::string& key) {
  if (!separator('}', "',' or '}'")) return false;
  if (peek() != '"') fail("expected a key string");
  read_string_into(key);
  expect(':');
  return true;
}

bool JsonCursor::next_item() {
  if (!separator(']', "',' or ']'")) return false;
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
  if (!has(pos_)) fail("unterminated string");
  const char c = at(pos_++);
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
    if (!has(pos_ + 3)) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = at(pos_++);
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
  if (cp >= 0xD800 && cp < 0xDC00 && has(pos_ + 1) && at(pos_) == '\\' && at(pos_ + 1) == 'u') {
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
  std::string out;
  read_string_into(out);
  return out;
}

void JsonCursor::read_string_into(std::string& out) {
  if (peek() != '"') fail("expected a string");
  const size_t open = pos_++;
  out.clear();
  // Nearly every string of a dump is a short key or type name held whole in the buffer with no
  // escape: one pass finds its end, one assign copies it.
  const char* const first = ptr(pos_);
  const char* const limit = ptr(end_);
  const char* const p = string_stop(first, limit);
  if (p != limit && *p == '"') {
    out.assign(first, static_cast<size_t>(p - first));
    pos_ += static_cast<size_t>(p - first) + 1;
    return;
  }
  read_string_slow(out, open);
}

void JsonCursor::read_string_slow(std::string& out, size_t open) {
  Pin pin(*this, open);
  size_t run = pos_;
  while (true) {
    if (!has(pos_)) fail_at(open + 1, "unterminated string");
    const char c = at(pos_);
    if (c == '"') {
      out.append(ptr(run), pos_ - run);
      ++pos_;
      return;
    }
    if (c == '\\') {
      out.append(ptr(run), pos_ - run);
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
  for (size_t k = 0; k < word.size(); ++k) {
    if (!has(pos_ + k) || at(pos_ + k) != word[k]) return false;
  }
  pos_ += word.size();
  return true;
}

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The end of a well-formed number that starts at `p` and ends before `limit`, or nullptr: the
// caller then takes the careful path, which reads across chunks and words its errors.
const char* scan_number(const char* p, const char* limit, bool& integral) {
  if (p == limit) return nullptr;
  if (*p == '-') ++p;
  const char* const digits = p;
  while (p != limit && is_digit(*p)) ++p;
  if (p == digits || p == limit || (*digits == '0' && p - digits > 1)) return nullptr;
  integral = true;
  if (*p == '.') {
    integral = false;
    const char* const frac = ++p;
    while (p != limit && is_digit(*p)) ++p;
    if (p == frac || p == limit) return nullptr;
  }
  if (*p == 'e' || *p == 'E') {
    integral = false;
    ++p;
    if (p != limit && (*p == '+' || *p == '-')) ++p;
    const char* const exp = p;
    while (p != limit && is_digit(*p)) ++p;
    if (p == exp || p == limit) return nullptr;
  }
  return p;
}

}  // namespace

Scalar JsonCursor::read_number() {
  const size_t start = pos_;
  bool integral = true;
  if (const char* stop = scan_number(ptr(pos_), ptr(end_), integral)) {
    pos_ += static_cast<size_t>(stop - ptr(pos_));
    return number_from_text(start, pos_, integral);
  }
  if (match_word("-Infinity")) return Scalar::of_float(-std::numeric_limits<double>::infinity());
  Pin pin(*this, start);
  auto digit = [this](size_t i) { return has(i) && at(i) >= '0' && at(i) <= '9'; };
  size_t i = pos_;
  if (has(i) && at(i) == '-') ++i;
  const size_t digits = i;
  while (digit(i)) ++i;
  if (i == digits) fail("invalid number");
  if (at(digits) == '0' && i - digits > 1) fail("invalid number: leading zero");
  integral = true;
  if (has(i) && at(i) == '.') {
    integral = false;
    const size_t frac = ++i;
    while (digit(i)) ++i;
    if (i == frac) fail_at(i, "invalid number: digits expected after '.'");
  }
  if (has(i) && (at(i) == 'e' || at(i) == 'E')) {
    integral = false;
    ++i;
    if (has(i) && (at(i) == '+' || at(i) == '-')) ++i;
    const size_t exp = i;
    while (digit(i)) ++i;
    if (i == exp) fail_at(i, "invalid number: digits expected in exponent");
  }
  pos_ = i;
  return number_from_text(start, i, integral);
}

Scalar JsonCursor::number_from_text(size_t start, size_t stop, bool integral) {
  const char* first = ptr(start);
  const char* last = ptr(stop);
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
      if (!has(pos_)) fail("unterminated string");
      const char s = at(pos_++);
      if (s == '"') break;
      if (s == '\\') {
        if (!has(pos_)) fail("unterminated string");
        ++pos_;
      }
    }
  } else {
    read_scalar();
  }
}

std::string JsonCursor::raw_value() {
  peek();
  const size_t start = pos_;
  Pin pin(*this, start);
  skip_value();
  return std::string(ptr(start), pos_ - start);
}

std::string next_value_kind(JsonCursor& cur) {
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
