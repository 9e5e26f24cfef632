#pragma once

#include <stdexcept>
#include <string>

namespace msprobe {

// "<path>: cannot read: <reason>"
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The whole file; a directory, a missing file or a read error is a FileError.
std::string read_text_file(const std::string& path);

}  // namespace msprobe
