// An autograd node's owning pointer: std::shared_ptr in PyTorch 1.x, c10::intrusive_ptr from the
// 2.x releases that changed it (whichever Edge::function is).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <type_traits>

namespace msprobe {

using NodePtr = std::remove_cv_t<decltype(torch::autograd::Edge::function)>;

// An owning pointer to a node that something else owns.
template <typename N = torch::autograd::Node>
NodePtr node_ptr(N* node) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<N>>) {
    return node->shared_from_this();
  } else {
    return node->getptr();
  }
}

}  // namespace msprobe
