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
  echo "== building in $BUILD"
  local generator=()
  [ -f "$BUILD/CMakeCache.txt" ] || generator=(-G Ninja)
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$PYTHON" >"$BUILD/configure.log" 2>&1 || {
    cat "$BUILD/configure.log" >&2
    return 1
  }
  cmake --build "$BUILD" --parallel "$(nproc)"
}
