#pragma once

#include <cstddef>
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

// A file opened for reading from its start to its end. A directory, a missing file, or a FIFO,
// socket or device found on disk (which would block forever or never end) is a FileError; a
// pipe the shell handed over (`/dev/stdin`, `<(...)`) is read to its end.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Up to `n` bytes; 0 at the end. A read error is a FileError.
  size_t read(char* buf, size_t n);
  // Up to `n` bytes from `offset` on, whatever read() has reached; 0 at the end.
  size_t read_at(char* buf, size_t n, size_t offset);
  // The size a regular file reported when opened; 0 for a pipe.
  size_t size_hint() const { return size_hint_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  size_t size_hint_ = 0;
};

// The whole file, read as InputFile reads it.
std::string read_text_file(const std::string& path);

// 1-based line and column in a text, the column counted in characters (UTF-8), not bytes: what
// every message that points into a file says.
struct TextPosition {
  size_t line = 1;
  size_t column = 1;

  // Moves past the bytes [first, last).
  void advance(const char* first, const char* last);
};

}  // namespace msprobe
