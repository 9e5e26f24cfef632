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
# The torch 2 venvs and their extensions are made in the background from the start, at the lowest
# priority: pip's unpacking is mostly disk, and the compilers get the CPU that the build and the
# pytest runs leave idle (17 % of the torch 1.13 run's, 6 % of torch 2.14's), and all of it once a
# phase waits for them (issue 56, the suite's time). Each stage leaves a file in $stages when done.
stages="$(mktemp -d)"
background_pid=""
if [ "$skip_torch2" != 1 ]; then
  # A process group of its own, ended with the suite if the suite ends first (a failed phase).
  # Statements, not an && list: `set -e` ends the job at a failed step only outside one.
  setsid nice -n 19 bash -c "source '$ROOT/tools/common.sh'
    torch2_env; torch_venv '$TORCH213_DIR' '$ROOT/requirements-torch213.txt'
    torch2_build >'$stages/build-torch2.log' 2>&1; touch '$stages/build-torch2'
    torch_venv_build '$TORCH213_DIR' >'$stages/build-torch213.log' 2>&1; touch '$stages/build-torch213'" \
    >"$stages/venvs.log" 2>&1 &
  background_pid=$!
fi
trap '[ -z "$background_pid" ] || kill -- "-$background_pid" 2>/dev/null || true; rm -rf "$stages"' EXIT
wait_for() {
  # wait_for STAGE LOG...: until the background job has done STAGE; then those logs of it, or all
  # of them and the suite's end if the job ended without doing it.
  local stage="$1"
  shift
  while [ ! -e "$stages/$stage" ] && kill -0 "$background_pid" 2>/dev/null; do sleep 1; done
  if [ ! -e "$stages/$stage" ]; then
    cat "$stages"/*.log >&2
    echo "the torch 2 venvs or extensions could not be made (above)" >&2
    exit 1
  fi
  for log in "$@"; do cat "$stages/$log"; done
}
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
phase "the torch 2 venvs and builds"
wait_for build-torch2 venvs.log build-torch2.log
torch_pytest "$TORCH2_DIR" "${tier[@]}"
phase "the torch 2.13 build"
wait_for build-torch213 build-torch213.log
# 2.13's venv holds msprobe 26.2.0, the second msprobe peer: its tests run there too (not --fast).
if [ ${#tier[@]} -eq 0 ]; then
  torch_pytest "$TORCH213_DIR" -m "not slow or msprobe26"
else
  torch_pytest "$TORCH213_DIR" -m "not slow"
fi
phase "done"
