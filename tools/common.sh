# Shared by tools/demo.sh and tools/test.sh: install what a fresh Debian 12 machine lacks, then
# build. Both steps are idempotent and quick when there is nothing to do.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${MSPROBE_BUILD_DIR:-$ROOT/build}"
# Debian's interpreter: python3-pytest (and later python3-torch) belong to it, whatever
# `python3` is first on PATH.
PYTHON=/usr/bin/python3

APT_PACKAGES=(
  cmake g++ make ninja-build
  nlohmann-json3-dev libyaml-cpp-dev libgtest-dev
  python3 python3-pytest python3-setuptools python3-venv python3-pip python3-wheel
  libtorch-dev python3-torch pybind11-dev python3-pybind11
  # The bit-for-bit test runs with each BLAS (README, Dependencies); the benches need it too.
  libopenblas0-pthread
  # Debian's reference BLAS, the other set of fixtures: installed after OpenBLAS, apt takes it as
  # already provided and leaves it out.
  libblas3 liblapack3
  # Test-only: torchvision's models for the real-model zoo on torch 1.13
  # (tests/python/test_real_models.py).
  python3-torchvision
)

install_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build() {
  # One CMake build: the core and the command line once, as static libraries linked into the
  # msprobe-cpp binary, the core's tests and the extension msprobe_cpp._C (written in place into
  # python/msprobe_cpp, built against $PYTHON's torch). Its progress lines are the output.
  # Arguments: the targets to build (the demo needs two), else all.
  echo "== building in $BUILD"
  local generator=()
  [ -f "$BUILD/CMakeCache.txt" ] || generator=(-G Ninja)
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$PYTHON" -DMSPROBE_WERROR="${MSPROBE_WERROR:-OFF}" \
    >"$BUILD/configure.log" 2>&1 || {
    cat "$BUILD/configure.log" >&2
    return 1
  }
  local targets=()
  for target in "$@"; do targets+=(--target "$target"); done
  cmake --build "$BUILD" --parallel "$(nproc)" "${targets[@]}"
}

# The second torch: PyTorch 2.x (requirements-torch2.txt, test-only) in a venv of its own
# (no system site packages), the extension built against it by the same CMake project into
# $TORCH2_DIR/pkg/msprobe_cpp beside a copy of the package's Python files.
TORCH2_DIR="${MSPROBE_TORCH2_DIR:-$ROOT/build-torch2}"
TORCH2_VENV="$TORCH2_DIR/venv"
TORCH2_PKG="$TORCH2_DIR/pkg"

torch2_env() {
  # Made once; made again only when the pinned requirements change.
  local req="$ROOT/requirements-torch2.txt"
  if cmp -s "$req" "$TORCH2_VENV/requirements-torch2.txt"; then return 0; fi
  echo "== making the torch 2 venv in $TORCH2_VENV ($(grep -c '==' "$req") pinned packages)"
  rm -rf "$TORCH2_VENV"
  "$PYTHON" -m venv "$TORCH2_VENV"
  "$TORCH2_VENV/bin/pip" install -q -r "$req"
  # A test package that asked for another torch would have pulled a multi-GB CUDA build.
  local pinned torch_now
  pinned="$(sed -n 's/^torch==//p' "$req")"
  torch_now="$("$TORCH2_VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
  if [ "$torch_now" != "$pinned" ]; then
    echo "requirements-torch2.txt: the venv's torch is $torch_now, not the pinned $pinned" >&2
    return 1
  fi
  cp "$req" "$TORCH2_VENV/requirements-torch2.txt"
}

torch2_build() {
  echo "== building the extension against $("$TORCH2_VENV/bin/python" -c 'import torch; print("torch", torch.__version__)') in $TORCH2_DIR/cmake"
  local generator=()
  [ -f "$TORCH2_DIR/cmake/CMakeCache.txt" ] || generator=(-G Ninja)
  mkdir -p "$TORCH2_DIR/cmake" "$TORCH2_PKG/msprobe_cpp"
  cmake -S "$ROOT" -B "$TORCH2_DIR/cmake" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$TORCH2_VENV/bin/python" -DMSPROBE_BUILD_TESTS=OFF \
    -DMSPROBE_WERROR="${MSPROBE_WERROR:-OFF}" \
    -DMSPROBE_EXTENSION_OUTPUT_DIR="$TORCH2_PKG/msprobe_cpp" >"$TORCH2_DIR/configure.log" 2>&1 || {
    cat "$TORCH2_DIR/configure.log" >&2
    return 1
  }
  cmake --build "$TORCH2_DIR/cmake" --parallel "$(nproc)" --target msprobe_extension
  # The package's Python files beside that extension (copies: the source tree's own _C is 1.13's).
  rm -f "$TORCH2_PKG/msprobe_cpp/_built_for.py"  # what builds before issue 44 wrote
  cp -u "$ROOT"/python/msprobe_cpp/*.py "$TORCH2_PKG/msprobe_cpp/"
  cp -u "$ROOT"/python/*.py "$TORCH2_PKG/"  # msprobe_cpp_cli.py, the console command
}
