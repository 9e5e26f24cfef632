#include "core/crc32.h"

#include <cstring>

namespace msprobe {
namespace {

constexpr uint32_t kPoly = 0xEDB88320u;
constexpr int kSlices = 16;

// Slice-by-16: table[k][b] is the CRC of byte b followed by k zero bytes, which lets the loop
// fold 16 input bytes per iteration with independent lookups instead of a serial byte chain.
struct Tables {
  uint32_t t[kSlices][256];

  constexpr Tables() : t{} {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (int k = 1; k < kSlices; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t prev = t[k - 1][b];
        t[k][b] = (prev >> 8) ^ t[0][prev & 0xFFu];
      }
    }
  }
};

// constexpr so the tables live in .rodata: no init-order hazards, no first-call race.
constexpr Tables kTables{};

// Assumes a little-endian host (x86-64 / aarch64); memcpy keeps unaligned loads well-defined.
inline uint64_t load_u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  const auto& t = kTables.t;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;

  while (size >= 16) {
    uint64_t lo = load_u64(p) ^ c;
    uint64_t hi = load_u64(p + 8);
    c = t[15][lo & 0xFF] ^ t[14][(lo >> 8) & 0xFF] ^ t[13][(lo >> 16) & 0xFF] ^
        t[12][(lo >> 24) & 0xFF] ^ t[11][(lo >> 32) & 0xFF] ^ t[10][(lo >> 40) & 0xFF] ^
        t[9][(lo >> 48) & 0xFF] ^ t[8][lo >> 56] ^ t[7][hi & 0xFF] ^ t[6][(hi >> 8) & 0xFF] ^
        t[5][(hi >> 16) & 0xFF] ^ t[4][(hi >> 24) & 0xFF] ^ t[3][(hi >> 32) & 0xFF] ^
        t[2][(hi >> 40) & 0xFF] ^ t[1][(hi >> 48) & 0xFF] ^ t[0][hi >> 56];
    p += 16;
    size -= 16;
  }
  while (size--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

std::string crc32_hex(uint32_t crc) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i) {
    out[i] = kDigits[crc & 0xF];
    crc >>= 4;
  }
  return out;
}

}  // namespace msprobe
