// The live tensors of one call, laid out like its record's entries, so that an anomalous entry can
// be traced back to the tensor object that carried it.
#pragma once

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
  // At L0, a module call's: the tensors its enclosing code was given (the enclosing module's and
  // the started model's arguments), and that code's name. NaN/inf that comes into the call from
  // none of them and from no recorded call was made by that code.
  std::vector<at::Tensor> enclosing;
  std::string maker;

  // The argument at `pos` of the record, or null where there is none.
  const LiveArg* at(const ArgPos& pos) const {
    const std::vector<LiveArg>& side = pos.side == ArgPos::Side::Input   ? inputs
                                       : pos.side == ArgPos::Side::Kwarg ? kwargs
                                                                         : outputs;
    return pos.index < side.size() ? &side[pos.index] : nullptr;
  }
  // The tensor at `pos` itself (not a list's), or null.
  const at::Tensor* tensor(const ArgPos& pos) const {
    const LiveArg* arg = at(pos);
    return arg && arg->tensor.defined() ? &arg->tensor : nullptr;
  }
};

// Calls `fn(entry, tensor)` for each tensor of an argument: the argument itself, or each tensor
// leaf of a list entry paired with the live tensor in the same place.
template <typename Fn>
void for_each_tensor(const Entry& e, const LiveArg& live, Fn&& fn) {
  if (e.is_tensor()) {
    if (live.tensor.defined()) fn(e, live.tensor);
    return;
  }
  if (!e.has_items()) return;
  size_t next = 0;
  auto walk = [&](const Entry& x, auto&& self) -> void {
    if (x.is_tensor()) {
      if (next < live.items.size()) fn(x, live.items[next]);
      ++next;
    } else if (x.has_items()) {
      for (const Entry& item : x.items) self(item, self);
    }
  };
  walk(e, walk);
}

}  // namespace msprobe
