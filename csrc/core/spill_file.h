// Temporary files that hold what a report writes before it can be put in order: whatever their
// size, memory holds one chunk.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

namespace msprobe {

// An anonymous temporary file, removed when closed. Throws std::runtime_error when none can be
// made.
class SpillFile {
 public:
  SpillFile();
  void append(const std::string& text);
  // Hands the file's contents to `sink` in chunks, from the start.
  template <typename Sink>
  void replay(Sink&& sink);
  size_t count = 0;  // members appended

 private:
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  void rewind_for_reading();
  size_t read_chunk(std::string& chunk);
};

template <typename Sink>
void SpillFile::replay(Sink&& sink) {
  rewind_for_reading();
  std::string chunk;
  while (read_chunk(chunk) > 0) sink(chunk);
}

}  // namespace msprobe
