#!/usr/bin/env bash
# The demo: what `msprobe-cpp check` finds in the dump of an fp16 training step that overflowed.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
build >/dev/null
DUMP="$ROOT/examples/dumps/gpt_fp16_overflow/step3/rank/dump.json"
echo "== msprobe-cpp check $DUMP --format text"
set +e
"$BUILD/bin/msprobe-cpp" check "$DUMP" --format text
status=$?
set -e
echo "== exit status $status (0 clean, 1 anomalies found, 2 unreadable input)"
echo "== the JSON report: $BUILD/bin/msprobe-cpp check $DUMP"
[ "$status" -le 1 ]
