#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/text_file.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// Why `path` was refused: the reason alone, without the path the message starts with.
std::string refusal(const std::string& path) {
  return msprobe::testing::error_of<FileError>([&] { read_text_file(path); },
                                               [](const FileError& e) { return e.reason(); });
}

}  // namespace

TEST(TextFile, ANamedFifoIsRefusedNotWaitedOn) {
  const TempDir dir;
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(refusal(fifo.string()), "is a FIFO (named pipe), not a regular file");
}

TEST(TextFile, DevicesAndFoldersAreRefused) {
  EXPECT_EQ(refusal("/dev/zero"), "is a device, not a regular file");
  EXPECT_EQ(refusal(fs::temp_directory_path().string()), "is a directory");
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
  const TempDir dir;
  const std::string big(200000, 'x');
  EXPECT_EQ(read_text_file(dir.write("text", big)), big);
}
