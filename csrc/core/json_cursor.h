// A forward-only JSON cursor over text in memory or streamed from a reader. It accepts what
// Python's json module writes, including the bare tokens NaN, Infinity and -Infinity that
// nlohmann/json rejects, and it lets the dump reader build records directly instead of a document
// tree. Streamed, it keeps only the unread chunk and the token being read, so a dump of many GB is
// checked in the memory of its largest record.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/byte_buffer.h"
#include "core/record.h"
#include "core/text_file.h"

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

// Fills a buffer with up to `n` bytes; returns 0 at the end of the input. Throws on read errors.
using ReadFn = std::function<size_t(char* buf, size_t n)>;

class JsonCursor {
 public:
  explicit JsonCursor(std::string_view text) : data_(text.data()), end_(text.size()) {}
  // `chunk` bytes are read at a time.
  explicit JsonCursor(ReadFn read, size_t chunk = size_t{1} << 20)
      : read_(std::move(read)), chunk_(chunk) {}
  // A piece of a larger input in memory: `text` begins at `offset` of it, read from inside
  // `depth` open objects or arrays (a region of a dump's members, parsed on a thread of its own:
  // parallel_members.h). Offsets are the larger input's.
  JsonCursor(std::string_view text, size_t offset, int depth)
      : depth_(depth), data_(text.data()), base_(offset), end_(offset + text.size()),
        pos_(offset) {}

  // A streaming cursor goes on at `offset` of its input, read from there by `read`, as if it had
  // read everything before: inside the same object, where a member begins (`at_member`: its ','
  // read already) or just after one. `position` is where `offset` is. The members before it were
  // read by other cursors.
  void resume_members(size_t offset, bool at_member, TextPosition position, ReadFn read);

  size_t offset() const { return pos_; }  // bytes from the start of the input
  // Line and column of an offset; offsets already discarded by a streaming cursor report where
  // the kept text begins, except offset 0.
  TextPosition position(size_t offset) const;
  bool at_end();  // only whitespace left
  // Next non-whitespace character, '\0' at the end. Inline for the common case, a token that
  // follows another at once: every separator and value of a record asks.
  char peek() {
    if (pos_ < end_) {
      const char c = data_[pos_ - base_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c;
    }
    return peek_after_ws();
  }
  // Consumes c or throws.
  void expect(char c) {
    if (peek() != c) fail_expected_char(c);
    ++pos_;
  }
  // Consumes c if it is next.
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  std::string read_string();  // a JSON string; throws if the next value is not a string
  void read_string_into(std::string& out);  // the same, reusing out's storage
  Scalar read_scalar();     // string, number, true/false/null, NaN/Infinity; throws otherwise
  void skip_value();        // any value
  std::string raw_value();  // any value, returned as its JSON text

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
  // Keeps the text from `at` on in the buffer while a token that started there is read, so that
  // offsets into it stay valid across refills.
  class Pin {
   public:
    Pin(JsonCursor& cur, size_t at) : cur_(cur), saved_(cur.pin_) {
      if (at < cur.pin_) cur.pin_ = at;
    }
    ~Pin() { cur_.pin_ = saved_; }

   private:
    JsonCursor& cur_;
    size_t saved_;
  };

  // Whether the byte at offset `at` exists, reading more of a streamed input if needed.
  bool has(size_t at) { return at < end_ || fill(at); }
  char at(size_t offset) const { return data_[offset - base_]; }
  const char* ptr(size_t offset) const { return data_ + (offset - base_); }
  bool fill(size_t at);

  void skip_ws();
  char peek_after_ws();
  [[noreturn]] void fail_expected_char(char c);
  bool match_word(std::string_view word);
  Scalar read_number();
  Scalar number_from_text(size_t start, size_t stop, bool integral);
  void read_string_slow(std::string& out, size_t open);
  void append_escape(std::string& out);
  bool separator(char close, const char* expected);
  // Nesting is bounded so that a hostile file cannot exhaust the stack.
  void enter() {
    if (++depth_ > kMaxDepth) fail("nesting deeper than 256 levels");
    fresh_ = true;
  }
  static constexpr int kMaxDepth = 256;
  int depth_ = 0;
  bool fresh_ = false;  // an object or array was just opened: no ',' before its first member

  // The text held is [base_, end_) in input offsets, at data_.
  const char* data_ = nullptr;
  size_t base_ = 0;
  size_t end_ = 0;
  size_t pos_ = 0;
  size_t pin_ = static_cast<size_t>(-1);

  ReadFn read_;  // empty for text in memory
  size_t chunk_ = 0;
  bool eof_ = false;
  ByteBuffer buf_;
  TextPosition base_position_;  // of base_, counted as text is discarded
};

// Short description of the value kind starting at the cursor, for "expected X, got Y" messages.
std::string next_value_kind(JsonCursor& cur);

}  // namespace msprobe
