// The msprobe-cpp command line. The standalone binary and `python -m msprobe_cpp` (through the
// extension, which links this code) both run it, so they behave alike byte for byte.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace msprobe {

// `args` without the program name. Returns the exit status. `terminal`: `out` is a terminal,
// where check's report is text unless --format json asks for JSON.
int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
             bool terminal = false);

// The project's version, as CMake's project() declares it.
const char* version();

}  // namespace msprobe
