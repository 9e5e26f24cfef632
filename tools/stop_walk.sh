#!/bin/bash
# The stop path's walk counts (issue 54; docs/architecture.md, "The walk of one stop"): builds the
# extension against Debian's torch with -finstrument-functions into build-walk/ (not the
# product's build), preloads the probes of tools/walk/walk_hooks.c and runs tools/stop_walk.py.
# Arguments go to stop_walk.py (--edges lists each entry, in order; --locks the calls that led to
# each lock). -O0 (Debug, without its
# assertions): no function is inlined, so that each call site is in its caller. The CPU scan
# (stats/cpu_summary.cpp) is left uninstrumented: its kernels pin registers the probes would move.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/tools/common.sh"
dir="$ROOT/build-walk"
mkdir -p "$dir/pkg/msprobe_cpp"
cmake -S "$ROOT" -B "$dir/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-DNDEBUG -finstrument-functions -finstrument-functions-exclude-file-list=/usr/,cpu_summary.cpp" \
  -DMSPROBE_BUILD_TESTS=OFF -DMSPROBE_BUILD_TEST_EXTENSION=OFF -DMSPROBE_UNITY_BATCHES=2 \
  -DPython3_EXECUTABLE=/usr/bin/python3 -DMSPROBE_EXTENSION_OUTPUT_DIR="$dir/pkg/msprobe_cpp" \
  >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
cmake --build "$dir/cmake" --target msprobe_extension >"$dir/build.log" 2>&1 ||
  { tail -40 "$dir/build.log" >&2; exit 1; }
cp -u "$ROOT"/python/msprobe_cpp/*.py "$dir/pkg/msprobe_cpp/"
gcc -shared -fPIC -O1 -Wall -o "$dir/walk_hooks.so" "$ROOT/tools/walk/walk_hooks.c" -ldl -lpthread
LD_PRELOAD="$dir/walk_hooks.so" PYTHONPATH="$dir/pkg" MSPROBE_CPP_PACKAGE_ROOT="$dir/pkg" \
  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$ROOT/tools/stop_walk.py" "$@"
