#include "live/capture/call_stack.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <fstream>

#include "live/crossing/python_crossing.h"
#include "live/crossing/python_frames.h"

namespace msprobe {

namespace {

// Whether `path` lies in `folder` (a folder name without its last separator): torch's folder is a
// prefix of torchvision's, and torchvision, like transformers, is the user's code here.
bool under_folder(const std::string& path, const std::string& folder) {
  if (folder.empty() || path.compare(0, folder.size(), folder) != 0) return false;
  return path.size() == folder.size() || path[folder.size()] == '/' || path[folder.size()] == '\\';
}

constexpr size_t kMaxFrames = 64;

namespace py = pybind11;

// The lines Python's linecache holds for `file`: code compiled from a string that the compiler
// registered there (an IPython or Jupyter cell), which is on no disk. GIL required.
std::vector<std::string> linecache_lines(const std::string& file) {
  PythonCrossing::assert_gil();
  std::vector<std::string> out;
  try {
    const py::list lines = py::module_::import("linecache").attr("getlines")(file);
    for (const py::handle line : lines) out.push_back(py::str(line).cast<std::string>());
  } catch (const py::error_already_set&) {
    out.clear();  // no such lines: the frame keeps its path alone
  }
  return out;
}

// "In [7]" where `file` is an IPython cell (its compiler maps cell files to execution counts),
// else "". IPython is asked only where the program imported it. GIL required.
std::string notebook_cell(const std::string& file) {
  PythonCrossing::assert_gil();
  try {
    const py::dict modules = py::module_::import("sys").attr("modules");
    if (!modules.contains("IPython")) return "";
    const py::object shell = modules["IPython"].attr("get_ipython")();
    if (shell.is_none() || !py::hasattr(shell, "compile")) return "";
    const py::object count =
        shell.attr("compile").attr("_filename_map").attr("get")(file, py::none());
    return count.is_none() ? "" : "In [" + py::str(count).cast<std::string>() + "]";
  } catch (const py::error_already_set&) {
    return "";  // another IPython's layout: the path it is
  }
}

std::string attr_string(py::handle obj, const char* name) {
  const py::object v = PythonCrossing::owned(PyObject_GetAttrString(obj.ptr(), name));
  std::string out;
  if (v && PyUnicode_Check(v.ptr())) {
    const char* s = PyUnicode_AsUTF8(v.ptr());
    if (s) out = s;
  }
  PythonCrossing::drop_error();
  return out;
}

std::string strip(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

}  // namespace

CodeRegistry::~CodeRegistry() {
  if (!Py_IsInitialized()) return;
  PythonCrossing::Gil gil;
  for (py::handle c : codes_) PythonCrossing::let_go(c);
}

StackPtr CodeRegistry::capture() {
  PythonCrossing::assert_gil();
  // The frames go to a reused buffer first: a training loop calls from the same few places every
  // step, so most stacks are found among those seen before and nothing is allocated.
  thread_local CallStack frames;
  frames.clear();
  size_t hash = 0;
  py::object frame = PythonCrossing::shared(PythonFrames::current());
  while (frame && frames.size() < kMaxFrames) {
    // Registered below when the stack is new: until then the frame keeps its code alive.
    const py::object code = PythonFrames::code(frame);
    // The line table is decoded only when the step is written.
    const int offset = PythonFrames::place(frame);
    frames.push_back({code, offset});
    hash = hash * 1000003u ^ (reinterpret_cast<size_t>(code.ptr()) + static_cast<size_t>(offset));
    frame = PythonFrames::caller(frame);
  }
  auto [first, last] = interned_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const CallStack& known = *it->second;
    if (known.size() == frames.size() &&
        std::equal(known.begin(), known.end(), frames.begin(), [](const Frame& a, const Frame& b) {
          return a.code.is(b.code) && a.offset == b.offset;
        })) {
      return it->second;
    }
  }
  for (const Frame& frame : frames) {
    if (codes_.insert(frame.code).second) PythonCrossing::keep(frame.code);
  }
  auto stack = std::make_shared<const CallStack>(frames);
  if (interned_.size() < kMaxInterned) {
    interned_.emplace(hash, stack);
    interned_ptrs_.insert(stack.get());
  }
  return stack;
}

const CodeRegistry::CodeInfo& CodeRegistry::info(py::handle code) {
  auto it = infos_.find(code);
  if (it != infos_.end()) return it->second;
  return infos_[code] = {attr_string(code, "co_filename"), attr_string(code, "co_name")};
}

int CodeRegistry::line_of(const Frame& f) const {
  return PythonFrames::line_at(f.code, f.offset);
}

const std::string& CodeRegistry::source_line(const std::string& file, int line) {
  static const std::string kNone;
  auto lines = source_lines_.find(file);
  if (lines == source_lines_.end()) {
    std::vector<std::string> content;
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);) content.push_back(strip(l));
    if (content.empty()) {
      for (std::string& l : linecache_lines(file)) content.push_back(strip(l));
    }
    lines = source_lines_.emplace(file, std::move(content)).first;
  }
  if (line < 1 || static_cast<size_t>(line) > lines->second.size()) return kNone;
  return lines->second[static_cast<size_t>(line) - 1];
}

std::vector<std::string> CodeRegistry::format(const CallStack& stack,
                                              const std::string& skip_prefix) {
  PythonCrossing::assert_gil();
  std::vector<std::string> out;
  for (const Frame& f : stack) {
    const CodeInfo& ci = info(f.code);
    if (under_folder(ci.filename, skip_prefix)) continue;
    const int line = line_of(f);
    out.push_back("File " + ci.filename + ", line " + std::to_string(line) + ", in " + ci.name +
                  ", \n " + source_line(ci.filename, line));
  }
  return out;
}

StackLines CodeRegistry::format_once(const StackPtr& stack, const std::string& skip_prefix) {
  PythonCrossing::assert_gil();
  if (auto it = formatted_.find(stack.get()); it != formatted_.end()) return it->second;
  auto lines = std::make_shared<const std::vector<std::string>>(format(*stack, skip_prefix));
  // Interned stacks live as long as the registry, so their address names them for good.
  if (interned_ptrs_.count(stack.get())) formatted_.emplace(stack.get(), lines);
  return lines;
}

std::optional<std::string> CodeRegistry::first_frame_outside(const CallStack& stack,
                                                             const std::vector<std::string>& skip) {
  PythonCrossing::assert_gil();
  for (const Frame& f : stack) {
    const CodeInfo& ci = info(f.code);
    bool skipped = false;
    for (const std::string& prefix : skip) {
      skipped = skipped || under_folder(ci.filename, prefix);
    }
    if (skipped) continue;
    const int line = line_of(f);
    const std::string cell = notebook_cell(ci.filename);
    if (!cell.empty()) {
      return cell + ", line " + std::to_string(line) + ": " + source_line(ci.filename, line);
    }
    return ci.filename + ":" + std::to_string(line) + ": " + source_line(ci.filename, line);
  }
  return std::nullopt;
}

}  // namespace msprobe
