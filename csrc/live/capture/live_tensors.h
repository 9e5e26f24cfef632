// The live tensors of one call, laid out like its record's entries, so that an anomalous entry can
// be traced back to the tensor object that carried it.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
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
  // At L0, a module call's enclosing code, innermost first: each open module call (its name and
  // the tensors it was given), then the started model's call ("the started model Net"). What a
  // started model returns has the last alone.
  struct Enclosing {
    std::string maker;
    std::vector<at::Tensor> args;
    bool started_model = false;
  };
  std::vector<Enclosing> enclosing;

  // The code that made `t`, which no recorded call made: the innermost enclosing call that was
  // not given it (a tensor passed down through an intermediate module's arguments was made above
  // it). Null where every one was given it, or the started model was (its arguments: the batch),
  // or nothing encloses the call.
  const Enclosing* maker_of(const at::Tensor& t) const {
    auto given = [&t](const Enclosing& e) {
      return std::any_of(e.args.begin(), e.args.end(),
                         [&t](const at::Tensor& a) { return a.is_same(t); });
    };
    if (enclosing.empty() || (enclosing.back().started_model && given(enclosing.back()))) {
      return nullptr;
    }
    for (const Enclosing& e : enclosing) {
      if (!given(e)) return &e;
    }
    return nullptr;
  }

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
