#include "core/tensorboard_events.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace msprobe {
namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78u;

// One 256-entry table: records are a few dozen bytes, so slicing would buy nothing.
struct Crc32cTable {
  uint32_t t[256];

  constexpr Crc32cTable() : t{} {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ (kCastagnoli & (0u - (c & 1u)));
      t[b] = c;
    }
  }
};

// constexpr so the table lives in .rodata: no init-order hazards, no first-call race.
constexpr Crc32cTable kCrc32c{};

// TFRecord masks its checksums so that a CRC over data that itself holds CRCs stays strong.
uint32_t masked_crc32c(const std::string& bytes) {
  uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Little-endian whatever the host, as both TFRecord and protobuf's fixed fields store numbers.
void put_little_endian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

// Protobuf's wire types, the low three bits of a field's key.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80u) {
    out.push_back(static_cast<char>((v & 0x7Fu) | 0x80u));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  put_key(out, field, kFixed64);
  put_little_endian(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  put_key(out, field, kFixed32);
  put_little_endian(out, bits, 4);
}

// int64 (not sint64): a negative value is its two's complement as ten varint bytes.
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event's fields (tensorboard/compat/proto/event.proto) and Summary's (summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;

// Event's wall_time and step are proto3 fields without presence: protobuf leaves them out when
// they hold the default, so a record equals the Python writer's byte for byte. Zero means all
// bits zero, so -0.0 is written as protobuf writes it.
void put_event_header(std::string& out, double wall_time, int64_t step) {
  uint64_t bits;
  std::memcpy(&bits, &wall_time, sizeof(bits));
  if (bits != 0) put_double(out, kEventWallTime, wall_time);
  if (step != 0) put_int64(out, kEventStep, step);
}

// TFRecord framing: length, masked CRC of the length's 8 bytes, data, masked CRC of the data.
std::string frame(const std::string& data) {
  std::string length;
  put_little_endian(length, data.size(), 8);
  std::string out = length;
  put_little_endian(out, masked_crc32c(length), 4);
  out += data;
  put_little_endian(out, masked_crc32c(data), 4);
  return out;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = (c >> 8) ^ kCrc32c.t[(c ^ p[i]) & 0xFFu];
  return ~c;
}

std::string tensorboard_file_name(double wall_time, const std::string& host) {
  // Python's "%010d" % time.time() truncates toward zero.
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%010" PRId64,
                static_cast<int64_t>(std::trunc(wall_time)));
  return std::string("events.out.tfevents.") + seconds + "." + host;
}

std::string tensorboard_file_version_record(double wall_time) {
  std::string event;
  put_event_header(event, wall_time, 0);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  return frame(event);
}

std::string tensorboard_scalar_record(const std::string& tag, float value, int64_t step,
                                      double wall_time) {
  // simple_value sits in a oneof, so it is written even when 0; an empty tag is left out.
  std::string summary_value;
  if (!tag.empty()) put_bytes(summary_value, kValueTag, tag);
  put_float(summary_value, kValueSimpleValue, value);
  std::string summary;
  put_bytes(summary, kSummaryValue, summary_value);
  std::string event;
  put_event_header(event, wall_time, step);
  put_bytes(event, kEventSummary, summary);
  return frame(event);
}

}  // namespace msprobe
