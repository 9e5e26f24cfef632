# Asks the Python interpreter's torch for what building against it takes (what
# torch.utils.cpp_extension would use): Debian's python3-torch and a pip wheel alike, with no
# TorchConfig.cmake, CUDA toolkit or network needed. Sets TORCH_INCLUDE_DIRS, TORCH_LIBRARY_DIRS,
# TORCH_CXX11_ABI, TORCH_PYBIND11_{COMPILER_TYPE,STDLIB,BUILD_ABI}, TORCH_VERSION,
# TORCH_INIT_FILE (its torch/__init__.py), PYTHON_EXT_SUFFIX and TORCH_CXX_STANDARD. Asked again at
# every configure, so a build folder configured for one torch follows the interpreter's torch of
# today.
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)

execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c [=[
import sysconfig, torch, torch.utils.cpp_extension as ext
print("|".join(ext.include_paths()))
print("|".join(ext.library_paths()))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
for key in ("_PYBIND11_COMPILER_TYPE", "_PYBIND11_STDLIB", "_PYBIND11_BUILD_ABI"):
    print(getattr(torch._C, key, None) or "")
print(torch.__version__)
print(sysconfig.get_config_var("EXT_SUFFIX"))
print(torch.__file__)
]=]
  OUTPUT_VARIABLE torch_facts
  ERROR_VARIABLE torch_error
  RESULT_VARIABLE torch_status
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT torch_status EQUAL 0)
  message(FATAL_ERROR "${Python3_EXECUTABLE} cannot import torch, which the extension is built "
                      "against (install python3-torch, or configure with "
                      "-DMSPROBE_BUILD_EXTENSION=OFF):\n${torch_error}")
endif()
string(REPLACE "\n" ";" torch_facts "${torch_facts}")
list(GET torch_facts 0 TORCH_INCLUDE_DIRS)
list(GET torch_facts 1 TORCH_LIBRARY_DIRS)
list(GET torch_facts 2 TORCH_CXX11_ABI)
list(GET torch_facts 3 TORCH_PYBIND11_COMPILER_TYPE)
list(GET torch_facts 4 TORCH_PYBIND11_STDLIB)
list(GET torch_facts 5 TORCH_PYBIND11_BUILD_ABI)
list(GET torch_facts 6 TORCH_VERSION)
list(GET torch_facts 7 PYTHON_EXT_SUFFIX)
list(GET torch_facts 8 TORCH_INIT_FILE)
string(REPLACE "|" ";" TORCH_INCLUDE_DIRS "${TORCH_INCLUDE_DIRS}")
string(REPLACE "|" ";" TORCH_LIBRARY_DIRS "${TORCH_LIBRARY_DIRS}")
message(STATUS "msprobe_cpp._C: torch ${TORCH_VERSION} from ${Python3_EXECUTABLE}")

# The C++ standard that torch's headers need, as they state it: ATen/ATen.h refuses an older one
# with `#if ... __cplusplus < 202002L` (2.14 and later; 201402L in 1.13). The year of that value is
# the standard (2020 -> C++20), so no list of torch versions has to be kept here.
set(TORCH_CXX_STANDARD "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  if(TORCH_CXX_STANDARD STREQUAL "" AND EXISTS "${dir}/ATen/ATen.h")
    file(STRINGS "${dir}/ATen/ATen.h" aten_guard REGEX "__cplusplus < [0-9]+L")
    if(aten_guard MATCHES "__cplusplus < (20|19)([0-9][0-9])[0-9][0-9]L")
      set(TORCH_CXX_STANDARD "${CMAKE_MATCH_2}")
    endif()
  endif()
endforeach()
if(TORCH_CXX_STANDARD STREQUAL "")
  message(FATAL_ERROR "ATen/ATen.h under ${TORCH_INCLUDE_DIRS} states no C++ standard "
                      "(`__cplusplus < NNNNNNL`): is this torch's include folder?")
endif()
message(STATUS "msprobe_cpp._C: torch's headers need C++${TORCH_CXX_STANDARD}")
