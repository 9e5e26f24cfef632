#include "core/spilled_report.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "core/overflow_facts.h"

namespace msprobe {

namespace {

constexpr size_t kChunk = 1 << 16;

}  // namespace

SpillFile::SpillFile() : file_(std::tmpfile(), &std::fclose) {
  if (!file_) {
    throw std::runtime_error(std::string("cannot make a temporary file for the report: ") +
                             std::strerror(errno));
  }
}

void SpillFile::append(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size()) {
    throw std::runtime_error(std::string("cannot write the report's temporary file: ") +
                             std::strerror(errno));
  }
  ++count;
}

void SpillFile::rewind_for_reading() {
  if (std::fflush(file_.get()) != 0 || std::fseek(file_.get(), 0, SEEK_SET) != 0) {
    throw std::runtime_error(std::string("cannot read the report's temporary file back: ") +
                             std::strerror(errno));
  }
}

size_t SpillFile::read_chunk(std::string& chunk) {
  chunk.resize(kChunk);
  const size_t n = std::fread(chunk.data(), 1, kChunk, file_.get());
  chunk.resize(n);
  if (n == 0 && std::ferror(file_.get())) {
    throw std::runtime_error("cannot read the report's temporary file back");
  }
  return n;
}

void SpilledReport::add(const Finding& f) {
  // The report object's arrays are one level in, their members two.
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

bool SpilledReport::fails(Severity fail_on) const {
  for (Severity s : {Severity::Critical, Severity::High, Severity::Medium}) {
    if (static_cast<int>(s) >= static_cast<int>(fail_on) && names_[static_cast<int>(s)].count > 0)
      return true;
  }
  return false;
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
