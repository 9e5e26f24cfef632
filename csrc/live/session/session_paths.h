// Where a session's files go, and which frames of a stack are the tool's own.
#pragma once

#include <string>

#include "live/session/step_state.h"

namespace msprobe {

struct SessionPaths {
  std::string package_dir, library_dir;  // frames under these are ours, not the user's
  std::string dump_root;                 // dump_path, absolute, without a trailing '/'

  // <dump_root>/step<S>/rank<R> of the step `s` is in.
  std::string dir_of(const StepState& s) const { return dump_root + "/" + s.folder(); }
};

}  // namespace msprobe
