// A forward-only JSON cursor over text in memory. It accepts what Python's json module writes,
// including the bare tokens NaN, Infinity and -Infinity that nlohmann/json rejects, and it lets
// the dump reader build records directly instead of a document tree (a 100 MB dump.json would
// otherwise cost several times its size in memory).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/record.h"

namespace msprobe {

// A syntax or shape error at a byte offset of the text.
class JsonSyntaxError : public std::runtime_error {
 public:
  JsonSyntaxError(size_t offset, const std::string& what)
      : std::runtime_error(what), offset_(offset) {}
  size_t offset() const { return offset_; }

 private:
  size_t offset_;
};

// 1-based line and column of a byte offset.
struct TextPosition {
  size_t line = 1;
  size_t column = 1;
};
TextPosition position_of(std::string_view text, size_t offset);

class JsonCursor {
 public:
  explicit JsonCursor(std::string_view text) : text_(text) {}

  size_t offset() const { return pos_; }
  bool at_end();                 // only whitespace left
  char peek();                   // next non-whitespace character, '\0' at the end
  void expect(char c);           // consume c or throw
  bool consume(char c);          // consume c if it is next
  std::string read_string();     // a JSON string; throws if the next value is not a string
  Scalar read_scalar();          // string, number, true/false/null, NaN/Infinity; throws otherwise
  void skip_value();             // any value
  std::string_view raw_value();  // any value, returned as its JSON text

  // Object and array iteration: `begin_object()` then `next_key(key)` until it returns false.
  void begin_object() { expect('{'), enter(); }
  bool next_key(std::string& key);
  void begin_array() { expect('['), enter(); }
  bool next_item();

  [[noreturn]] void fail(const std::string& what) const { throw JsonSyntaxError(pos_, what); }
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    throw JsonSyntaxError(offset, what);
  }

 private:
  void skip_ws();
  bool match_word(std::string_view word);
  Scalar read_number();
  void append_escape(std::string& out);
  bool just_opened() const;
  // Nesting is bounded so that a hostile file cannot exhaust the stack.
  void enter() {
    if (++depth_ > kMaxDepth) fail("nesting deeper than 256 levels");
  }
  static constexpr int kMaxDepth = 256;
  int depth_ = 0;  // the previous non-blank character opens an object or array

  std::string_view text_;
  size_t pos_ = 0;
};

// Short description of the value kind starting at the cursor, for "expected X, got Y" messages.
std::string describe_next(JsonCursor& cur);

}  // namespace msprobe
