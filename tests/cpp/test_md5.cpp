// grad_probe's L0 column: hashlib.md5(...).hexdigest() of a gradient's float32 bytes.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/md5.h"

using namespace msprobe;

TEST(Md5, Rfc1321Vectors) {
  const auto md5 = [](const std::string& s) { return md5_hex(s.data(), s.size()); };
  EXPECT_EQ(md5(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(md5("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(md5("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
}

TEST(Md5, EveryTailLength) {
  // Lengths around the 56- and 64-byte edges of the padding, checked against hashlib.
  EXPECT_EQ(md5_hex(std::string(1000, 'a').data(), 1000), "cabe45dcc9ae5b66ba86600cca6b8ba8");
  std::string bytes;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  EXPECT_EQ(md5_hex(bytes.data(), bytes.size()), "e6899eaaf06fd702f3ed3f988eb19362");
  const std::pair<size_t, const char*> edges[] = {
      {55, "04364420e25c512fd958a70738aa8f72"}, {56, "668a72d5ba17f08e62dabcafad6db14b"},
      {57, "693037871c4a9d3d8685018905cb530a"}, {63, "7dc2ca208106a2f703567bdff99d8981"},
      {64, "c1bb4f81d892b2d57947682aeb252456"}, {65, "1bc932052302d074bdec39795fe00cf6"}};
  for (const auto& [n, digest] : edges)
    EXPECT_EQ(md5_hex(std::string(n, 'x').data(), n), digest) << n;
}
