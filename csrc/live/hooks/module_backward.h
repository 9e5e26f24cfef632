// Module backward records (levels L0 and mix) without PyTorch's full backward hooks. Those wrap a
// module's inputs and outputs in BackwardHookFunction nodes: a module that writes its input in
// place (ReLU(inplace=True)) or a caller that writes its output in place (`out += identity`) then
// fails ("a view ... is being modified inplace"), and the extra nodes change the order in which
// gradients are accumulated. Here no node is inserted: the forward's own autograd nodes are found
// (those created between the module's pre-hook and its forward hook, by sequence number) and
// hooked, C++ hooks that read gradients and change nothing.
//   - gradients flowing in (the record's `input`): a pre-hook on each output's grad_fn;
//   - gradients flowing out (its `output`, one per positional argument): a post hook on each
//     node of the module that feeds an input's gradient edge; what several nodes send to one
//     input is added up, as the engine adds it.
// The record is made when the last of those nodes has run (when no input needs a gradient: when
// the outputs' nodes have), in the order PyTorch's hooks would fire.
#pragma once

#include <pybind11/pybind11.h>

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <memory>
#include <string>

#include "live/capture/call_stack.h"

namespace msprobe {

class Session;

// What the forward pre-hook keeps: where each positional argument's gradient goes, and the first
// autograd sequence number the forward can use. Null when grad mode is off. GIL required.
struct ModuleBackwardStart;
std::shared_ptr<ModuleBackwardStart> module_backward_start(pybind11::handle args);

// Who is handed a module call's backward, pass by pass (a pass: one backward through it).
// Its calls come from the autograd threads, under the call's own lock, one pass after another.
class ModuleBackwardReceiver {
 public:
  virtual ~ModuleBackwardReceiver() = default;
  // The first of the call's hooks in a pass has run.
  virtual void pass_begins() {}
  // Every gradient of the pass is in: `into`, per output item, what flows into the module;
  // `out_of`, per positional argument, what flows out to it (undefined: none). Returns what to
  // run once the call's lock is let go (the record), or nothing.
  virtual std::function<void()> pass_ends(torch::autograd::variable_list into,
                                          torch::autograd::variable_list out_of) = 0;
};

// At the forward hook: hooks the nodes of this module call, so that `receiver` is handed each
// pass of its backward. GIL required.
void attach_backward_receiver(const ModuleBackwardStart& start, pybind11::handle output,
                              std::shared_ptr<ModuleBackwardReceiver> receiver);

// At the forward hook: hooks the nodes of this module call, so that its backward is recorded as
// `<backward_key>.<n>` (`base`: the module's name for selection). GIL required.
void attach_module_backward(const std::shared_ptr<Session>& session,
                            const std::string& backward_key, const std::string& base,
                            const ModuleBackwardStart& start, pybind11::handle output,
                            StackPtr stack);

}  // namespace msprobe
