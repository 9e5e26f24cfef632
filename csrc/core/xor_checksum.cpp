#include "core/xor_checksum.h"

#include <cstdio>
#include <cstring>

namespace msprobe {

uint64_t xor_words(const unsigned char* bytes, size_t size) {
  uint64_t acc = 0;
  size_t at = 0;
  for (; at + 8 <= size; at += 8) {
    uint64_t word = 0;
    for (int b = 7; b >= 0; --b) word = (word << 8) | bytes[at + static_cast<size_t>(b)];
    acc ^= word;
  }
  uint64_t last = 0;  // the zero-padded tail
  for (size_t b = size; b > at; --b) last = (last << 8) | bytes[b - 1];
  return acc ^ last;
}

std::string xor_hex(uint64_t word) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(word));
  return text;
}

}  // namespace msprobe
