#!/usr/bin/env bash
# The CUDA proof, for a GPU machine that has pip's CUDA PyTorch 2.x, CMake and ninja but no Debian
# packages and no network: builds the extension against that machine's own torch, then runs the
# suite's cuda parametrisations, the hook bench and the fused finite-and-range bench on cuda.
#
#   bash tools/gpu_check.sh --fetch   # on a Debian 12 machine: the C++ and pytest packages the
#                                     # GPU machine lacks, downloaded and unpacked into .deps/
#   bash tools/gpu_check.sh           # on the GPU machine, with .deps/ carried along
#
# Everything it writes stays in the repository (.deps/, build-gpu/, python/msprobe_cpp/_C*.so).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
# Header-only nlohmann-json and yaml-cpp for the build; pytest and what it imports (pure Python)
# for the run.
PACKAGES=(libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev
  python3-pytest python3-pluggy python3-iniconfig python3-packaging python3-py)

if [ "${1:-}" = "--fetch" ]; then
  rm -rf "$DEPS"
  mkdir -p "$DEPS/debs" "$DEPS/root"
  (cd "$DEPS/debs" && apt-get download "${PACKAGES[@]}")
  for deb in "$DEPS"/debs/*.deb; do dpkg-deb -x "$deb" "$DEPS/root"; done
  rm -rf "$DEPS/debs"
  echo "unpacked into $DEPS/root ($(du -sh "$DEPS" | cut -f1))"
  exit 0
fi

PYTHON="${PYTHON:-$(command -v python3)}"
"$PYTHON" -c 'import torch; assert torch.cuda.is_available(), "no CUDA device visible to torch"'
USR="$DEPS/root/usr"
[ -d "$USR" ] || { echo "no $USR: run 'bash tools/gpu_check.sh --fetch' on a Debian machine" >&2; exit 2; }
LIBDIR="$USR/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$ROOT/python:$USR/lib/python3/dist-packages"

echo "== build against $("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
start=$(date +%s)
# The unpacked packages' CMake files name /usr paths; the include and library paths are given
# directly instead.
cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE="$PYTHON" -DMSPROBE_BUILD_TESTS=OFF \
  -Dnlohmann_json_DIR="$USR/share/cmake/nlohmann_json" \
  -Dyaml-cpp_DIR="$LIBDIR/cmake/yaml-cpp" \
  -DCMAKE_CXX_FLAGS="-isystem $USR/include" \
  -DCMAKE_EXE_LINKER_FLAGS="-L$LIBDIR" -DCMAKE_SHARED_LINKER_FLAGS="-L$LIBDIR" \
  -DCMAKE_MODULE_LINKER_FLAGS="-L$LIBDIR"
cmake --build "$ROOT/build-gpu" --parallel "$(nproc)"
echo "== built in $(($(date +%s) - start)) s"

echo "== pytest, cuda parametrisations"
MSPROBE_CPP_BIN="$ROOT/build-gpu/bin/msprobe-cpp" "$PYTHON" -m pytest "$ROOT/tests/python" -q \
  -p no:cacheprovider -k cuda -rs

echo "== bench/hook_overhead.py --device cuda"
"$PYTHON" "$ROOT/bench/hook_overhead.py" --device cuda --allow-reference-blas --steps 20 --rounds 4

echo "== bench/fused_range.py --device cuda (the fused finite-and-range check, issue 47)"
"$PYTHON" "$ROOT/bench/fused_range.py" --device cuda
