#!/bin/bash
# How long `pip install --no-build-isolation .` of a fresh clone takes, into a fresh venv, against
# Debian's torch and against the torch 2 test venv's (tools/common.sh torch2_env makes it).
#
#   bash bench/install_time.sh [COMMIT]      # default HEAD; run on an idle machine
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
commit="${1:-HEAD}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$ROOT" "$work/repo"
git -C "$work/repo" checkout -q "$commit"
/usr/bin/python3 -m venv --system-site-packages "$work/debian"
# A venv made from a venv sees only the base interpreter: the torch 2 venv's packages come in
# through a .pth file, as tests/python/test_install.py does it.
/usr/bin/python3 -m venv "$work/torch2"
site="$("$work/torch2/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
"$ROOT/build-torch2/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
  >"$site/torch_env.pth"
cd "$work/repo"
for venv in debian torch2; do
  start=$(date +%s.%N)
  "$work/$venv/bin/pip" install -q --no-build-isolation --no-index . >"$work/$venv.log" 2>&1 || {
    cat "$work/$venv.log" >&2
    exit 1
  }
  end=$(date +%s.%N)
  torch=$("$work/$venv/bin/python" -c "import torch; print(torch.__version__)")
  echo "$commit, torch $torch: $(python3 -c "print(round($end - $start, 1))") s"
done
