#include "live/hooks/compiled_region.h"

#include <Python.h>

#include <atomic>
#include <string_view>

#include "live/crossing/python_crossing.h"
#include "live/crossing/python_frames.h"

namespace msprobe {

namespace {

std::atomic<bool> watching{false};
// torch.compiler's dict and the flag's name; null before torch 2.x set them. Read with the GIL.
pybind11::handle compiler_globals;
pybind11::handle compiling_flag;
// Written and read with the GIL held.
std::vector<std::string>& runtime_prefixes() {
  static std::vector<std::string> prefixes;
  return prefixes;
}
std::vector<std::string>& runtime_fragments() {
  static std::vector<std::string> fragments;
  return fragments;
}

bool names_compiled_runtime(std::string_view file) {
  for (const std::string& p : runtime_prefixes()) {
    if (file.substr(0, p.size()) == p) return true;
  }
  for (const std::string& f : runtime_fragments()) {
    if (file.find(f) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

void watch_compiled_runtime(std::vector<std::string> prefixes, std::vector<std::string> fragments) {
  PythonCrossing::assert_gil();
  runtime_prefixes() = std::move(prefixes);
  runtime_fragments() = std::move(fragments);
  watching.store(true, std::memory_order_relaxed);
}

bool compiled_runtime_file(const std::string& file) {
  return watching.load(std::memory_order_relaxed) && names_compiled_runtime(file);
}

void watch_compiling_flag(pybind11::handle globals, pybind11::handle name) {
  PythonCrossing::assert_gil();
  const pybind11::handle before[] = {compiler_globals, compiling_flag};
  compiler_globals = PythonCrossing::keep(globals);
  compiling_flag = PythonCrossing::keep(name);
  for (pybind11::handle p : before) PythonCrossing::let_go(p);
}

bool called_by_compiled_region() {
  // Borrowed; the dict lookup of an interned name sets no error.
  if (compiler_globals &&
      PyDict_GetItem(compiler_globals.ptr(), compiling_flag.ptr()) == Py_True) {
    return true;
  }
  if (!watching.load(std::memory_order_relaxed)) return false;
  // A C callable pushes no frame of its own: the current frame is its caller's.
  const pybind11::handle frame = PythonFrames::current();
  if (!frame) return false;
  const pybind11::object code = PythonFrames::code(frame);
  Py_ssize_t size = 0;
  const char* file = PyUnicode_AsUTF8AndSize(PythonFrames::file_of(code).ptr(), &size);
  if (!file) {
    PythonCrossing::drop_error();  // an unencodable file name is no compiled region's
    return false;
  }
  return names_compiled_runtime(std::string_view(file, static_cast<size_t>(size)));
}

}  // namespace msprobe
