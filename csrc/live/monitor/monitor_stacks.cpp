#include "live/monitor/monitor_stacks.h"

#include "core/python_text.h"
#include "live/crossing/python_crossing.h"

namespace msprobe {

namespace py = pybind11;

py::object MonitorStacks::hook(const std::string& name) {
  PythonCrossing::assert_gil();
  // msprobe keys its contexts by module, not by name: each hook is one module's.
  const size_t module = row_of_.size();
  row_of_.push_back(kNoRow);
  std::weak_ptr<MonitorStacks> owner = weak_from_this();
  // Called by torch with the GIL held; it raises nothing into the user's forward.
  return py::cpp_function([owner, module, name](const py::args&, const py::kwargs&) {
    if (auto stacks = owner.lock()) stacks->record(module, name);
  });
}

void MonitorStacks::record(size_t module, const std::string& name) {
  if (taken_) return;
  if (row_of_[module] == kNoRow) {
    row_of_[module] = rows_.size();
    rows_.push_back({name, nullptr});
  }
  // The frame running now is torch's, the one that calls the hooks, as msprobe's
  // inspect.stack()[2:] starts there (this hook, a C++ function, has no frame of its own).
  rows_[row_of_[module]].stack = codes_.capture();
}

std::string MonitorStacks::take_csv() {
  PythonCrossing::assert_gil();
  if (taken_) return "";
  taken_ = true;
  std::string out = csv_row({"module_name", "stack_info"}, "\n");
  for (const Row& row : rows_) {
    // msprobe's "File <path>, line <n>, in <func>, \n <line> \n" per frame, leaving out the
    // frames whose source it cannot read.
    std::string text;
    for (const std::string& frame : codes_.format(*row.stack, "")) {
      if (frame.size() >= 4 && frame.compare(frame.size() - 4, 4, ", \n ") == 0) continue;
      text += frame + " \n";
    }
    out += csv_row({row.name, text}, "\n");
  }
  return out;
}

}  // namespace msprobe
