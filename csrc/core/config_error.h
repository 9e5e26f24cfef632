// The one error a rejected config value raises: a single line naming the file, the field path,
// the value and what is allowed.
#pragma once

#include <stdexcept>

namespace msprobe {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace msprobe
