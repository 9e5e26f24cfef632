#include "core/text_file.h"

#include <sys/stat.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace msprobe {

std::string read_text_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw FileError(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw FileError(path, "is a directory");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw FileError(path, std::strerror(errno));
  std::string text(static_cast<size_t>(st.st_size), '\0');
  const size_t got = text.empty() ? 0 : std::fread(&text[0], 1, text.size(), f);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw FileError(path, "I/O error");
  text.resize(got);
  return text;
}

}  // namespace msprobe
