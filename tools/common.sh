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
  # (tests/python/test_real_models.py); pytest's workers (tools/test.sh runs two).
  python3-torchvision python3-pytest-xdist
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

# Warnings are errors in every build these scripts make (MSPROBE_WERROR=OFF lets them through, for
# a local run): the demo's build and the suite's are then one build, and the suite after the demo
# compiles only its tests (the flag differing rebuilt the core and the engine: 2 minutes).
MSPROBE_WERROR="${MSPROBE_WERROR:-ON}"

fresh_build_options() {
  # A new build folder (a fresh clone's, CI's) is built once: the extension in as many unity
  # batches as there are cores parses torch's headers once per core, not once per five files
  # (cmake/torch_extension.cmake; about 35 s less per build on two cores). A folder already made
  # keeps what it was made with (a developer's: batches of five, for short rebuilds).
  echo -G Ninja -DMSPROBE_UNITY_BATCHES="$(nproc)"
}

build() {
  # One CMake build: the core and the command line once, as static libraries linked into the
  # msprobe-cpp binary, the core's tests and the extension msprobe_cpp._C (written in place into
  # python/msprobe_cpp, built against $PYTHON's torch). Its progress lines are the output.
  # Arguments: the targets to build (the demo needs two), else all.
  echo "== building in $BUILD"
  local fresh=()
  [ -f "$BUILD/CMakeCache.txt" ] || read -r -a fresh <<<"$(fresh_build_options)"
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" "${fresh[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$PYTHON" -DMSPROBE_WERROR="$MSPROBE_WERROR" \
    >"$BUILD/configure.log" 2>&1 || {
    cat "$BUILD/configure.log" >&2
    return 1
  }
  local targets=()
  for target in "$@"; do targets+=(--target "$target"); done
  cmake --build "$BUILD" --parallel "$(nproc)" "${targets[@]}"
}

# The other torches: PyTorch 2.x from PyPI (test-only, pinned), each in a venv of its own (no
# system site packages), the extension built against it by the same CMake project into
# <dir>/pkg/msprobe_cpp beside a copy of the package's Python files.
#   build-torch2:   requirements-torch2.txt, the newest torch on the machines' disk: the whole suite
#   build-torch213: requirements-torch213.txt, torch 2.13.0 (the last before C++20): the fast tier
TORCH2_DIR="${MSPROBE_TORCH2_DIR:-$ROOT/build-torch2}"
TORCH2_VENV="$TORCH2_DIR/venv"
TORCH2_PKG="$TORCH2_DIR/pkg"
TORCH213_DIR="${MSPROBE_TORCH213_DIR:-$ROOT/build-torch213}"

torch_venv() {
  # torch_venv DIR REQUIREMENTS: made once; made again only when the pinned requirements change.
  # Lines marked `# no-build-isolation` (an sdist whose setup imports torch) go in after the
  # others, built against the venv's torch.
  local dir="$1" req="$2"
  local venv="$dir/venv" stamp="$dir/venv/$(basename "$2")"
  if cmp -s "$req" "$stamp"; then return 0; fi
  echo "== making the venv $venv ($(grep -c '==' "$req") pinned packages, $(basename "$req"))"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q -r <(grep -v 'no-build-isolation' "$req")
  local late
  late="$(sed -n 's/^\([^#]*==[^ #]*\).*# no-build-isolation.*/\1/p' "$req")"
  if [ -n "$late" ]; then
    # shellcheck disable=SC2086 - one pinned name==version per word
    DS_BUILD_OPS=0 "$venv/bin/pip" install -q --no-build-isolation --no-deps $late
  fi
  # A test package that asked for another torch would have pulled a multi-GB CUDA build.
  local pinned torch_now
  pinned="$(sed -n 's/^torch==//p' "$req")"
  torch_now="$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
  if [ "$torch_now" != "$pinned" ]; then
    echo "$(basename "$req"): the venv's torch is $torch_now, not the pinned $pinned" >&2
    return 1
  fi
  cp "$req" "$stamp"
}

torch_venv_build() {
  # torch_venv_build DIR: the extension against DIR/venv's torch, into DIR/pkg.
  local dir="$1"
  local venv="$dir/venv" pkg="$dir/pkg"
  echo "== building the extension against $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)') in $dir/cmake"
  local fresh=()
  [ -f "$dir/cmake/CMakeCache.txt" ] || read -r -a fresh <<<"$(fresh_build_options)"
  mkdir -p "$dir/cmake" "$pkg/msprobe_cpp"
  cmake -S "$ROOT" -B "$dir/cmake" "${fresh[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$venv/bin/python" -DMSPROBE_BUILD_TESTS=OFF \
    -DMSPROBE_WERROR="$MSPROBE_WERROR" \
    -DMSPROBE_EXTENSION_OUTPUT_DIR="$pkg/msprobe_cpp" >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log" >&2
    return 1
  }
  # _C, and the test extension msprobe_cpp_units beside the package (tests/ext).
  cmake --build "$dir/cmake" --parallel "$(nproc)" --target msprobe_extension --target msprobe_units
  # The package's Python files beside that extension (copies: the source tree's own _C is 1.13's).
  rm -f "$pkg/msprobe_cpp/_built_for.py"  # what builds before issue 44 wrote
  cp -u "$ROOT"/python/msprobe_cpp/*.py "$pkg/msprobe_cpp/"
  cp -u "$ROOT"/python/*.py "$pkg/"  # msprobe_cpp_cli.py, the console command
}

# The names the benches and older scripts use: the newest torch's venv.
torch2_env() { torch_venv "$TORCH2_DIR" "$ROOT/requirements-torch2.txt"; }
torch2_build() { torch_venv_build "$TORCH2_DIR"; }
