// TensorBoard event records: CRC-32C on its published check values, the TFRecord framing, and
// each record taken apart by a decoder written from the protobuf wire format, independent of the
// encoder under test. The expected bytes of the file-version record are what TensorBoard 2.21's
// event_pb2.Event(wall_time=1.5, file_version="brain.Event:2").SerializeToString() gives.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/tensorboard_events.h"

using namespace msprobe;

namespace {

uint64_t little_endian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s.at(at + i));
  return v;
}

uint32_t masked(const std::string& bytes) {
  uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Checks the framing of the record at the front of `record` and returns its data.
std::string unframe(const std::string& record) {
  EXPECT_GE(record.size(), 16u);
  uint64_t length = little_endian(record, 0, 8);
  EXPECT_EQ(record.size(), 8 + 4 + length + 4);
  EXPECT_EQ(little_endian(record, 8, 4), masked(record.substr(0, 8)));
  std::string data = record.substr(12, length);
  EXPECT_EQ(little_endian(record, 12 + length, 4), masked(data));
  return data;
}

// A protobuf message read one field at a time.
struct Fields {
  std::string bytes;
  size_t at = 0;

  bool done() const { return at >= bytes.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      auto b = static_cast<unsigned char>(bytes.at(at++));
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  // The next field's key: field number * 8 + wire type.
  uint64_t key() { return varint(); }
  uint64_t fixed(int n) {
    uint64_t v = little_endian(bytes, at, n);
    at += n;
    return v;
  }
  std::string delimited() {
    size_t n = varint();
    std::string s = bytes.substr(at, n);
    at += n;
    return s;
  }
};

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
}

float as_float(uint64_t bits) {
  auto b32 = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b32, sizeof(f));
  return f;
}

}  // namespace

TEST(TensorboardEvents, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xFF');
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);  // RFC 3720 B.4
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorboardEvents, FileNameIsTensorboards) {
  EXPECT_EQ(tensorboard_file_name(1700000000.9, "node1.123.0"),
            "events.out.tfevents.1700000000.node1.123.0");
  EXPECT_EQ(tensorboard_file_name(42.5, "h"), "events.out.tfevents.0000000042.h");
}

TEST(TensorboardEvents, FileVersionRecordIsFramedAndEqualsProtobufs) {
  std::string record = tensorboard_file_version_record(1.5);
  std::string data = unframe(record);
  // 9 bytes of wall_time (key 0x09, fixed64), 15 of file_version (key 0x1a, length 13, text).
  ASSERT_EQ(data.size(), 24u);
  EXPECT_EQ(record.size(), 16u + 24u);
  const std::string expected("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f\x1a\x0d" "brain.Event:2", 24);
  EXPECT_EQ(data, expected);
}

TEST(TensorboardEvents, ScalarRecordDecodesFieldByField) {
  const std::string tag = "0:fc1.input:0/rank0/actv_norm";
  Fields event{unframe(tensorboard_scalar_record(tag, 2.25f, 300, 1700000000.25)), 0};
  ASSERT_EQ(event.key(), (1u << 3) | 1);  // wall_time, fixed64
  EXPECT_EQ(as_double(event.fixed(8)), 1700000000.25);
  ASSERT_EQ(event.key(), (2u << 3) | 0);  // step, varint
  EXPECT_EQ(event.varint(), 300u);
  ASSERT_EQ(event.key(), (5u << 3) | 2);  // summary
  Fields summary{event.delimited(), 0};
  EXPECT_TRUE(event.done());
  ASSERT_EQ(summary.key(), (1u << 3) | 2);  // value
  Fields value{summary.delimited(), 0};
  EXPECT_TRUE(summary.done());
  ASSERT_EQ(value.key(), (1u << 3) | 2);  // tag
  EXPECT_EQ(value.delimited(), tag);
  ASSERT_EQ(value.key(), (2u << 3) | 5);  // simple_value, fixed32
  EXPECT_EQ(as_float(value.fixed(4)), 2.25f);
  EXPECT_TRUE(value.done());
}

TEST(TensorboardEvents, DefaultsLeftOutAsProtobufDoesButZeroValueKept) {
  // Step 0 and wall_time 0 are proto3 defaults and absent; simple_value 0 is in a oneof, kept.
  Fields event{unframe(tensorboard_scalar_record("t", 0.0f, 0, 0.0)), 0};
  ASSERT_EQ(event.key(), (5u << 3) | 2);
  Fields summary{event.delimited(), 0};
  ASSERT_EQ(summary.key(), (1u << 3) | 2);
  EXPECT_EQ(summary.delimited(), std::string("\x0a\x01t\x15\x00\x00\x00\x00", 8));
  EXPECT_TRUE(event.done());
}

TEST(TensorboardEvents, NegativeStepIsTenVarintBytes) {
  Fields event{unframe(tensorboard_scalar_record("t", 1.0f, -1, 0.0)), 0};
  ASSERT_EQ(event.key(), (2u << 3) | 0);
  size_t before = event.at;
  EXPECT_EQ(static_cast<int64_t>(event.varint()), -1);
  EXPECT_EQ(event.at - before, 10u);
}
