#!/usr/bin/env bash
# Proves the sources build for aarch64 (Ascend NPU hosts): compiles the core, the command line and
# the statistics kernel (the one file with x86-only code, behind a guard) with Debian's cross
# compiler. Objects only: linking would need aarch64 builds of torch and yaml-cpp. Run by hand:
#   bash tools/cross_check_aarch64.sh     (apt-get install g++-aarch64-linux-gnu)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CXX=aarch64-linux-gnu-g++
if ! command -v "$CXX" >/dev/null; then
  echo "needs $CXX: apt-get install g++-aarch64-linux-gnu" >&2
  exit 2
fi
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
TORCH_INCLUDE="$(/usr/bin/python3 -c 'import torch.utils.cpp_extension as e; print(" ".join("-isystem" + p for p in e.include_paths()))')"
PY_INCLUDE="-isystem$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
FLAGS=(-std=c++17 -O2 -Wall -Wextra -Werror -I"$ROOT/csrc" -DMSPROBE_VERSION=\"cross\")
# The shipped rules' generated source is not needed to prove the code compiles.
for f in "$ROOT"/csrc/core/*.cpp "$ROOT"/csrc/cli/*.cpp; do
  "$CXX" "${FLAGS[@]}" -c "$f" -o "$OUT/$(basename "$f").o"
done
# torch's and Python's headers are the same on every architecture; the kernel file is compiled
# against the host's copies.
# shellcheck disable=SC2086
"$CXX" "${FLAGS[@]}" $TORCH_INCLUDE $PY_INCLUDE -c "$ROOT/csrc/live/stats/tensor_stats.cpp" \
  -o "$OUT/tensor_stats.o"
file "$OUT/tensor_stats.o" | sed "s|$OUT/||"
echo "aarch64: csrc/core, csrc/cli and csrc/live/stats/tensor_stats.cpp compile ($(ls "$OUT" | wc -l) objects)"
