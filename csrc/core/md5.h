// MD5 (RFC 1321), for grad_probe's L0 column: msprobe writes hashlib.md5 of each gradient's
// float32 bytes. Written here rather than linked (OpenSSL) for one 16-byte digest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace msprobe {

// 32 lowercase hex digits, as hashlib's hexdigest().
std::string md5_hex(const void* data, size_t size);

}  // namespace msprobe
