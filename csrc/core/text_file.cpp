#include "core/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace msprobe {

namespace {

// A pipe or terminal the shell handed over (`check /dev/stdin`, `--rules <(...)`), as opposed to a
// FIFO or device found on disk, which would block forever or never end.
bool handed_over(const std::string& path) {
  return path == "/dev/stdin" || path.rfind("/dev/fd/", 0) == 0 ||
         path.rfind("/proc/self/fd/", 0) == 0;
}

}  // namespace

InputFile::InputFile(const std::string& path) : path_(path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw FileError(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw FileError(path, "is a directory");
  if (!S_ISREG(st.st_mode) && !handed_over(path)) {
    throw FileError(path, S_ISFIFO(st.st_mode)   ? "is a FIFO (named pipe), not a regular file"
                          : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file"
                                                 : "is a device, not a regular file");
  }
  fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw FileError(path, std::strerror(errno));
  if (S_ISREG(st.st_mode)) size_hint_ = static_cast<size_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) close(fd_);
}

size_t InputFile::read(char* buf, size_t n) {
  for (;;) {
    const ssize_t got = ::read(fd_, buf, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) throw FileError(path_, std::strerror(errno));
  }
}

size_t InputFile::read_at(char* buf, size_t n, size_t offset) {
  for (;;) {
    const ssize_t got = ::pread(fd_, buf, n, static_cast<off_t>(offset));
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) throw FileError(path_, std::strerror(errno));
  }
}

std::string read_text_file(const std::string& path) {
  InputFile file(path);
  // Read to the end rather than trusting the size stat() reported: a pipe reports none, and a
  // file may grow or shrink while it is read.
  std::string text;
  text.reserve(file.size_hint());
  char buf[1 << 16];
  while (const size_t n = file.read(buf, sizeof(buf))) text.append(buf, n);
  return text;
}

namespace {

// Byte counters summed in blocks of 255 let the compiler compare 32 or 64 bytes at a time;
// std::count widens every comparison to a 64-bit sum and runs at a quarter of that.
size_t count_newlines(const char* first, const char* last) {
  size_t total = 0;
  while (last - first >= 255) {
    uint8_t block = 0;
    for (int i = 0; i < 255; ++i) block += static_cast<uint8_t>(first[i] == '\n');
    total += block;
    first += 255;
  }
  for (; first != last; ++first) total += *first == '\n';
  return total;
}

}  // namespace

void TextPosition::advance(const char* first, const char* last) {
  // The reader discards every chunk through here: count lines in one vectorized pass, and columns
  // only on the last line.
  const auto newlines = count_newlines(first, last);
  const char* line_start = first;
  if (newlines > 0) {
    line += newlines;
    column = 1;
    line_start = last;
    while (line_start[-1] != '\n') --line_start;
  }
  for (const char* p = line_start; p != last; ++p) {
    if ((static_cast<unsigned char>(*p) & 0xC0) != 0x80) ++column;  // not a continuation byte
  }
}

}  // namespace msprobe
