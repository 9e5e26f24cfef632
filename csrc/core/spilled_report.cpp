#include "core/spilled_report.h"

#include "core/overflow_facts.h"

namespace msprobe {

void SpilledReport::add(const Finding& f) {
  // The report object's arrays are one level in, their members two.
  counts_.add(f.severity);
  SpillFile& names = names_[static_cast<int>(f.severity)];
  JsonWriter name = JsonWriter::member_at(indent_, depth_ + 2, names.count == 0);
  name.value_string(f.call);
  names.append(name.take());
  JsonWriter detail = JsonWriter::member_at(indent_, depth_ + 2, details_.count == 0);
  detail.begin_object();
  write_detail_fields(detail, f);
  detail.end_object();
  details_.append(detail.take());
}

void SpilledReport::write(JsonWriter& w, const std::function<void(const std::string&)>& sink) {
  auto copy = [&](SpillFile& spill) {
    spill.replay([&](const std::string& chunk) {
      w.raw_members(chunk);
      sink(w.take_chunk());
    });
  };
  w.begin_object();
  const std::pair<const char*, Severity> lists[] = {{"critical_apis", Severity::Critical},
                                                    {"high_priority_apis", Severity::High},
                                                    {"medium_priority_apis", Severity::Medium}};
  for (const auto& [key, severity] : lists) {
    w.key(key);
    w.begin_array();
    copy(names_[static_cast<int>(severity)]);
    w.end_array();
  }
  w.key("anomaly_details");
  w.begin_array();
  copy(details_);
  w.end_array();
  w.end_object();
  sink(w.take_chunk());
}

}  // namespace msprobe
