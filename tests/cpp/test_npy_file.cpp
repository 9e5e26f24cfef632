// grad_probe's direction files: numpy.save's bytes for bool arrays, and reading them back.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/npy_file.h"
#include "test_util.h"

using namespace msprobe;
using msprobe::testing::TempDir;

namespace {

std::string write_file(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = (dir.path() / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST(NpyFile, BytesEqualNumpySave) {
  // numpy 1.26's np.save(f, np.array([[True, False, True], [False, False, True]])).
  const std::string header =
      "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n";
  const std::string expected = std::string("\x93NUMPY\x01\x00v\x00", 10) + header +
                               std::string("\x01\x00\x01\x00\x00\x01", 6);
  EXPECT_EQ(npy_bool_bytes({2, 3}, std::string("\x01\x00\x01\x00\x00\x01", 6)), expected);
}

TEST(NpyFile, HeaderSizesAsNumpy) {
  // Sizes of np.save's files (header padded to 64 bytes, room for the first axis to grow).
  EXPECT_EQ(npy_bool_bytes({3}, std::string(3, '\0')).size(), 131u);
  EXPECT_EQ(npy_bool_bytes({}, std::string(1, '\0')).size(), 129u);
  EXPECT_EQ(npy_bool_bytes({0}, "").size(), 128u);
  EXPECT_EQ(npy_bool_bytes({1, 2, 3, 4}, std::string(24, '\0')).size(), 152u);
  EXPECT_EQ(npy_bool_bytes({100000}, std::string(100000, '\0')).size(), 100128u);
}

TEST(NpyFile, ReadsWhatItWrites) {
  TempDir dir;
  const std::string values("\x01\x00\x00\x01\x01\x00", 6);
  const BoolArray back = read_npy_bool(write_file(dir, "a.npy", npy_bool_bytes({3, 2}, values)));
  EXPECT_EQ(back.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(back.values, values);
  EXPECT_TRUE(read_npy_bool(write_file(dir, "s.npy", npy_bool_bytes({}, "\x01"))).shape.empty());
}

TEST(NpyFile, RefusesOtherFiles) {
  TempDir dir;
  std::string f32 = npy_bool_bytes({2}, std::string(2, '\0'));
  f32.replace(f32.find("|b1"), 3, "<f4");
  EXPECT_NE(msprobe::testing::error_of<std::runtime_error>([&] {
              read_npy_bool(write_file(dir, "f.npy", f32));
            }).find("not a bool .npy file (dtype '<f4')"),
            std::string::npos);
  const std::string cut = npy_bool_bytes({4}, std::string(4, '\0')).substr(0, 130);
  EXPECT_NE(msprobe::testing::error_of<std::runtime_error>([&] {
              read_npy_bool(write_file(dir, "c.npy", cut));
            }).find("holds 2 bytes of data for 4 elements"),
            std::string::npos);
  EXPECT_NE(msprobe::testing::error_of<std::runtime_error>([&] {
              read_npy_bool(write_file(dir, "t.txt", "hello"));
            }).find("no NumPy magic"),
            std::string::npos);
}

TEST(NpyFile, FortranOrderAsNumpy) {
  // np.save(f, np.array([[True, False, True], [False, False, True]]).T): Fortran order, the
  // growth padding sized by the last axis.
  const std::string header =
      "{'descr': '|b1', 'fortran_order': True, 'shape': (3, 2), }" + std::string(59, ' ') + "\n";
  const std::string data("\x01\x00\x01\x00\x00\x01", 6);
  const std::string bytes = npy_bool_bytes({3, 2}, data, true);
  EXPECT_EQ(bytes, std::string("\x93NUMPY\x01\x00v\x00", 10) + header + data);
  TempDir dir;
  const BoolArray back = read_npy_bool(write_file(dir, "f.npy", bytes));
  // In C order: [[1, 0], [0, 0], [1, 1]].
  EXPECT_EQ(back.values, std::string("\x01\x00\x00\x00\x01\x01", 6));
  EXPECT_EQ(back.shape, (std::vector<int64_t>{3, 2}));
}
