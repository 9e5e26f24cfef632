// libFuzzer target: ignore-rules files come from users (overflow_check.rules, --rules), so any
// bytes must end in rules or a RulesError, never a crash or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/rules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    msprobe::RuleSet rules;
    rules.add_yaml(text, "rules.yaml");
    // Look-ups touch every stored rule's key.
    (void)rules.find("torch.empty");
  } catch (const msprobe::RulesError&) {
    // The expected rejection of a bad file; anything else escapes and is a finding.
  }
  return 0;
}
