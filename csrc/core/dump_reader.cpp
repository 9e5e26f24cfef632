#include "core/dump_reader.h"

#include <limits>
#include <string_view>

#include "core/json_cursor.h"
#include "core/parallel_members.h"
#include "core/text_file.h"

namespace msprobe {

// Keys compared as string views: their lengths first, no strlen of the literal.
using namespace std::string_view_literals;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] >= 'A' && a[i] <= 'Z' ? a[i] - 'A' + 'a' : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

// Some writers put non-finite statistics in strings ("inf", "NaN"); they mean numbers.
Scalar numeric_string(Scalar s) {
  if (s.kind != Scalar::Kind::String) return s;
  const std::string& t = s.text();
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (iequals(t, "nan") || iequals(t, "-nan") || iequals(t, "+nan")) {
    return Scalar::of_float(std::numeric_limits<double>::quiet_NaN());
  }
  if (iequals(t, "inf") || iequals(t, "+inf") || iequals(t, "infinity") ||
      iequals(t, "+infinity")) {
    return Scalar::of_float(inf);
  }
  if (iequals(t, "-inf") || iequals(t, "-infinity")) return Scalar::of_float(-inf);
  return s;
}

class RecordParser {
 public:
  RecordParser(JsonCursor& cur) : cur_(cur) {}

  void set_context(std::string context) { context_ = std::move(context); }

  [[noreturn]] void fail_expected(const std::string& field, const char* expected) {
    std::string where = context_ + field;
    if (!where.empty() && where.back() == '.') where.pop_back();
    cur_.fail(where + ": expected " + expected + ", got " + next_value_kind(cur_));
  }

  std::vector<Entry> entry_list(const std::string& field) {
    std::vector<Entry> out;
    entry_list_into(out, field);
    return out;
  }

  // Into `out`'s storage: a reader reusing one record keeps its lists' capacity.
  // The entries already in `out` are refilled in place.
  void entry_list_into(std::vector<Entry>& out, const std::string& field) {
    if (cur_.peek() != '[') fail_expected(field, "a list");
    out.reserve(4);  // most calls have one to three arguments: one allocation, no moves
    size_t n = 0;
    cur_.begin_array();
    while (cur_.next_item()) {
      if (n == out.size()) {
        out.emplace_back();
      } else {
        recycle(out[n]);
      }
      entry_into(out[n++], field);
    }
    out.resize(n);
  }

  static void recycle(Entry& e) { e = Entry(); }

  // Into `out`'s storage, as entry_list_into.
  void entry_map_into(std::vector<std::pair<std::string, Entry>>& out, const std::string& field) {
    if (cur_.peek() != '{') fail_expected(field, "an object");
    size_t n = 0;
    cur_.begin_object();
    for (;; ++n) {
      if (n == out.size()) out.emplace_back();
      if (!cur_.next_key(out[n].first)) break;
      recycle(out[n].second);
      entry_into(out[n].second, field);
    }
    out.resize(n);
  }

  // Fills a default Entry (a recycled one included).
  void entry_into(Entry& e, const std::string& field) {
    const char c = cur_.peek();
    if (c == '[') {
      e.kind = Entry::Kind::List;
      e.items = entry_list(field);
    } else if (c == '{') {
      object(e, field);
    } else if (c == 'n') {
      cur_.read_scalar();
    } else {
      e.kind = Entry::Kind::Other;
      cur_.skip_value();
    }
  }

 private:
  Scalar scalar_field(const std::string& field, const char* key) {
    const char c = cur_.peek();
    if (c == '{' || c == '[') fail_expected(field + "." + key, "a number, string, boolean or null");
    return cur_.read_scalar();
  }

  void string_field(std::string& out, const std::string& field, const char* key) {
    if (cur_.peek() != '"') fail_expected(field + "." + key, "a string");
    cur_.read_string_into(out);
  }

  void shape(Entry& e, const std::string& field) {
    if (cur_.peek() != '[') fail_expected(field + ".shape", "a list of integers");
    e.has_shape = true;
    e.shape.reserve(4);
    cur_.begin_array();
    while (cur_.next_item()) {
      const size_t at = cur_.offset();
      Scalar s = cur_.read_scalar();
      if (s.kind != Scalar::Kind::Int) {
        cur_.fail_at(at, context_ + field + ".shape: expected a list of integers");
      }
      e.shape.push_back(s.integer);
    }
  }

  void object(Entry& e, const std::string& field) {
    e.kind = Entry::Kind::Object;
    std::string& key = key_;
    cur_.begin_object();
    while (cur_.next_key(key)) {
      if (key == "type"sv) {
        string_field(e.type, field, "type");
      } else if (key == "dtype"sv) {
        string_field(e.dtype, field, "dtype");
      } else if (key == "shape"sv) {
        shape(e, field);
      } else if (key == "Max"sv) {
        e.max = numeric_string(scalar_field(field, "Max"));
      } else if (key == "Min"sv) {
        e.min = numeric_string(scalar_field(field, "Min"));
      } else if (key == "Mean"sv) {
        e.mean = numeric_string(scalar_field(field, "Mean"));
      } else if (key == "Norm"sv) {
        e.norm = numeric_string(scalar_field(field, "Norm"));
      } else if (key == "Max_except_inf_nan"sv) {
        e.finite.max = numeric_string(scalar_field(field, "Max_except_inf_nan"));
      } else if (key == "Min_except_inf_nan"sv) {
        e.finite.min = numeric_string(scalar_field(field, "Min_except_inf_nan"));
      } else if (key == "requires_grad"sv) {
        e.requires_grad = scalar_field(field, "requires_grad");
      } else if (key == "value"sv || key == "format"sv) {  // "format": a memory_format's value
        const char c = cur_.peek();
        e.value = (c == '[' || c == '{') ? Scalar::of_raw(std::string(cur_.raw_value()))
                                         : cur_.read_scalar();
      } else if (key == "group_ranks"sv) {
        const char c = cur_.peek();
        e.value = (c == '[' || c == '{') ? Scalar::of_raw(std::string(cur_.raw_value()))
                                         : cur_.read_scalar();
      } else if (key == "group_id"sv) {
        string_field(e.group_id, field, "group_id");
      } else if (key == "md5") {
        string_field(e.md5, field, "md5");
      } else if (key == "data_name"sv) {
        string_field(e.data_name, field, "data_name");
      } else if (const char c = cur_.peek(); e.type.empty() && (c == '{' || c == '[' || c == 'n')) {
        // A mapping's field (msprobe writes a dict, a dataclass or a namedtuple as an object of
        // entries, which has no "type" of its own).
        e.keys.push_back(key);
        entry_into(e.items.emplace_back(), field + "." + e.keys.back());
      } else {
        cur_.skip_value();
      }
    }
    if (e.type.empty()) {
      e.kind = Entry::Kind::Map;
    } else {
      e.keys.clear();
      e.items.clear();
    }
  }

  JsonCursor& cur_;
  std::string context_;
  std::string key_;
};

void read_record(JsonCursor& cur, RecordParser& parser, CallRecord& rec) {
  std::string key;
  cur.begin_object();
  while (cur.next_key(key)) {
    if (key == "input_args"sv) {
      parser.entry_list_into(rec.inputs, "input_args");
    } else if (key == "input"sv) {
      parser.entry_list_into(rec.inputs, "input");
      rec.uses_input_key = true;
    } else if (key == "input_kwargs"sv) {
      parser.entry_map_into(rec.kwargs, "input_kwargs");
    } else if (key == "output"sv) {
      parser.entry_list_into(rec.outputs, "output");
    } else {
      cur.skip_value();
    }
  }
}

// Reads `"name": {record}` at the cursor into `rec`, whose lists keep their storage.
void read_member(JsonCursor& cur, RecordParser& parser, std::string& name, CallRecord& rec) {
  parser.set_context("data.\"" + name + "\".");
  if (cur.peek() != '{') parser.fail_expected("", "an object");
  rec.inputs.clear();
  rec.kwargs.clear();
  rec.outputs.clear();
  rec.uses_input_key = false;
  rec.name.swap(name);
  read_record(cur, parser, rec);
}

// The members of one region of "data", on a thread of its own (parallel_members.h). It stops at
// the first thing that is not a whole member followed by ',': the sequential reader goes on
// there and says what it is.
void parse_members(std::string_view text, size_t offset, ParsedMembers& out) {
  JsonCursor cur(text, offset, /*depth=*/2);  // inside the top-level object and "data"
  RecordParser parser(cur);
  out.count = 0;
  out.resume = offset;
  out.at_member = true;
  out.complete = false;
  std::string name;
  try {
    while (cur.peek() == '"') {
      cur.read_string_into(name);
      cur.expect(':');
      if (cur.peek() != '{') break;
      if (out.count == out.records.size()) out.records.emplace_back();
      read_member(cur, parser, name, out.records[out.count]);
      ++out.count;
      out.resume = cur.offset();
      out.at_member = false;
      if (!cur.consume(',')) break;
      if (cur.at_end()) {
        out.complete = true;
        break;
      }
    }
  } catch (const JsonSyntaxError&) {
  }
}

// Reads the members of "data" that `ahead` left, or all of them.
using MembersAhead = std::function<void(JsonCursor&, const CallSink&)>;

void read_data(JsonCursor& cur, const CallSink& on_call, const MembersAhead& ahead) {
  if (cur.peek() != '{') cur.fail("data: expected an object, got " + next_value_kind(cur));
  RecordParser parser(cur);
  std::string name;
  // One record, refilled for every call: its lists keep their storage (a sink that keeps a record
  // moves it away, and the next one starts empty).
  CallRecord rec;
  cur.begin_object();
  if (ahead) ahead(cur, on_call);
  while (cur.next_key(name)) {
    read_member(cur, parser, name, rec);
    on_call(std::move(rec));
  }
}

std::string header_string(JsonCursor& cur, const char* key) {
  if (cur.peek() != '"')
    cur.fail(std::string(key) + ": expected a string, got " + next_value_kind(cur));
  return cur.read_string();
}

DumpHeader read_dump_with(JsonCursor& cur, const std::string& source, const CallSink& on_call,
                          const MembersAhead& ahead) {
  DumpHeader header;
  try {
    if (cur.at_end()) cur.fail("empty file, expected a dump.json object");
    if (cur.peek() != '{') cur.fail("expected an object, got " + next_value_kind(cur));
    bool saw_data = false;
    std::string key;
    cur.begin_object();
    while (cur.next_key(key)) {
      if (key == "data"sv) {
        read_data(cur, on_call, ahead);
        saw_data = true;
      } else if (key == "task"sv) {
        header.task = header_string(cur, "task");
      } else if (key == "level"sv) {
        header.level = header_string(cur, "level");
      } else if (key == "framework" && cur.peek() == '"') {
        header.framework = cur.read_string();
      } else if (key == "dump_data_dir" && cur.peek() == '"') {
        header.dump_data_dir = cur.read_string();
      } else {
        cur.skip_value();
      }
    }
    if (!cur.at_end()) cur.fail("unexpected content after the top-level object");
    if (!saw_data) cur.fail_at(0, "no \"data\" object: not a dump.json");
  } catch (const JsonSyntaxError& e) {
    const TextPosition p = cur.position(e.offset());
    throw DumpError(source + ":" + std::to_string(p.line) + ":" + std::to_string(p.column) + ": " +
                    e.what());
  }
  return header;
}

}  // namespace

DumpHeader read_dump(JsonCursor& cur, const std::string& source, const CallSink& on_call) {
  return read_dump_with(cur, source, on_call, nullptr);
}

DumpHeader read_dump(std::string_view text, const std::string& source, const CallSink& on_call) {
  JsonCursor cur(text);
  return read_dump(cur, source, on_call);
}

DumpHeader read_dump_file(const std::string& path, const CallSink& on_call,
                          const ParallelOptions& parallel) {
  try {
    InputFile file(path);
    JsonCursor cur([&file](char* buf, size_t n) { return file.read(buf, n); });
    return read_dump_with(cur, path, on_call, [&](JsonCursor& at_data, const CallSink& sink) {
      read_members_in_parallel(file, at_data, parse_members, sink, parallel);
    });
  } catch (const FileError& e) {
    throw DumpError(e.what());
  }
}

}  // namespace msprobe
