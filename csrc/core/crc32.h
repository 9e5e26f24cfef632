// CRC-32 as zlib computes it (reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF), so
// checksums match Python's zlib.crc32 and msprobe's summary files without linking zlib.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace msprobe {

// Incremental: crc32_update(crc32_update(0, a, n), b, m) == crc32 of a+b. Start with 0.
uint32_t crc32_update(uint32_t crc, const void* data, size_t size);
inline uint32_t crc32(const void* data, size_t size) {
  return crc32_update(0, data, size);
}

// 8 lowercase hex digits, e.g. "cbf43926" (what msprobe writes in the "md5" field).
std::string crc32_hex(uint32_t crc);

}  // namespace msprobe
