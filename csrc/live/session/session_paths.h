// Where a session's files go, and which frames of a stack are the tool's own.
#pragma once

#include <string>

#include "live/session/step_state.h"

namespace msprobe {

struct SessionPaths {
  std::string package_dir, library_dir;  // frames under these are ours, not the user's
  std::string dump_root;                 // dump_path, absolute, without a trailing '/'

  // <dump_root>/step<S>/rank<R>
  std::string dir_of(const StepPlace& at) const { return dump_root + "/" + at.folder(); }
};

}  // namespace msprobe
