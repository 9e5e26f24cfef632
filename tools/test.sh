#!/usr/bin/env bash
# The whole test suite: GoogleTest (ctest) for the core, pytest end to end.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
build >/dev/null
echo "== ctest"
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)"
echo "== pytest"
cd "$ROOT"
PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" MSPROBE_CPP_BIN="$BUILD/bin/msprobe-cpp" \
  "$PYTHON" -m pytest tests/python -q -p no:cacheprovider
