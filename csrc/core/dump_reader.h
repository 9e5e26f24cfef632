// Reads msprobe's dump.json into CallRecords, streaming one call at a time in file order.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/parallel_members.h"
#include "core/record.h"

namespace msprobe {

// One message naming the file and, for content errors, the line and column:
// "dump.json:12:5: data.\"Torch.add.0.forward\".input_args: expected a list, got a number".
class DumpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using CallSink = std::function<void(CallRecord&&)>;

class JsonCursor;

// `source` names the text in error messages.
DumpHeader read_dump(JsonCursor& cur, const std::string& source, const CallSink& on_call);
DumpHeader read_dump(std::string_view text, const std::string& source, const CallSink& on_call);
// Streams the file: memory stays bounded by the largest record, whatever the file's size. A large
// indented file's calls are parsed on as many threads as there are cores (parallel_members.h),
// with the same records, in the same order, and the same errors as one thread reads.
DumpHeader read_dump_file(const std::string& path, const CallSink& on_call,
                          const ParallelOptions& parallel = {});

}  // namespace msprobe
