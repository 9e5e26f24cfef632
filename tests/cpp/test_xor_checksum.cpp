#include "core/xor_checksum.h"

#include <gtest/gtest.h>

#include <vector>

namespace msprobe {
namespace {

TEST(XorChecksumTest, WordsAreLittleEndianAndTheTailIsZeroPadded) {
  const std::vector<unsigned char> bytes = {1, 2, 3, 4, 5, 6, 7, 8, 0xff};
  EXPECT_EQ(xor_words(bytes.data(), 8), 0x0807060504030201ULL);
  EXPECT_EQ(xor_words(bytes.data(), 9), 0x08070605040302feULL);
  EXPECT_EQ(xor_words(bytes.data(), 3), 0x030201ULL);
  EXPECT_EQ(xor_words(bytes.data(), 0), 0ULL);
}

TEST(XorChecksumTest, EqualWordsCancel) {
  const std::vector<unsigned char> bytes = {9, 8, 7, 6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2};
  EXPECT_EQ(xor_words(bytes.data(), bytes.size()), 0ULL);
}

TEST(XorChecksumTest, HexIsSixteenLowercaseDigits) {
  EXPECT_EQ(xor_hex(0), "0x0000000000000000");
  EXPECT_EQ(xor_hex(0x3ece10d33f1a1f50ULL), "0x3ece10d33f1a1f50");
  EXPECT_EQ(xor_hex(static_cast<uint64_t>(-1)), "0xffffffffffffffff");
}

}  // namespace
}  // namespace msprobe
