#include "core/streamed_report.h"

#include "core/report.h"

namespace msprobe {

namespace {

constexpr size_t kHeldBeforeSpill = 1 << 16;

}  // namespace

StreamedReport::StreamedReport(int indent, size_t depth)
    // A member of the report's lists sits two containers below the report: object, then array.
    : calls_{Members{JsonWriter::members_at(indent, depth + 2), nullptr},
             Members{JsonWriter::members_at(indent, depth + 2), nullptr},
             Members{JsonWriter::members_at(indent, depth + 2), nullptr}},
      details_{JsonWriter::members_at(indent, depth + 2), nullptr} {}

void StreamedReport::keep(Members& m) {
  m.any = true;
  if (m.writer.str().size() < kHeldBeforeSpill) return;
  if (!m.spill) m.spill = std::make_unique<SpillFile>();
  m.spill->append(m.writer.take_chunk());
}

void StreamedReport::add(const Finding& f) {
  counts_.add(f.severity);
  Members& calls = calls_[static_cast<int>(f.severity)];
  calls.writer.value_string(f.call);
  keep(calls);
  write_finding_detail(details_.writer, f);
  keep(details_);
}

void StreamedReport::hand_over(Members& m, JsonWriter& w,
                               const std::function<void(const std::string&)>& sink) {
  if (!m.any) return;
  sink(w.take_chunk());
  if (m.spill) m.spill->replay([&](const std::string& chunk) { sink(chunk); });
  sink(m.writer.take_chunk());
  w.members_written_apart();
}

void StreamedReport::write(JsonWriter& w, const std::function<void(const std::string&)>& sink,
                           const std::optional<std::string>& live_stop) {
  w.begin_object();
  for (const auto& [key, severity] : kReportLists) {
    w.key(key);
    w.begin_array();
    hand_over(calls_[static_cast<int>(severity)], w, sink);
    w.end_array();
  }
  w.key("anomaly_details");
  w.begin_array();
  hand_over(details_, w, sink);
  w.end_array();
  if (live_stop) {
    w.key("live_stop");
    w.value_raw(*live_stop);
  }
  w.end_object();
  sink(w.take_chunk());
}

}  // namespace msprobe
