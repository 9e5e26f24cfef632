// msprobe_cpp._C: the thin Python face of the C++ engine.
#include <pybind11/pybind11.h>

#include "bind/bindings.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/output_files.h"
#include "core/rules.h"

namespace py = pybind11;
using namespace msprobe;

// The torch this library is compiled against, as bytes the package reads from the file before it
// loads it (_torch_check.py): a library built for another torch aborts inside the loader, where no
// program can catch it. `used`: kept although nothing here reads it.
[[gnu::used]] static const char kBuiltFor[] =
    "\nmsprobe_cpp-built-for-torch:" MSPROBE_TORCH_VERSION "|" MSPROBE_TORCH_INIT_FILE "\n";
// Likewise the version, for `msprobe-cpp --version` without torch (python/msprobe_cpp/__main__.py).
[[gnu::used]] static const char kVersion[] = "\nmsprobe_cpp-version:" MSPROBE_VERSION "\n";

PYBIND11_MODULE(_C, m) {
  m.doc() = "msprobe_cpp engine: sessions, API and module hooks, statistics, writers";
  py::register_exception<ConfigError>(m, "ConfigError", PyExc_ValueError);
  py::register_exception<RulesError>(m, "RulesError", PyExc_ValueError);
  py::register_exception<WriteError>(m, "WriteError", PyExc_OSError);
  m.attr("__version__") = version();
  bind_session(m);
  bind_hooks(m);
  bind_tools(m);
  bind_for_tests(m);
  bind_tasks(m);
}
