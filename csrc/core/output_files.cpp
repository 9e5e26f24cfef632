#include "core/output_files.h"

#include "core/crc32.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace msprobe {

void fail_write(const std::string& path, const char* what) {
  throw WriteError(path + ": " + what + ": " + std::strerror(errno));
}

namespace {

std::atomic<long long> g_write_budget{-1};

// Whether `n` more bytes may be written under the testing budget.
bool within_write_budget(size_t n) {
  long long left = g_write_budget.load();
  while (left >= 0) {
    if (static_cast<long long>(n) > left) return false;
    if (g_write_budget.compare_exchange_weak(left, left - static_cast<long long>(n))) break;
  }
  return true;
}

}  // namespace

void set_write_budget_for_testing(long long bytes) {
  g_write_budget = bytes;
}

void remove_empty_folders(const std::string& folder, const std::string& root) {
  std::string path = folder;
  while (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/' && rmdir(path.c_str()) == 0) {
    path.erase(path.rfind('/'));
  }
}

void make_dirs(const std::string& path, const std::string& trusted_root) {
  if (path.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    struct stat link {};
    if (!trusted_root.empty() && partial.size() > trusted_root.size() &&
        partial.compare(0, trusted_root.size(), trusted_root) == 0 &&
        lstat(partial.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      // Where the dump makes a folder, a link someone planted would send it elsewhere.
      throw WriteError(partial +
                       ": is a symbolic link; refused (dump folders are made, not followed)");
    }
    if (mkdir(partial.c_str(), 0750) == 0) {
      chmod(partial.c_str(), 0750);  // whatever the umask: the folders a dump is allowed
    } else if (errno != EEXIST) {
      fail_write(partial, "cannot create folder");
    }
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    fail_write(path, "cannot create folder");
  }
}

namespace {

// Writes all of `text` to `fd`; false (errno set) on failure.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = within_write_budget(text.size() - done)
                          ? write(fd, text.data() + done, text.size() - done)
                          : (errno = ENOSPC, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  // A unique name created exclusively (mkstemp: O_CREAT | O_EXCL), so nothing planted under a
  // predictable name, a symlink say, is ever opened or followed.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) fail_write(tmp, "cannot write");
  fchmod(fd, 0640);  // the umask must not widen or narrow what a dump is allowed
  if (!write_all(fd, text)) {
    const int saved = errno;
    close(fd);
    unlink(tmp.c_str());
    errno = saved;
    fail_write(path, "cannot write");
  }
  if (close(fd) != 0) {
    unlink(tmp.c_str());
    fail_write(path, "cannot write");
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    unlink(tmp.c_str());
    errno = saved;
    fail_write(path, "cannot write");
  }
}

namespace {

// Puts `header` at `path` unless a file is there already. The header is written to a temporary
// first and linked into place: link() fails when the name exists, so exactly one process's header
// appears, and whole, before anyone can append to it.
void create_with_header(const std::string& path, const std::string& header) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) fail_write(tmp, "cannot write");
  fchmod(fd, 0640);
  const bool written = write_all(fd, header);
  int saved = errno;
  const bool closed = close(fd) == 0;
  if (written) saved = errno;
  const bool linked =
      written && closed && (link(tmp.c_str(), path.c_str()) == 0 || errno == EEXIST);
  if (written && closed) saved = errno;
  unlink(tmp.c_str());
  errno = saved;
  if (!linked) fail_write(path, "cannot write");
}

}  // namespace

void append_to_shared_file(const std::string& path, const std::string& header,
                           const std::string& text) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) create_with_header(path, header);
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fail_write(path, "cannot write");
  const bool written = write_all(fd, text);
  const int saved = errno;
  if (close(fd) != 0 || !written) {
    if (!written) errno = saved;
    fail_write(path, "cannot write");
  }
}

std::string safe_file_stem(const std::string& stem) {
  std::string out = stem;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\' || u < 0x20 || u == 0x7f) c = '_';
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  constexpr size_t kMax = 200;  // room for ".pt" and a temporary's suffix within NAME_MAX
  if (out.size() > kMax) {
    size_t cut = kMax - 9;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
    out = out.substr(0, cut) + "~" + crc32_hex(crc32(stem.data(), stem.size()));
  }
  return out;
}

std::string FileNames::claim(const std::string& stem) {
  return claim_all({stem}).front();
}

std::vector<std::string> FileNames::claim_all(const std::vector<std::string>& stems) {
  std::vector<std::string> names;
  names.reserve(stems.size());
  for (const std::string& stem : stems) names.push_back(safe_file_stem(stem));
  std::lock_guard<std::mutex> lock(mu_);
  if (step_.moved_on()) used_.clear();
  for (std::string& name : names) {
    const std::string safe = name;
    for (int n = 2; !used_.insert(name).second; ++n) name = safe + "~" + std::to_string(n);
  }
  return names;
}

void FileNames::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  used_.clear();
}

void FileNames::set_dir(std::string dir) {
  std::lock_guard<std::mutex> lock(mu_);
  dir_ = std::move(dir);
}

std::string FileNames::dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dir_;
}

bool is_temporary_name(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return false;
  const std::string suffix = name.substr(at + 5);
  bool alnum = !suffix.empty(), digits = !suffix.empty();
  for (char c : suffix) {
    alnum = alnum && std::isalnum(static_cast<unsigned char>(c));
    digits = digits && std::isdigit(static_cast<unsigned char>(c));
  }
  return (alnum && suffix.size() == 6) || (digits && suffix.size() <= 10);
}

size_t remove_stale_temporaries(const std::string& root) {
  namespace fs = std::filesystem;
  size_t removed = 0;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(root, ec))) return 0;
  // Not following links: a folder a link points to is not ours to clean.
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (ec || fs::is_directory(st)) continue;
    if (is_temporary_name(it->path().filename().string()) && fs::remove(it->path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace msprobe
