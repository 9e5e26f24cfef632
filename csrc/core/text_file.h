#pragma once

#include <stdexcept>
#include <string>

namespace msprobe {

// "<path>: cannot read: <reason>"
class FileError : public std::runtime_error {
 public:
  FileError(const std::string& path, const std::string& reason)
      : std::runtime_error(path + ": cannot read: " + reason), reason_(reason) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// The whole file; a directory, a missing file or a read error is a FileError.
std::string read_text_file(const std::string& path);

}  // namespace msprobe
