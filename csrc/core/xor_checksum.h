// msprobe 26.x's summary_mode "xor" (docs/formats.md): a tensor's bytes as little-endian 64-bit
// words, the last padded with zero bytes, XORed together, written as "0x" and 16 hex digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace msprobe {

uint64_t xor_words(const unsigned char* bytes, size_t size);
// "0x%016x" of `word`, as 26.x formats an int checksum (two's complement for a negative value).
std::string xor_hex(uint64_t word);

}  // namespace msprobe
