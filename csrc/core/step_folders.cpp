#include "core/step_folders.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/output_files.h"

namespace msprobe {

namespace {

constexpr char kPrefix[] = ".msprobe_cpp_partial.";

std::string parent_of(const std::string& path) {
  return path.substr(0, path.rfind('/'));
}

}  // namespace

std::string staging_folder(const std::string& dump_root, const std::string& folder) {
  static std::atomic<unsigned long> written{0};
  const size_t slash = folder.find('/');
  const std::string step = folder.substr(0, slash), rank = folder.substr(slash + 1);
  // The pid and a count: two processes, or two writes of one step, never build in one folder.
  return dump_root + "/" + kPrefix + rank + "." + step + "." + std::to_string(getpid()) + "." +
         std::to_string(++written) + "/" + rank;
}

void publish_folder(const std::string& staged, const std::string& dump_root,
                    const std::string& folder) {
  const std::string wrapper = parent_of(staged);
  const std::string step_dir = dump_root + "/" + folder.substr(0, folder.find('/'));
  const std::string target = dump_root + "/" + folder;
  struct stat st {};
  if (lstat(step_dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // A link someone planted would send the rank folder elsewhere (make_dirs refuses it too).
    throw WriteError(step_dir +
                     ": is a symbolic link; refused (dump folders are made, not followed)");
  }
  // The step's first rank folder: step<S>/ appears with it, in one rename (which also replaces an
  // empty step<S>/). Another rank's, or an earlier write's, step<S>/ makes it fail.
  if (rename(wrapper.c_str(), step_dir.c_str()) == 0) return;
  if (errno != ENOTEMPTY && errno != EEXIST) fail_write(step_dir, "cannot publish the step folder");
  if (rename(staged.c_str(), target.c_str()) == 0) {
    rmdir(wrapper.c_str());
    return;
  }
  if (errno != ENOTEMPTY && errno != EEXIST) fail_write(target, "cannot publish the step folder");
  // Written before: swapped, so that at every moment one whole folder is in place. The old one
  // ends up where the new one was built and goes with the wrapper.
  if (renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) fail_write(target, "cannot publish the step folder");
    // A file system without the swap: the old folder steps aside first. A kill between the two
    // renames leaves this rank's folder absent (the old one is an orphan the next start()
    // removes): absent, still not incomplete.
    const std::string old = wrapper + "/old";
    if (rename(target.c_str(), old.c_str()) != 0) fail_write(target, "cannot publish the step folder");
    if (rename(staged.c_str(), target.c_str()) != 0) {
      const int saved = errno;
      rename(old.c_str(), target.c_str());
      errno = saved;
      fail_write(target, "cannot publish the step folder");
    }
  }
  discard_staging(staged);
}

void discard_staging(const std::string& staged) {
  std::error_code ec;
  std::filesystem::remove_all(parent_of(staged), ec);  // links inside are removed, not followed
}

void link_or_copy(const std::string& from, const std::string& to) {
  if (link(from.c_str(), to.c_str()) == 0 || errno == EEXIST) return;
  std::error_code ec;
  std::filesystem::copy_file(from, to, ec);
  if (ec) {
    errno = ec.value();
    fail_write(to, "cannot write");
  }
  chmod(to.c_str(), 0640);
}

bool is_unfinished_folder(const std::string& name, const std::string& rank) {
  const std::string prefix = kPrefix + rank + ".";
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0;
}

size_t remove_unfinished_folders(const std::string& dump_root, const std::string& rank) {
  namespace fs = std::filesystem;
  std::vector<fs::path> found;  // removed after the listing, which removal would disturb
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dump_root, ec)) {
    if (is_unfinished_folder(entry.path().filename().string(), rank)) found.push_back(entry.path());
  }
  size_t removed = 0;
  for (const fs::path& p : found) {
    const bool folder = fs::is_directory(fs::symlink_status(p, ec));
    if (fs::remove_all(p, ec) > 0 && folder) ++removed;
  }
  return removed;
}

bool natural_less(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      // Leading zeros aside, the longer run is the larger number.
      size_t zi = i, zj = j;
      while (zi + 1 < ei && a[zi] == '0') ++zi;
      while (zj + 1 < ej && b[zj] == '0') ++zj;
      if (ei - zi != ej - zj) return ei - zi < ej - zj;
      const int order = a.compare(zi, ei - zi, b, zj, ej - zj);
      if (order != 0) return order < 0;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

}  // namespace msprobe
