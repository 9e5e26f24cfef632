// Writes JSON the way Python's json module does with `indent`, so our files read like msprobe's:
// floats in repr form (0.0, 1e-05, 1.8e+38), non-finite floats as NaN / Infinity / -Infinity,
// non-ASCII characters escaped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace msprobe {

// Python's repr() of a float.
std::string format_float(double d);
void append_float(std::string& out, double d);
void append_json_string(std::string& out, std::string_view s);

class JsonWriter {
 public:
  explicit JsonWriter(int indent = 1) : indent_(indent) {}
  // Writes into `buffer` (cleared first), keeping its capacity: a writer that runs every step
  // hands the same buffer back and forth instead of growing a new one each time.
  JsonWriter(int indent, std::string&& buffer) : out_(std::move(buffer)), indent_(indent) {
    out_.clear();
  }

  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  void key(std::string_view k);
  void value_string(std::string_view s);
  void value_int(int64_t i);
  void value_float(double d);
  void value_bool(bool b);
  void value_null();
  void value_raw(std::string_view json);  // already-formatted JSON text

  // Members of a container rendered apart, by a writer made with members_at(), to be handed to
  // the sink between this writer's chunks: the open container takes them as its own (its closing
  // bracket goes on a line of its own). Call it once, after the members' text has been sunk.
  void members_written_apart() { has_members_.back() = true; }
  // A writer for members rendered apart: as if `depth` containers were open and empty, so the
  // first member has no comma before it and each is indented for that depth.
  static JsonWriter members_at(int indent, size_t depth) {
    JsonWriter w(indent);
    w.has_members_.assign(depth, false);
    return w;
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }
  // What has been written since the last call, leaving the writer where it is: a long document
  // goes out in chunks.
  std::string take_chunk() {
    std::string chunk;
    chunk.swap(out_);
    return chunk;
  }

 private:
  void before_value();
  void newline();
  void close(char bracket);

  std::string out_;
  int indent_;
  // One flag per open container: whether it has members yet.
  std::vector<bool> has_members_;
  bool after_key_ = false;
};

}  // namespace msprobe
