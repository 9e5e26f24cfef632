#!/usr/bin/env bash
# The demo: a small GPT trains under msprobe_cpp; its loss scaler skips the first steps, an fp16
# op overflows at step 8 and is stopped there; then `msprobe-cpp check` reads the dump it left.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
build msprobe_extension msprobe-cpp  # what the demo runs: not the test binaries
cd "$ROOT"
echo "== /usr/bin/python3 examples/train_overflow_demo.py"
"$PYTHON" examples/train_overflow_demo.py
echo
echo "== msprobe-cpp check demo_dump --format text"
set +e
"$BUILD/bin/msprobe-cpp" check demo_dump --format text
status=$?
set -e
echo "== exit status $status (0 clean, 1 anomalies found, 2 unreadable input)"
[ "$status" -le 1 ]
