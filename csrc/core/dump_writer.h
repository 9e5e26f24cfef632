// Writes records in msprobe's dump.json layout (docs/formats.md), byte for byte the way Python's
// json.dump(indent=1) lays them out.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json_writer.h"
#include "core/record.h"

namespace msprobe {

void write_scalar(JsonWriter& w, const Scalar& s);
void write_entry(JsonWriter& w, const Entry& e);
// `"<name>": {"input_args": ..., "input_kwargs": ..., "output": ...}` (or input/output for a
// backward record), as one member of the enclosing "data" object.
void write_record(JsonWriter& w, const CallRecord& rec);

// The whole dump.json text for `records` in order; `buffer` is reused for it when given.
std::string dump_json(const DumpHeader& head, const std::vector<const CallRecord*>& records,
                      std::string buffer = {});

}  // namespace msprobe
