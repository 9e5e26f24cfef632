// TensorBoard event files written by hand, for the monitor's format "tensorboard": msprobe's
// TrainerMon writes its scalars through torch.utils.tensorboard, and TensorBoard reads any file
// of TFRecord-framed Event protos. The few fields needed are encoded here directly, so the core
// needs neither protobuf nor torch. Each function returns the bytes of one framed record; the
// caller appends them to the file, the file-version record first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace msprobe {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF): the
// checksum TFRecord framing uses, unmasked. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size);

// "events.out.tfevents.<seconds, at least 10 digits>.<host>", as TensorBoard's EventFileWriter
// names a file (it passes "<hostname>.<pid>.<uid>" where `host` stands); TensorBoard only reads
// files whose name holds "tfevents".
std::string tensorboard_file_name(double wall_time, const std::string& host);

// The record a file starts with: Event{wall_time, file_version: "brain.Event:2"}.
std::string tensorboard_file_version_record(double wall_time);

// One scalar: Event{wall_time, step, summary{value{tag, simple_value}}}, what
// SummaryWriter.add_scalar(tag, value, step) writes.
std::string tensorboard_scalar_record(const std::string& tag, float value, int64_t step,
                                      double wall_time);

}  // namespace msprobe
