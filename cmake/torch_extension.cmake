# msprobe_cpp._C: the hooks (csrc/live), their bindings (csrc/bind), and the core and the command
# line linked in from the same static libraries as the msprobe-cpp binary. Needs torch_facts.cmake.
set(torch_libraries)
foreach(name c10 torch torch_cpu torch_python)
  # Not cached: a build folder reused with another torch (setup.py's, a second pip install) would
  # link that torch's headers against the first one's libraries (undefined symbols at import).
  find_library(TORCH_LIB_${name} ${name} HINTS ${TORCH_LIBRARY_DIRS} NO_CACHE)
  if(NOT TORCH_LIB_${name})
    message(FATAL_ERROR "lib${name}.so not found (looked in ${TORCH_LIBRARY_DIRS} and the system)")
  endif()
  list(APPEND torch_libraries ${TORCH_LIB_${name}})
endforeach()

# The engine (csrc/live and csrc/bind, all but the module's entry point) is compiled once, as
# objects linked into msprobe_cpp._C and into the test extension msprobe_cpp_units (tests/ext),
# which drives the live parts on their own, as pybind11's tests are a module of their own: the
# test hooks never ship in the package.
file(GLOB ENGINE_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/csrc/live/*/*.cpp
     ${CMAKE_SOURCE_DIR}/csrc/bind/*.cpp)
list(REMOVE_ITEM ENGINE_SOURCES ${CMAKE_SOURCE_DIR}/csrc/bind/module.cpp)
add_library(msprobe_engine OBJECT ${ENGINE_SOURCES})
set_target_properties(msprobe_engine PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_link_libraries(msprobe_engine PUBLIC msprobe_cli ${torch_libraries})

# What every file that includes torch's headers is compiled with.
function(msprobe_torch_target target)
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden)
  # torch's headers as system headers: -Wall -Wextra are for our code, not theirs.
  target_include_directories(${target} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS} ${Python3_INCLUDE_DIRS})
  target_compile_definitions(${target} PRIVATE
    TORCH_EXTENSION_NAME=_C TORCH_API_INCLUDE_EXTENSION_H
    _GLIBCXX_USE_CXX11_ABI=${TORCH_CXX11_ABI}
    MSPROBE_VERSION="${PROJECT_VERSION}"
    MSPROBE_TORCH_VERSION="${TORCH_VERSION}" MSPROBE_TORCH_INIT_FILE="${TORCH_INIT_FILE}")
  # pybind11 keeps its type registry under a key made of its internals version and the
  # platform's ABI; _C must use torch's key, or torch's tensors and types are foreign to it. Set
  # as torch's own cpp_extension does: a part torch states (torch._C._PYBIND11_*, up to 2.13) is
  # passed; a part it no longer states (2.14 on, with pybind11 3's headers) is left to those
  # headers, which derive it from the compiler as they did for torch. An empty value would make
  # another key (tests/python/test_pybind11_key.py compares the two).
  foreach(part COMPILER_TYPE STDLIB BUILD_ABI)
    if(NOT TORCH_PYBIND11_${part} STREQUAL "")
      target_compile_definitions(${target} PRIVATE PYBIND11_${part}="${TORCH_PYBIND11_${part}}")
    endif()
  endforeach()
endfunction()

# A Python extension module of the engine, written to `output_dir` as `name`.
function(msprobe_module target name output_dir)
  msprobe_torch_target(${target})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${name} PREFIX "" SUFFIX "${PYTHON_EXT_SUFFIX}"
    LIBRARY_OUTPUT_DIRECTORY "${output_dir}"
    BUILD_RPATH "${TORCH_LIBRARY_DIRS}" INSTALL_RPATH "${TORCH_LIBRARY_DIRS}")
  target_link_libraries(${target} PRIVATE msprobe_engine)
endfunction()

msprobe_torch_target(msprobe_engine)
add_library(msprobe_extension MODULE ${CMAKE_SOURCE_DIR}/csrc/bind/module.cpp)
msprobe_module(msprobe_extension _C "${MSPROBE_EXTENSION_OUTPUT_DIR}")
option(MSPROBE_BUILD_TEST_EXTENSION
       "Build msprobe_cpp_units (tests/ext), the live parts' test hooks, beside the package" ON)
if(MSPROBE_BUILD_TEST_EXTENSION)
  add_library(msprobe_units MODULE ${CMAKE_SOURCE_DIR}/tests/ext/live_units.cpp)
  get_filename_component(units_dir "${MSPROBE_EXTENSION_OUTPUT_DIR}" DIRECTORY)
  msprobe_module(msprobe_units msprobe_cpp_units "${units_dir}")
endif()

# torch's headers cost 6-8 s of parsing in every translation unit that includes them (cmake/unity.cmake).
msprobe_unity_build(msprobe_engine)

# The package finds its wrap list where an installed one has it: the one copy of the rules file,
# made here for the source tree's package and for setup.py's build alike. (The ignore rules are
# compiled in: see shipped_rules.cpp.in.)
foreach(wrap_list support_wrap_ops.yaml support_wrap_ops_26.yaml)
  configure_file(${CMAKE_SOURCE_DIR}/rules/${wrap_list}
                 ${MSPROBE_EXTENSION_OUTPUT_DIR}/_rules/${wrap_list} COPYONLY)
endforeach()
# The torch the extension is built for is compiled into it (csrc/bind/module.cpp), where the
# package reads it before it loads the extension: no file beside it can disagree with it.
