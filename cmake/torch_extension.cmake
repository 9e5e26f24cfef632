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

file(GLOB EXTENSION_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/csrc/live/*/*.cpp
     ${CMAKE_SOURCE_DIR}/csrc/bind/*.cpp)
add_library(msprobe_extension MODULE ${EXTENSION_SOURCES})
set_target_properties(msprobe_extension PROPERTIES
  OUTPUT_NAME _C PREFIX "" SUFFIX "${PYTHON_EXT_SUFFIX}"
  CXX_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY "${MSPROBE_EXTENSION_OUTPUT_DIR}"
  BUILD_RPATH "${TORCH_LIBRARY_DIRS}" INSTALL_RPATH "${TORCH_LIBRARY_DIRS}")
# torch's headers as system headers: -Wall -Wextra are for our code, not theirs.
target_include_directories(msprobe_extension SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS}
                           ${Python3_INCLUDE_DIRS})
target_compile_definitions(msprobe_extension PRIVATE
  TORCH_EXTENSION_NAME=_C TORCH_API_INCLUDE_EXTENSION_H
  _GLIBCXX_USE_CXX11_ABI=${TORCH_CXX11_ABI}
  MSPROBE_VERSION="${PROJECT_VERSION}"
  MSPROBE_TORCH_VERSION="${TORCH_VERSION}" MSPROBE_TORCH_INIT_FILE="${TORCH_INIT_FILE}")
# pybind11 keeps its type registry under a key made of its internals version and the platform's
# ABI; _C must use torch's key, or torch's tensors and types are foreign to it. Set as torch's own
# cpp_extension does: a part torch states (torch._C._PYBIND11_*, up to 2.13) is passed; a part it
# no longer states (2.14 on, with pybind11 3's headers) is left to those headers, which derive it
# from the compiler as they did for torch. An empty value would make another key
# (tests/python/test_pybind11_key.py compares the two).
foreach(part COMPILER_TYPE STDLIB BUILD_ABI)
  if(NOT TORCH_PYBIND11_${part} STREQUAL "")
    target_compile_definitions(msprobe_extension PRIVATE
                               PYBIND11_${part}="${TORCH_PYBIND11_${part}}")
  endif()
endforeach()
# torch's headers cost 6-8 s of parsing in every translation unit that includes them, most of the
# build: the files are compiled in unity batches. A developer's build keeps batches of five, so an
# edit recompiles five files; a one-shot build (setup.py: pip install) asks for as many batches as
# it runs jobs (MSPROBE_UNITY_BATCHES), which parses the headers once per core: 98 s -> 61 s on two
# cores (bench/README.md). A precompiled header was measured too: its 350 MB image costs about as
# much to load as the parse it saves.
set(MSPROBE_UNITY_BATCHES 0 CACHE STRING
    "Translation units for the extension's files (0: batches of five files)")
set(unity_batch_size 5)
if(MSPROBE_UNITY_BATCHES GREATER 0)
  list(LENGTH EXTENSION_SOURCES source_count)
  math(EXPR unity_batch_size
       "(${source_count} + ${MSPROBE_UNITY_BATCHES} - 1) / ${MSPROBE_UNITY_BATCHES}")
endif()
set_target_properties(msprobe_extension PROPERTIES UNITY_BUILD ON
                      UNITY_BUILD_BATCH_SIZE ${unity_batch_size})
target_link_libraries(msprobe_extension PRIVATE msprobe_cli ${torch_libraries})

# The package finds its wrap list where an installed one has it: the one copy of the rules file,
# made here for the source tree's package and for setup.py's build alike. (The ignore rules are
# compiled in: see shipped_rules.cpp.in.)
foreach(wrap_list support_wrap_ops.yaml support_wrap_ops_26.yaml)
  configure_file(${CMAKE_SOURCE_DIR}/rules/${wrap_list}
                 ${MSPROBE_EXTENSION_OUTPUT_DIR}/_rules/${wrap_list} COPYONLY)
endforeach()
# The torch the extension is built for is compiled into it (csrc/bind/module.cpp), where the
# package reads it before it loads the extension: no file beside it can disagree with it.
