// stack_info (issue 55): msprobe 26.2.0's stack_info.csv, each module's Python call stack at its
// last forward before the first written step (module_hook.py stack_hook, write_stack_info). A
// forward hook on every module captures the stack cheaply (code objects and offsets, as the
// dump's stack.json does); the text is made once, when the first written step asks for it.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "live/capture/call_stack.h"

namespace msprobe {

class MonitorStacks : public std::enable_shared_from_this<MonitorStacks> {
 public:
  // The forward hook of module `name` ("0:fc1", squashed as msprobe names it): records the
  // calling stack while the file is not yet written. Takes any arguments, so that it is
  // registered with or without with_kwargs. GIL required.
  pybind11::object hook(const std::string& name);
  // stack_info.csv's text: the header, then one row per module, in the order of their first
  // forwards, once; later calls give "". GIL required.
  std::string take_csv();
  bool pending() const { return !taken_; }

 private:
  struct Row {
    std::string name;
    StackPtr stack;
  };
  void record(size_t module, const std::string& name);

  CodeRegistry codes_;            // GIL
  std::vector<Row> rows_;         // msprobe's contexts, made at each module's first forward
  std::vector<size_t> row_of_;    // by the module's hook number; kNoRow until its first call
  static constexpr size_t kNoRow = static_cast<size_t>(-1);
  bool taken_ = false;
};

}  // namespace msprobe
