#include "cli/stop_replays.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

namespace msprobe {

namespace {

std::string string_at(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::optional<LiveStop> read_live_stop(const std::string& dump_file) {
  const auto path = std::filesystem::path(dump_file).parent_path() / "overflow_report.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  // A report with NaN/Infinity tokens elsewhere does not parse as strict JSON: none then.
  const auto doc = nlohmann::json::parse(std::istreambuf_iterator<char>(in), {}, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  const auto first = doc.find("first_anomaly");
  if (first == doc.end() || !first->is_object()) return std::nullopt;
  LiveStop stop;
  stop.json = first->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  stop.call = string_at(*first, "api_name");
  stop.origin = string_at(*first, "origin");
  stop.parameter = string_at(*first, "parameter");
  stop.note = string_at(*first, "note");
  const auto absorbed = first->find("absorbed");
  stop.absorbed = absorbed != first->end() && absorbed->is_boolean() && absorbed->get<bool>();
  if (const auto replay = first->find("replay"); replay != first->end() && replay->is_array()) {
    for (const auto& r : *replay) {
      if (r.is_object()) stop.replay_lines.push_back(string_at(r, "verdict"));
    }
  }
  if (std::string why = string_at(*first, "not_replayed"); !why.empty()) {
    stop.replay_lines.push_back(std::move(why));
  }
  return stop;
}

}  // namespace msprobe
