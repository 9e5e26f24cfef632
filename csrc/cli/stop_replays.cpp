#include "cli/stop_replays.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/fact_fields_read.h"
#include "core/overflow_facts.h"

namespace msprobe {

namespace {

// The stop's fields the text report shows, read by the keys of the one field list that wrote
// them (core/overflow_facts.cpp): each found by the attribute it has on OverflowError.
const std::vector<MemberField<LiveStop>>& live_stop_members() {
  static const std::vector<MemberField<LiveStop>> table = {
      {report_key("call"), nullptr, &LiveStop::call},
      {report_key("origin"), nullptr, &LiveStop::origin},
      {report_key("parameter"), nullptr, &LiveStop::parameter},
      {report_key("note"), nullptr, &LiveStop::note},
      {report_key("absorbed"), nullptr, &LiveStop::absorbed},
      {report_key("not_replayed"), nullptr, &LiveStop::not_replayed},
  };
  return table;
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
  LiveStop stop = read_json(live_stop_members(), *first);
  stop.json = first->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (const auto replay = first->find(report_key("replay"));
      replay != first->end() && replay->is_array()) {
    for (const auto& r : *replay) {
      if (r.is_object()) stop.replay_lines.push_back(read_json(replay_members(), r).verdict);
    }
  }
  if (!stop.not_replayed.empty()) stop.replay_lines.push_back(stop.not_replayed);
  const auto level = first->find(report_key("level"));
  for (Severity s : {Severity::Critical, Severity::High, Severity::Medium}) {
    if (level != first->end() && level->is_string() && *level == to_string(s)) stop.level = s;
  }
  // overflow_facts.cpp writes "held" only when true, and "caught" beside it (null: never caught).
  const auto held = first->find("held");
  const auto caught = first->find("caught");
  stop.held_without_damage = held != first->end() && held->is_boolean() && held->get<bool>() &&
                             (caught == first->end() || caught->is_null());
  return stop;
}

bool live_stop_fails(const std::optional<LiveStop>& stop, Severity fail_on) {
  if (!stop || stop->absorbed || stop->held_without_damage) return false;
  return stop->level && static_cast<int>(*stop->level) >= static_cast<int>(fail_on);
}

}  // namespace msprobe
