#include "live/monitor/monitor_switch.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <system_error>

#include "core/config.h"
#include "core/config_error.h"
#include "live/log/tool_log.h"

namespace msprobe {

MonitorSwitch::MonitorSwitch(std::string config_path, std::string output_root)
    : path_(std::move(config_path)), output_root_(std::move(output_root)) {
  load_monitor_config_file(path_, output_root_);
  say_warning("DYNAMIC_MONITOR is set, please make sure you have 'dynamic_on' and "
              "'collect_times' in " + path_);
}

bool MonitorSwitch::poll() {
  std::error_code ec;
  const auto modified = std::filesystem::last_write_time(path_, ec);
  if (ec) {
    say(LogLevel::Error, path_ + ": cannot read the monitor's config: " + ec.message() +
                             "; not updated");
    return false;
  }
  if (read_ && modified == read_at_) return false;  // unchanged: not read again
  read_ = true;
  read_at_ = modified;
  try {
    const Config config = load_monitor_config_file(path_, output_root_);
    if (!config.monitor.schedule.dynamic_on) return false;
  } catch (const ConfigError& e) {
    say(LogLevel::Error, std::string(e.what()) + "\n(the monitor's config is not updated)");
    return false;
  }
  say_warning(path_ + ": dynamic_on: the monitor starts at the next step with this config");
  return true;
}

void MonitorSwitch::finish() {
  try {
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text.str());
    doc["dynamic_on"] = false;
    const std::string part = path_ + ".part";
    {
      std::ofstream out(part, std::ios::trunc | std::ios::binary);
      out << doc.dump(2);
      out.flush();
      if (!out) throw std::runtime_error("cannot write " + part);
    }
    std::filesystem::rename(part, path_);
    read_at_ = std::filesystem::last_write_time(path_);  // its own write switches nothing
    say(LogLevel::Info, "Finish monitor, set " + path_ +
                            " dynamic_on=false; set it true again to restart the monitor");
  } catch (const std::exception& e) {
    say_warning("Finish monitor, setting dynamic_on=false in " + path_ + " failed: " + e.what());
  }
}

}  // namespace msprobe
