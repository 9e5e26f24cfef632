#!/usr/bin/env bash
# The whole test suite: GoogleTest (ctest) for the core, pytest end to end.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
build
echo "== ctest"
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)"
echo "== pytest"
cd "$ROOT"
# MSPROBE_TEST_INSTALL=1: also pip-install a fresh copy into a venv (tests/python/test_install.py).
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" MSPROBE_CPP_BIN="$BUILD/bin/msprobe-cpp" \
  MSPROBE_TEST_INSTALL="${MSPROBE_TEST_INSTALL:-1}" \
  "$PYTHON" -m pytest tests/python -q -p no:cacheprovider
