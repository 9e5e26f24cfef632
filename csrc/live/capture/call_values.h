// Turns the Python arguments and results of a call into dump entries (docs/formats.md) and, for
// the overflow guard, the live tensors behind them, in one walk so both have the same layout.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "core/record.h"
#include "live/capture/live_tensors.h"
#include "live/capture/tensor_entry.h"

namespace msprobe {

// Tensors get their statistics; int/float/bool/str, dtype, device, Size, slice, Ellipsis get
// {"type", "value"}; None is null; tuples and lists become lists of entries (cut at 32 levels).
// Anything else is recorded as null. GIL required. `stem` names saved tensors:
// "<call>.input.0", and list items append ".<i>". With `live`, the tensors go there too.
Entry value_entry(pybind11::handle obj, const EntryOptions& options, const std::string& stem,
                  LiveArg* live = nullptr);
// A keyword argument's entry: value_entry, except that `device=` is written as msprobe 1.1.1
// writes it there, {"type": "torch.device", "value": "cpu:None"} (its type and index; a string
// as given).
Entry kwarg_entry(pybind11::handle obj, const std::string& key, const EntryOptions& options,
                  const std::string& stem, LiveArg* live = nullptr);

// A call's keyword arguments (a dict, or null), in the dict's order: one kwarg_entry each, keyed
// by the keyword, its saved tensors named after `call`. With `live`, one LiveArg each is
// appended. The one builder of a record's kwargs, for API and module calls alike.
std::vector<std::pair<std::string, Entry>> kwarg_entries(pybind11::handle kwargs,
                                                         const EntryOptions& options,
                                                         const std::string& call,
                                                         std::vector<LiveArg>* live = nullptr);

// A sequence of values (a call's positional arguments, a tuple result): one entry per element,
// element i named "<stem>.<i>"; a single value gives one entry named "<stem>.0". With `live`,
// one LiveArg per entry is appended.
std::vector<Entry> item_entries(pybind11::handle seq, const EntryOptions& options,
                                const std::string& stem, std::vector<LiveArg>* live = nullptr);

// torch.distributed.ProcessGroup, and `facts(group)` -> (ranks list, md5 hex of str(ranks)) or
// None: process group arguments are then recorded as msprobe records them. GIL required.
void set_process_group_facts(pybind11::handle type, pybind11::handle facts);

// The live tensors alone, laid out as item_entries would lay them out.
std::vector<LiveArg> live_args_of(pybind11::handle seq);

}  // namespace msprobe
