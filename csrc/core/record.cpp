#include "core/record.h"

#include <cctype>

namespace msprobe {

namespace {

// Position of the dot-separated segment `kSeg` ("backward" or "forward"): last for API names,
// second to last for module names (whose counter comes last). Any other place is part of a user's
// module name.
size_t segment(const std::string& name, const std::string& kSeg) {
  const size_t last_dot = name.rfind('.');
  if (last_dot == std::string::npos) return std::string::npos;
  if (name.compare(last_dot + 1, std::string::npos, kSeg) == 0) return last_dot + 1;
  if (last_dot < kSeg.size() + 1) return std::string::npos;
  const size_t start = last_dot - kSeg.size();
  if (name.compare(start, kSeg.size(), kSeg) == 0 && name[start - 1] == '.') return start;
  return std::string::npos;
}

size_t backward_segment(const std::string& name) {
  static const std::string kSeg = "backward";
  return segment(name, kSeg);
}

constexpr const char kModulePrefix[] = "Module.";

}  // namespace

bool is_module_name(const std::string& call_name) {
  return call_name.rfind(kModulePrefix, 0) == 0;
}

std::string module_name_base(const std::string& qualname, const std::string& class_name) {
  return kModulePrefix + (qualname.empty() ? class_name : qualname + "." + class_name);
}

std::string rank_label(int rank) {
  return rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "";
}

std::string rank_folder(int rank) {
  return rank < 0 ? std::string("rank") : "rank" + std::to_string(rank);
}

std::string step_part(int64_t step) {
  return "step" + std::to_string(step);
}

std::string step_folder(int64_t step, int rank) {
  return step_part(step) + "/" + rank_folder(rank);
}

bool is_backward_name(const std::string& call_name) {
  return backward_segment(call_name) != std::string::npos;
}

std::string forward_name_of(const std::string& call_name) {
  const size_t at = backward_segment(call_name);
  if (at == std::string::npos) return "";
  std::string out = call_name;
  out.replace(at, 8, "forward");
  return out;
}

std::string backward_name_of(const std::string& call_name) {
  static const std::string kSeg = "forward";
  const size_t at = segment(call_name, kSeg);
  if (at == std::string::npos) return "";
  std::string out = call_name;
  out.replace(at, kSeg.size(), "backward");
  return out;
}

std::string torch_api_name(const std::string& call_name) {
  bool blank = true;
  for (char c : call_name) blank = blank && std::isspace(static_cast<unsigned char>(c));
  if (blank) return "";
  size_t end = call_name.find('.');
  if (end != std::string::npos) end = call_name.find('.', end + 1);
  std::string out = call_name.substr(0, end);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

std::vector<std::string> dotted_parts(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    parts.push_back(name.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

}  // namespace

std::optional<CallName> parse_call_name(const std::string& call_name) {
  const std::vector<std::string> parts = dotted_parts(call_name);
  if (parts.size() < 4) return std::nullopt;
  const std::string& last = parts[parts.size() - 1];
  const std::string& before = parts[parts.size() - 2];
  const bool counter_last = all_digits(last);  // a module call: "...forward.0"
  const std::string& counter = counter_last ? last : before;
  const std::string& direction = counter_last ? before : last;
  if (!all_digits(counter) || counter.size() > 18 ||
      (direction != "forward" && direction != "backward")) {
    return std::nullopt;
  }
  CallName out;
  out.section = parts[0];
  for (size_t i = 1; i + 2 < parts.size(); ++i) out.api += (i > 1 ? "." : "") + parts[i];
  out.index = std::stoll(counter);
  out.backward = direction == "backward";
  return out;
}

std::string call_site_name(const std::string& call_name) {
  std::string site;
  for (const std::string& part : dotted_parts(call_name)) {
    if (!all_digits(part)) site += (site.empty() ? "" : ".") + part;
  }
  return site;
}

const char* inputs_key(bool uses_input_key) {
  return uses_input_key ? "input" : "input_args";
}

std::string ArgPos::label() const {
  switch (side) {
    case Side::Input:
      return std::string(inputs_key(uses_input_key)) + "[" + std::to_string(index) + "]";
    case Side::Kwarg:
      return *key;
    case Side::Output:
      break;
  }
  return "output[" + std::to_string(index) + "]";
}

std::string module_qualname(const std::string& call_name) {
  if (!is_module_name(call_name)) return "";
  size_t end = call_name.size();
  for (int i = 0; i < 3 && end != std::string::npos; ++i) end = call_name.rfind('.', end - 1);
  if (end == std::string::npos || end < 7) return "";
  return call_name.substr(7, end - 7);
}

void drop_entries(CallRecord& rec) {
  rec.inputs.clear();
  rec.kwargs.clear();
  rec.outputs.clear();
  rec.parameters.clear();
}

}  // namespace msprobe
