#include "core/spill_file.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace msprobe {

namespace {

constexpr size_t kChunk = 1 << 16;

}  // namespace

SpillFile::SpillFile() : file_(std::tmpfile(), &std::fclose) {
  if (!file_) {
    throw std::runtime_error(std::string("cannot make a temporary file for the report: ") +
                             std::strerror(errno));
  }
}

void SpillFile::append(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size()) {
    throw std::runtime_error(std::string("cannot write the report's temporary file: ") +
                             std::strerror(errno));
  }
  ++count;
}

void SpillFile::rewind_for_reading() {
  if (std::fflush(file_.get()) != 0 || std::fseek(file_.get(), 0, SEEK_SET) != 0) {
    throw std::runtime_error(std::string("cannot read the report's temporary file back: ") +
                             std::strerror(errno));
  }
}

size_t SpillFile::read_chunk(std::string& chunk) {
  chunk.resize(kChunk);
  const size_t n = std::fread(chunk.data(), 1, kChunk, file_.get());
  chunk.resize(n);
  if (n == 0 && std::ferror(file_.get())) {
    throw std::runtime_error("cannot read the report's temporary file back");
  }
  return n;
}

}  // namespace msprobe
