#!/usr/bin/env bash
# The whole test suite: GoogleTest (ctest) for the core, pytest end to end, on both torches.
#
#   bash tools/test.sh            # both tiers (CI, .ci/run)
#   bash tools/test.sh --fast     # the fast tier: the checks, ctest and pytest -m "not slow"
#                                 # (no multi-process runs, installs, real-model or msprobe runs)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tier=()
case "${1:-}" in
  "") ;;
  --fast) tier=(-m "not slow") ;;
  *)
    echo "usage: bash tools/test.sh [--fast]" >&2
    exit 2
    ;;
esac
# Each phase's line says when it began, for the suite's time (issue 52: under 35 minutes fresh).
phase() { echo "== $* (at $((SECONDS / 60)) min $((SECONDS % 60)) s)"; }
install_packages
skip_torch2="${MSPROBE_SKIP_TORCH2:-0}"
# The torch 2 venvs are made beside the build and the torch 1.13 run (pip unpacking wheels is mostly
# disk, the build is compilers): ready, or nearly, when their phase comes (issue 56, the suite's time).
venvs_log="$(mktemp)"
venvs_pid=""
if [ "$skip_torch2" != 1 ]; then
  # A process group of its own, ended with the suite if the suite ends first (a failed phase).
  setsid bash -c "source '$ROOT/tools/common.sh'; torch2_env && torch_venv '$TORCH213_DIR' '$ROOT/requirements-torch213.txt'" \
    >"$venvs_log" 2>&1 &
  venvs_pid=$!
  trap 'kill -- "-$venvs_pid" 2>/dev/null || true' EXIT
fi
# pytest-xdist workers, each given whole files (tests/python/conftest.py puts the long ones first);
# MSPROBE_TEST_WORKERS=0 runs the suite in one process.
workers=(-n "${MSPROBE_TEST_WORKERS:-2}" --dist loadfile)
[ "${MSPROBE_TEST_WORKERS:-2}" = 0 ] && workers=()
phase "include graph, class and function sizes, crossings and ownership"
"$PYTHON" "$ROOT/tools/include_graph.py" --quiet
"$PYTHON" "$ROOT/tools/class_sizes.py" --quiet
"$PYTHON" "$ROOT/tools/function_sizes.py" --quiet
"$PYTHON" "$ROOT/tools/architecture_checks.py" --quiet
# A new compiler warning fails the suite (tools/common.sh; MSPROBE_WERROR=OFF lets it through).
build
phase "ctest"
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)"
phase "pytest${tier:+ (the fast tier)}"
cd "$ROOT"
# MSPROBE_TEST_INSTALL=1: also pip-install a fresh copy into a venv (tests/python/test_install.py).
# The torch 2 run's install test installs into Debian's torch as well, so this run leaves it to that
# one unless torch 2 is skipped.
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" MSPROBE_CPP_BIN="$BUILD/bin/msprobe-cpp" \
  MSPROBE_TEST_INSTALL="${MSPROBE_TEST_INSTALL:-$skip_torch2}" \
  "$PYTHON" -m pytest tests/python -q -p no:cacheprovider --durations="${MSPROBE_TEST_DURATIONS:-15}" "${workers[@]}" "${tier[@]}"

# The same suite on the newest PyTorch 2.x, and the fast tier on 2.13 (MSPROBE_SKIP_TORCH2=1 leaves
# both out, for a quick local run).
[ "$skip_torch2" = 1 ] && exit 0
torch_pytest() {
  # torch_pytest DIR [pytest arguments]: the suite against DIR/venv's torch and DIR/pkg's build.
  local dir="$1" version
  shift
  version="$("$dir/venv/bin/python" -c 'import torch; print(torch.__version__)')"
  phase "pytest $* on torch $version"
  # Inductor's kernel cache is keyed by the kernel's source, not the torch that built it: a kernel
  # another torch left in the shared /tmp/torchinductor_$USER, or in this folder before its venv
  # was made again with another torch, fails to load (undefined Sleef_*). One folder per torch.
  TORCHINDUCTOR_CACHE_DIR="$dir/inductor-cache-$version" \
    MSPROBE_CPP_PACKAGE_ROOT="$dir/pkg" PYTHONPATH="$dir/pkg" MSPROBE_CPP_BIN="$BUILD/bin/msprobe-cpp" \
    MSPROBE_TEST_INSTALL="${MSPROBE_TEST_INSTALL:-1}" \
    "$dir/venv/bin/python" -m pytest tests/python -q -p no:cacheprovider --durations="${MSPROBE_TEST_DURATIONS:-15}" "${workers[@]}" "$@"
}
phase "the torch 2 venv and build"
wait "$venvs_pid" || {
  cat "$venvs_log" >&2
  echo "the torch 2 venvs could not be made (above)" >&2
  exit 1
}
cat "$venvs_log"
rm -f "$venvs_log"
torch2_env  # made already: its stamp matches
torch2_build
torch_pytest "$TORCH2_DIR" "${tier[@]}"
phase "the torch 2.13 venv and build"
torch_venv "$TORCH213_DIR" "$ROOT/requirements-torch213.txt"
torch_venv_build "$TORCH213_DIR"
# 2.13's venv holds msprobe 26.2.0, the second msprobe peer: its tests run there too (not --fast).
if [ ${#tier[@]} -eq 0 ]; then
  torch_pytest "$TORCH213_DIR" -m "not slow or msprobe26"
else
  torch_pytest "$TORCH213_DIR" -m "not slow"
fi
phase "done"
