#include "core/monitor_names.h"

namespace msprobe {
namespace {

// The part of `name` after its last '.' that is followed by a word beginning `head` and then
// `tail` (tail "" : anything), as `^.*\.(<head>...)` finds it: its greedy start takes the last.
std::optional<std::string> last_part(const std::string& name, const std::string& head,
                                     const std::vector<std::string>& tails) {
  for (size_t dot = name.rfind('.'); dot != std::string::npos;
       dot = dot == 0 ? std::string::npos : name.rfind('.', dot - 1)) {
    const std::string rest = name.substr(dot + 1);
    if (rest.compare(0, head.size(), head) != 0) continue;
    for (const std::string& tail : tails) {
      if (rest.compare(head.size(), tail.size(), tail) == 0) return rest;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string monitor_squash_name(const std::string& name) {
  // In msprobe's order: the first pattern that matches anywhere wins.
  if (auto p = last_part(name, "layer", {".", "s."})) return *p;
  if (auto p = last_part(name, "embedding", {".", "s."})) return *p;
  for (const char* head : {"final", "output", "norm"}) {
    if (auto p = last_part(name, head, {""})) return *p;
  }
  return name;
}

MonitorNames::MonitorNames(std::vector<std::string> targets, bool squash, bool all_xy)
    : targets_(std::move(targets)), squash_(squash), all_xy_(all_xy) {}

std::string MonitorNames::target_of(int vpp, const std::string& target) const {
  // A target without a chunk is every chunk's ("fc1" is "0:fc1" in chunk 0).
  return target.find(':') == std::string::npos ? std::to_string(vpp) + ":" + target : target;
}

std::optional<std::string> MonitorNames::parameter(int vpp, const std::string& name) {
  const std::string chunk = std::to_string(vpp) + ":";
  const std::string squashed = chunk + (squash_ ? monitor_squash_name(name) : name);
  bool taken = targets_.empty();
  // msprobe matches parameters before it gives chunkless targets their chunk (so "fc1" takes
  // "fc1.weight", and a squashed name only a target written with its chunk).
  for (const std::string& t : targets_) {
    const auto starts = [&t](const std::string& s) { return s.compare(0, t.size(), t) == 0; };
    taken = taken || starts(name) || starts(squashed) || starts(chunk + name);
  }
  if (!taken) return std::nullopt;
  // Two parameters squashed to one name: the second keeps its own.
  const std::string tag = taken_.count(squashed) ? chunk + name : squashed;
  taken_.insert(tag);
  return tag;
}

std::optional<std::string> MonitorNames::module(int vpp, const std::string& name) const {
  const std::string chunk = std::to_string(vpp) + ":";
  const std::string squashed = chunk + (squash_ ? monitor_squash_name(name) : name);
  if (all_xy_ || targets_.empty()) return squashed;
  for (const std::string& target : targets_) {
    const std::string t = target_of(vpp, target);
    if (t == squashed) return squashed;
    if (t == chunk + name) return chunk + name;
  }
  return std::nullopt;
}

}  // namespace msprobe
