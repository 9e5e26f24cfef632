#!/usr/bin/env bash
# The hooks' cost before and after a change, in one run: bench/hook_overhead.py and
# bench/real_model_overhead.py against a package built from an earlier commit (BEFORE_1 for the
# Debian torch, BEFORE_2 for the torch 2 venv: folders holding msprobe_cpp/) and against this
# tree's build, one after the other per torch, so both see the same machine.
#
#   BEFORE_1=/tmp/before/t1 BEFORE_2=/tmp/before/t2 bash bench/before_after.sh
#
# Make a BEFORE folder by building the earlier commit (tools/common.sh build, torch2_build) and
# copying python/msprobe_cpp and build-torch2/pkg/msprobe_cpp out of it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
: "${BEFORE_1:?a folder with the earlier commit's msprobe_cpp/ built for the Debian torch}"
: "${BEFORE_2:?a folder with the earlier commit's msprobe_cpp/ built for the torch 2 venv}"
STEPS="${STEPS:-20}"
ROUNDS="${ROUNDS:-4}"
export OPENBLAS_NUM_THREADS=1

run() {  # label python package_root models_for_real_model_bench
  local label=$1 python=$2 root=$3 zoo=$4
  echo "== $label"
  MSPROBE_CPP_PACKAGE_ROOT="$root" "$python" "$ROOT/bench/hook_overhead.py" --models gpt \
    --configs overflow-L1,mix --steps "$STEPS" --rounds "$ROUNDS"
  MSPROBE_CPP_PACKAGE_ROOT="$root" "$python" "$ROOT/bench/real_model_overhead.py" --models "$zoo" \
    --configs overflow-L1,mix --steps "$STEPS" --rounds "$ROUNDS"
}

run "torch 1.13, before" /usr/bin/python3 "$BEFORE_1" resnet18
run "torch 1.13, after" /usr/bin/python3 "$ROOT/python" resnet18
torch2="$("$ROOT/build-torch2/venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
run "torch $torch2, before" "$ROOT/build-torch2/venv/bin/python" "$BEFORE_2" hf_gpt2
run "torch $torch2, after" "$ROOT/build-torch2/venv/bin/python" "$ROOT/build-torch2/pkg" hf_gpt2
