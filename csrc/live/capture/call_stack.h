// The Python call stack of a hooked call, captured cheaply (code object + instruction offset per
// frame) and formatted into stack.json lines only when a step is written.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "live/crossing/python_crossing.h"

namespace msprobe {

struct Frame {
  pybind11::handle code;  // kept alive by the CodeRegistry that captured it
  int offset;             // PythonFrames::place(): an instruction's offset or the line number
};
using CallStack = std::vector<Frame>;
using StackPtr = std::shared_ptr<const CallStack>;
// A stack's stack.json lines: shared, so a step's writer can use them without the GIL.
using StackLines = std::shared_ptr<const std::vector<std::string>>;

// Holds one reference to every code object seen in a session, so frames can store handles
// and be copied freely, also on autograd threads, without touching Python refcounts. Guarded by
// the GIL: every member function below needs it.
class CodeRegistry {
 public:
  ~CodeRegistry();     // needs the GIL, or a finalized interpreter
  StackPtr capture();  // innermost frame first; equal stacks share one object; GIL required

  // "File <path>, line <n>, in <func>, \n <source line>" for each frame outside `skip_prefix`.
  // GIL required.
  std::vector<std::string> format(const CallStack& stack, const std::string& skip_prefix);
  // The same, formatted once per interned stack (`skip_prefix` must be the same every time):
  // a training loop writes the same stacks every step. GIL required.
  StackLines format_once(const StackPtr& stack, const std::string& skip_prefix);

  // "<path>:<line>: <source line>" of the innermost frame outside every prefix of `skip`.
  // GIL required.
  std::optional<std::string> first_frame_outside(const CallStack& stack,
                                                 const std::vector<std::string>& skip);

 private:
  struct CodeInfo {
    std::string filename;
    std::string name;
  };
  const CodeInfo& info(pybind11::handle code);
  int line_of(const Frame& f) const;
  const std::string& source_line(const std::string& file, int line);

  std::unordered_set<pybind11::handle, PythonCrossing::SameObject, PythonCrossing::SameObject>
      codes_;
  // Stacks seen before, by a hash of their frames; bounded so a program that never repeats a
  // stack cannot grow it without end.
  std::unordered_multimap<size_t, StackPtr> interned_;
  static constexpr size_t kMaxInterned = 1 << 16;
  std::unordered_set<const CallStack*> interned_ptrs_;
  std::unordered_map<const CallStack*, StackLines> formatted_;  // interned only
  std::unordered_map<pybind11::handle, CodeInfo, PythonCrossing::SameObject,
                     PythonCrossing::SameObject>
      infos_;
  std::unordered_map<std::string, std::vector<std::string>> source_lines_;
};

}  // namespace msprobe
