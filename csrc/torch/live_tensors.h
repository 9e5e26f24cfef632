// The live tensors of one call, laid out like its record's entries, so that an anomalous entry can
// be traced back to the tensor object that carried it.
#pragma once

#include <Python.h>

#include <ATen/ATen.h>

#include <vector>

#include "core/record.h"

namespace msprobe {

// One top-level argument (or output): the tensor itself, or the tensors inside a list or tuple in
// depth-first order (the order of the entry's tensor leaves).
struct LiveArg {
  at::Tensor tensor;
  std::vector<at::Tensor> items;
};

struct LiveTensors {
  std::vector<LiveArg> inputs;
  std::vector<LiveArg> kwargs;  // in the record's kwargs order
  std::vector<LiveArg> outputs;
};

// The tensor at top-level position `i`, or null where there is none.
inline const at::Tensor* tensor_at(const std::vector<LiveArg>& v, size_t i) {
  return i < v.size() && v[i].tensor.defined() ? &v[i].tensor : nullptr;
}

// The args of a sequence by position, or of a single value, laid out like describe_items'
// entries. GIL required.
std::vector<LiveArg> live_args_of(PyObject* seq);
LiveArg live_arg_of(PyObject* value);

// Calls `fn(entry, tensor)` for each tensor of an argument: the argument itself, or each tensor
// leaf of a list entry paired with the live tensor in the same place.
template <typename Fn>
void for_each_tensor(const Entry& e, const LiveArg& live, Fn&& fn) {
  if (e.is_tensor()) {
    if (live.tensor.defined()) fn(e, live.tensor);
    return;
  }
  if (e.kind != Entry::Kind::List) return;
  size_t next = 0;
  auto walk = [&](const Entry& x, auto&& self) -> void {
    if (x.is_tensor()) {
      if (next < live.items.size()) fn(x, live.items[next]);
      ++next;
    } else if (x.kind == Entry::Kind::List) {
      for (const Entry& item : x.items) self(item, self);
    }
  };
  walk(e, walk);
}

}  // namespace msprobe
