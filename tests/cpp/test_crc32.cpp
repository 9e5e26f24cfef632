#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/crc32.h"

using namespace msprobe;

namespace {

// Bit-at-a-time CRC-32, independent of the table code under test.
uint32_t reference_crc32(const unsigned char* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

std::vector<unsigned char> random_bytes(size_t n, uint64_t seed) {
  std::vector<unsigned char> v(n);
  uint64_t x = seed;
  for (auto& b : v) {
    // xorshift64: deterministic across platforms, unlike std::uniform_int_distribution.
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>(x >> 56);
  }
  return v;
}

uint32_t crc_of(const std::string& s) {
  return crc32(s.data(), s.size());
}

}  // namespace

// Values are what Python's zlib.crc32 returns for the same bytes.
TEST(Crc32, KnownValues) {
  EXPECT_EQ(crc_of("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc32(nullptr, 0), 0u);
  EXPECT_EQ(crc_of("a"), 0xE8B7BE43u);
  EXPECT_EQ(crc_of("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
}

TEST(Crc32, EmptyUpdateKeepsState) {
  uint32_t c = crc_of("123456789");
  EXPECT_EQ(crc32_update(c, "", 0), c);
}

TEST(Crc32, ChunkedEqualsOneShotEqualsReference) {
  const auto buf = random_bytes(1 << 20, 0x9E3779B97F4A7C15ull);
  const uint32_t whole = crc32(buf.data(), buf.size());
  EXPECT_EQ(whole, reference_crc32(buf.data(), buf.size()));

  uint32_t c = 0;
  size_t pos = 0;
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{13}, size_t{4096}}) {
    c = crc32_update(c, buf.data() + pos, chunk);
    pos += chunk;
  }
  c = crc32_update(c, buf.data() + pos, buf.size() - pos);
  EXPECT_EQ(c, whole);
}

TEST(Crc32, EveryShortLengthMatchesReference) {
  // Covers the tail loop and the 16-byte block boundary from both sides.
  const auto buf = random_bytes(64, 42);
  for (size_t n = 0; n <= buf.size(); ++n) {
    EXPECT_EQ(crc32(buf.data(), n), reference_crc32(buf.data(), n)) << "n=" << n;
  }
}

TEST(Crc32, UnalignedStart) {
  const auto buf = random_bytes(4096 + 8, 7);
  const size_t n = 4096 - 3;  // not a multiple of 16, so the tail path runs too
  std::vector<unsigned char> copy(n);
  for (size_t off = 1; off <= 7; ++off) {
    std::memcpy(copy.data(), buf.data() + off, n);
    const uint32_t expected = reference_crc32(copy.data(), n);
    EXPECT_EQ(crc32(buf.data() + off, n), expected) << "offset=" << off;
    EXPECT_EQ(crc32(copy.data(), n), expected);
  }
}

TEST(Crc32Hex, LowercaseZeroPadded) {
  EXPECT_EQ(crc32_hex(0xCBF43926u), "cbf43926");
  EXPECT_EQ(crc32_hex(0x0000abcdu), "0000abcd");
  EXPECT_EQ(crc32_hex(0u), "00000000");
  EXPECT_EQ(crc32_hex(0xFFFFFFFFu), "ffffffff");
  EXPECT_EQ(crc32_hex(0x0A0B0C0Du), "0a0b0c0d");
}
