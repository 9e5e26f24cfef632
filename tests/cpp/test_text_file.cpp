#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/text_file.h"

using namespace msprobe;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::string& path) {
  try {
    read_text_file(path);
  } catch (const FileError& e) {
    return e.reason();
  }
  return "(read)";
}

}  // namespace

TEST(TextFile, ANamedFifoIsRefusedNotWaitedOn) {
  const fs::path fifo = fs::temp_directory_path() / ("msprobe_fifo_" + std::to_string(getpid()));
  fs::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of(fifo.string()), "is a FIFO (named pipe), not a regular file");
  fs::remove(fifo);
}

TEST(TextFile, DevicesAndFoldersAreRefused) {
  EXPECT_EQ(error_of("/dev/zero"), "is a device, not a regular file");
  EXPECT_EQ(error_of(fs::temp_directory_path().string()), "is a directory");
}

TEST(TextFile, AHandedOverPipeIsReadToItsEnd) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string text = "ignore_nan_inf: []\n";
  ASSERT_EQ(write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fds[1]);
  EXPECT_EQ(read_text_file("/dev/fd/" + std::to_string(fds[0])), text);
  close(fds[0]);
}

TEST(TextFile, ARegularFileWhole) {
  const fs::path p = fs::temp_directory_path() / ("msprobe_text_" + std::to_string(getpid()));
  std::string big(200000, 'x');
  std::ofstream(p) << big;
  EXPECT_EQ(read_text_file(p.string()), big);
  fs::remove(p);
}
