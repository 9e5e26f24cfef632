#include "core/stack_sources.h"

#include <stdexcept>
#include <vector>

#include "core/json_cursor.h"
#include "core/text_file.h"

namespace msprobe {

namespace {

// A path inside torch, msprobe or msprobe_cpp: the frames between the user's line and the hook.
bool tool_or_torch_path(const std::string& file) {
  for (const char* part : {"torch/", "msprobe/", "msprobe_cpp/"}) {
    const std::string p = part;
    size_t at = file.find(p);
    while (at != std::string::npos) {
      if (at == 0 || file[at - 1] == '/' || file[at - 1] == '>') return true;
      at = file.find(p, at + 1);
    }
  }
  return false;
}

std::string trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\n") - first + 1);
}

}  // namespace

std::string user_source_of_frame(const std::string& frame) {
  static const std::string kFile = "File ";
  static const std::string kLine = ", line ";
  if (frame.rfind(kFile, 0) != 0) return "";
  const size_t line_at = frame.find(kLine);
  if (line_at == std::string::npos) return "";
  const std::string file = frame.substr(kFile.size(), line_at - kFile.size());
  if (tool_or_torch_path(file)) return "";
  const size_t digits = line_at + kLine.size();
  size_t end = digits;
  while (end < frame.size() && frame[end] >= '0' && frame[end] <= '9') ++end;
  if (end == digits) return "";
  std::string out = file + ":" + frame.substr(digits, end - digits);
  const size_t newline = frame.find('\n', end);
  const std::string code = newline == std::string::npos ? "" : trim(frame.substr(newline + 1));
  if (!code.empty()) out += ": " + code;
  return out;
}

namespace {

// The first user frame's source line of a list of frames (the cursor at its '[').
std::string source_of_frames(JsonCursor& cur) {
  std::string source;
  cur.begin_array();
  while (cur.next_item()) {
    if (cur.peek() != '"') {
      cur.skip_value();
      continue;
    }
    const std::string frame = cur.read_string();
    if (source.empty()) source = user_source_of_frame(frame);
  }
  return source;
}

bool is_group_key(const std::string& key) {
  return !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
}

// msprobe 26.x's group, "<n>": [[names], [frames]] (the cursor at its first '['): the source of
// its frames for each of its names in `calls`.
void read_group(JsonCursor& cur, const std::unordered_set<std::string>& calls,
                std::unordered_map<std::string, std::string>& out) {
  std::vector<std::string> names;
  cur.begin_array();
  for (int part = 0; cur.next_item(); ++part) {
    if (part > 1 || cur.peek() != '[') {
      cur.skip_value();
    } else if (part == 0) {
      cur.begin_array();
      while (cur.next_item()) {
        if (cur.peek() != '"') {
          cur.skip_value();
          continue;
        }
        std::string name = cur.read_string();
        if (calls.count(name)) names.push_back(std::move(name));
      }
    } else {
      const std::string source = source_of_frames(cur);
      if (!source.empty()) {
        for (const std::string& name : names) out[name] = source;
      }
    }
  }
}

}  // namespace

std::unordered_map<std::string, std::string> read_stack_sources(
    const std::string& path, const std::unordered_set<std::string>& calls) {
  std::unordered_map<std::string, std::string> out;
  if (calls.empty()) return out;
  try {
    InputFile file(path);
    JsonCursor cur([&file](char* buf, size_t n) { return file.read(buf, n); });
    if (cur.peek() != '{') return out;
    std::string name;
    cur.begin_object();
    while (cur.next_key(name)) {
      // 1.1.x: {name: [frames]}; 26.x: {"<n>": [[names], [frames]]}.
      if (is_group_key(name) && cur.peek() == '[') {
        read_group(cur, calls, out);
        continue;
      }
      if (!calls.count(name) || cur.peek() != '[') {
        cur.skip_value();
        continue;
      }
      std::string source = source_of_frames(cur);
      if (!source.empty()) out[name] = std::move(source);
    }
  } catch (const std::exception&) {
    // What was read before the damage stays.
  }
  return out;
}

}  // namespace msprobe
