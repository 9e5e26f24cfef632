#include "torch/live_tensors.h"

#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

namespace msprobe {

namespace {

constexpr int kMaxDepth = 32;  // as deep as describe_value looks

bool is_sequence(PyObject* o) {
  return (PyTuple_Check(o) && !THPSize_Check(o)) || PyList_Check(o);
}

void flatten(PyObject* o, std::vector<at::Tensor>& out, int depth) {
  if (THPVariable_Check(o)) {
    out.push_back(THPVariable_Unpack(o));
  } else if (is_sequence(o) && depth < kMaxDepth) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) {
      flatten(PySequence_Fast_GET_ITEM(o, i), out, depth + 1);
    }
  }
}

}  // namespace

LiveArg live_arg_of(PyObject* value) {
  LiveArg arg;
  if (THPVariable_Check(value)) {
    arg.tensor = THPVariable_Unpack(value);
  } else if (is_sequence(value)) {
    flatten(value, arg.items, 1);
  }
  return arg;
}

std::vector<LiveArg> live_args_of(PyObject* seq) {
  if (!is_sequence(seq)) return {live_arg_of(seq)};
  std::vector<LiveArg> out;
  out.reserve(static_cast<size_t>(PySequence_Fast_GET_SIZE(seq)));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    out.push_back(live_arg_of(PySequence_Fast_GET_ITEM(seq, i)));
  }
  return out;
}

}  // namespace msprobe
