// Whether the tool may read a tensor's elements where they lie. Any tensor kind can reach a hook
// (a DTensor, a wrapper subclass, a fake or meta tensor, a storage not allocated yet, a nested
// tensor): the statistics must never dereference memory that is not there.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace msprobe {

// Why the elements of `t` cannot be read in place (a tensor subclass, whose own storage says
// nothing and whose ops dispatch to Python; meta; nested; a storage whose data is not allocated
// yet), or empty when they can. Never throws.
std::string unreadable_reason(const at::Tensor& t);
inline bool readable_in_place(const at::Tensor& t) {
  return unreadable_reason(t).empty();
}

}  // namespace msprobe
