// libFuzzer target: config.json is user input, so any bytes must end in a Config or a
// ConfigError, never a crash or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    // A base folder makes relative rules paths go through the path joining as well.
    msprobe::parse_config_text(text, "config.json", nlohmann::json::object(), "/cfg");
  } catch (const msprobe::ConfigError&) {
    // The expected rejection of a bad file; anything else escapes and is a finding.
  }
  return 0;
}
