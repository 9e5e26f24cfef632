// msprobe 26.x's dump_enable (docs/config.md): where config.json has the key, the run reads the
// file again as it goes on, and its dump_enable turns the dump on and off. The file is looked at
// when the debugger's start(), stop() or step() runs, at most every 0.5 s while the dump is on
// and every 3 s while it is off (26.2.0's intervals), and re-read when its modification time or
// size changed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace msprobe {

class ConfigWatch {
 public:
  // `path`: the config file (made absolute: the script may change directory); `overrides`: the
  // keyword arguments, which keep winning; `enabled`: the file's dump_enable at the start.
  ConfigWatch(const std::string& path, nlohmann::json overrides, bool enabled);

  bool enabled() const { return enabled_; }

  // Looks at the file if due at `now_s` (a monotonic clock, in seconds). Returns what to say
  // when something changed ("" otherwise): a file that no longer reads as a valid config turns
  // the dump off (26.x's "fail close"); a change besides dump_enable is not applied here (it
  // takes a new run).
  std::string poll(double now_s);

 private:
  struct Signature {
    int64_t mtime_ns = -1;
    int64_t size = -1;
    bool operator==(const Signature& o) const { return mtime_ns == o.mtime_ns && size == o.size; }
  };
  static Signature signature_of(const std::string& path);
  // The config without dump_enable: what must stay as it was.
  static nlohmann::json rest_of(nlohmann::json doc);

  std::string path_;
  nlohmann::json overrides_;
  nlohmann::json rest_;  // at the start
  bool enabled_;
  Signature last_;
  double last_look_s_ = -1e300;
  bool said_rest_ = false;
};

}  // namespace msprobe
