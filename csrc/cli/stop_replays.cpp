#include "cli/stop_replays.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

namespace msprobe {

std::vector<std::string> stop_replay_lines(const std::string& dump_file) {
  std::vector<std::string> lines;
  const auto path = std::filesystem::path(dump_file).parent_path() / "overflow_report.json";
  std::ifstream in(path);
  if (!in) return lines;
  // A report with NaN/Infinity tokens elsewhere does not parse as strict JSON: no lines then.
  const auto doc = nlohmann::json::parse(std::istreambuf_iterator<char>(in), {}, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return lines;
  const auto first = doc.find("first_anomaly");
  if (first == doc.end() || !first->is_object()) return lines;
  if (const auto replay = first->find("replay"); replay != first->end() && replay->is_array()) {
    for (const auto& r : *replay) {
      if (r.is_object() && r.contains("verdict") && r["verdict"].is_string()) {
        lines.push_back(r["verdict"].get<std::string>());
      }
    }
  }
  if (const auto why = first->find("not_replayed"); why != first->end() && why->is_string()) {
    lines.push_back(why->get<std::string>());
  }
  return lines;
}

}  // namespace msprobe
