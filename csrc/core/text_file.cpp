#include "core/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

std::string read_text_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw FileError(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw FileError(path, "is a directory");
  if (!S_ISREG(st.st_mode) && !handed_over(path)) {
    throw FileError(path, S_ISFIFO(st.st_mode)   ? "is a FIFO (named pipe), not a regular file"
                          : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file"
                                                 : "is a device, not a regular file");
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path, std::strerror(errno));
  // Read to the end rather than trusting the size stat() reported: a pipe reports none, and a
  // file may grow or shrink while it is read.
  std::string text;
  if (S_ISREG(st.st_mode)) text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      close(fd);
      throw FileError(path, std::strerror(saved));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

}  // namespace msprobe
