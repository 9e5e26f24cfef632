#include "core/config_watch.h"

#include <sys/stat.h>

#include <filesystem>

#include "core/config.h"
#include "core/text_file.h"

namespace msprobe {

namespace {
constexpr double kEnabledInterval = 0.5;
constexpr double kDisabledInterval = 3.0;
}  // namespace

ConfigWatch::ConfigWatch(const std::string& path, nlohmann::json overrides, bool enabled)
    : overrides_(std::move(overrides)), enabled_(enabled) {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(path, ec);
  path_ = ec ? path : absolute.string();
  last_ = signature_of(path_);
  try {
    rest_ = rest_of(nlohmann::json::parse(read_text_file(path_)));
  } catch (const std::exception&) {
    rest_ = nlohmann::json();  // read once already: a later reading decides
  }
}

ConfigWatch::Signature ConfigWatch::signature_of(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return Signature{};
  return Signature{static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                   static_cast<int64_t>(st.st_size)};
}

nlohmann::json ConfigWatch::rest_of(nlohmann::json doc) {
  if (doc.is_object()) doc.erase("dump_enable");
  return doc;
}

std::string ConfigWatch::poll(double now_s) {
  if (now_s - last_look_s_ < (enabled_ ? kEnabledInterval : kDisabledInterval)) return "";
  last_look_s_ = now_s;
  const Signature now = signature_of(path_);
  if (now == last_) return "";
  last_ = now;
  const bool was = enabled_;
  nlohmann::json doc;
  try {
    // The whole config must still be valid, as 26.x parses it whole.
    load_config_file(path_, overrides_);
    doc = nlohmann::json::parse(read_text_file(path_));
  } catch (const std::exception& e) {
    enabled_ = false;
    return std::string("config.json re-read: the dump is off until the file is valid again: ") +
           e.what();
  }
  const auto key = doc.find("dump_enable");
  if (key != doc.end() && key->is_boolean()) enabled_ = key->get<bool>();
  std::string said;
  if (enabled_ != was) said = std::string("config.json re-read: dump_enable is ") +
                              (enabled_ ? "true: the dump is on" : "false: the dump is off");
  if (rest_of(doc) != rest_ && !said_rest_) {
    said_rest_ = true;
    said += std::string(said.empty() ? "" : "; ") +
            "config.json re-read: only dump_enable is taken while the run goes on; its other "
            "changes take a new run";
  }
  return said;
}

}  // namespace msprobe
