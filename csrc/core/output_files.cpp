#include "core/output_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace msprobe {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what) {
  throw WriteError(path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

void make_dirs(const std::string& path) {
  if (path.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0750) != 0 && errno != EEXIST) fail(partial, "cannot create folder");
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    fail(path, "cannot create folder");
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) fail(tmp, "cannot write");
  fchmod(fd, 0640);  // the umask must not widen or narrow what a dump is allowed
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      close(fd);
      unlink(tmp.c_str());
      errno = saved;
      fail(path, "cannot write");
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    unlink(tmp.c_str());
    fail(path, "cannot write");
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    unlink(tmp.c_str());
    errno = saved;
    fail(path, "cannot write");
  }
}

}  // namespace msprobe
