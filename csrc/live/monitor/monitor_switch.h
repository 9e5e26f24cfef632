// dynamic_on (issue 55): msprobe 26.2.0's dynamic monitoring (module_hook.py dynamic_monitor,
// _remove_all_hooks_final). With DYNAMIC_MONITOR=true in the environment, TrainerMon watches
// nothing until its config file says `dynamic_on: true`. The file is read again after each
// optimizer step in which it changed (its modification time); a valid config with dynamic_on
// runs from the next step, for its collect_times steps, and then dynamic_on is written back
// false. This class owns the file's side: when to read it, whether to switch, the write-back.
// python/msprobe_cpp/monitor.py starts and stops the monitor it says.
#pragma once

#include <filesystem>
#include <string>

namespace msprobe {

class MonitorSwitch {
 public:
  // The config is validated now, as msprobe validates it when TrainerMon is made (ConfigError).
  MonitorSwitch(std::string config_path, std::string output_root);

  // After an optimizer step: whether the file changed since it was last read and now holds a
  // valid config with dynamic_on true (then a monitor of that config starts at the next step).
  // A changed file that cannot be used is said, with why, and changes nothing.
  bool poll();
  // The monitor wrote its collect_times steps: dynamic_on is set false in the file (its other
  // keys kept), so that the user turns it on again by editing it. A failure is said.
  void finish();

 private:
  const std::string path_;
  const std::string output_root_;
  std::filesystem::file_time_type read_at_{};  // the modification time last read
  bool read_ = false;                          // msprobe reads the file after the first step
};

}  // namespace msprobe
