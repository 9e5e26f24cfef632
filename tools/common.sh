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
  python3 python3-pytest python3-setuptools
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
  echo "== building in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)"
  # The extension msprobe_cpp._C, built in place into python/msprobe_cpp (no build isolation:
  # nothing can be downloaded).
  local log="$BUILD/build_ext.log"
  mkdir -p "$BUILD"
  if ! (cd "$ROOT" && MAX_JOBS="$(nproc)" "$PYTHON" setup.py build_ext --inplace >"$log" 2>&1); then
    tail -n 40 "$log" >&2
    echo "extension build failed; full log: $log" >&2
    return 1
  fi
}
