#!/usr/bin/env bash
# Fuzzes the readers of user files (dump.json, ignore rules, config.json) with libFuzzer under
# ASan+UBSan. Run by hand, not in CI: it takes minutes and its findings need a person.
#
#   tools/fuzz.sh [SECONDS]    # each target runs SECONDS (default 60)
#
# Prints, per target, libFuzzer's run count and whether it crashed; exits 1 if any target did.
# Crash inputs land in build-fuzz/artifacts/<target>/, logs in build-fuzz/logs/<target>.log.
# Reproduce one with: build-fuzz/bin/<target> <crash file>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-fuzz"
SECONDS_EACH="${1:-60}"
TARGETS=(fuzz_dump_reader fuzz_rules fuzz_config)
# Large enough for a real dump.json's first calls, small enough to keep the run rate up; longer
# seeds are cut to this.
MAX_LEN=65536

if ! [[ "$SECONDS_EACH" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: tools/fuzz.sh [SECONDS per target, default 60]" >&2
  exit 2
fi

# libFuzzer ships with clang's compiler-rt, not with gcc; checking by linking a trivial target
# also catches clang without libclang-rt-dev.
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null ||
  ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
  clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null; then
  echo "clang with libFuzzer is needed: apt-get install clang libclang-rt-dev" >&2
  exit 2
fi

# Its own build folder: the fuzz flags would otherwise replace those of build/. -O1 -g, the usual
# fuzzing trade-off between speed and readable stacks; Debug keeps assertions on. At most two
# jobs: this is a 2-core machine shared with other builds.
echo "== building in $BUILD"
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DMSPROBE_FUZZ=ON -DMSPROBE_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 >/dev/null
cmake --build "$BUILD" -j2 --target "${TARGETS[@]}" >/dev/null

# Seeds are copied, never fuzzed in place: libFuzzer writes new inputs into its corpus folder and
# tests/data must stay as msprobe wrote it. The corpus is kept between runs so coverage grows;
# delete build-fuzz/corpus to start over.
seed() {  # seed TARGET FILE...: copies each FILE under a name unique to its path
  local dir="$BUILD/corpus/$1" f
  shift
  mkdir -p "$dir"
  for f in "$@"; do
    cp "$f" "$dir/$(realpath --relative-to="$ROOT" "$f" | tr '/' '_')"
  done
}
shopt -s nullglob globstar
seed fuzz_dump_reader "$ROOT"/tests/data/**/dump.json "$ROOT"/examples/dumps/**/dump.json \
  "$ROOT"/fuzz/seeds/dump/*
seed fuzz_rules "$ROOT"/rules/*.yaml "$ROOT"/tests/data/**/*.yaml "$ROOT"/fuzz/seeds/rules/*
seed fuzz_config "$ROOT"/tests/data/**/config*.json "$ROOT"/examples/*config*.json \
  "$ROOT"/fuzz/seeds/config/*
shopt -u nullglob globstar

declare -A DICT=([fuzz_dump_reader]=json.dict [fuzz_rules]=yaml.dict [fuzz_config]=json.dict)
# Stack traces for UBSan findings too; the build already makes them fatal.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

crashed=0
summary=()
for t in "${TARGETS[@]}"; do
  mkdir -p "$BUILD/artifacts/$t" "$BUILD/logs"
  log="$BUILD/logs/$t.log"
  echo "== $t for ${SECONDS_EACH}s (log: $log)"
  # -timeout: an input taking 10 s is a hang, which is a finding like a crash.
  rc=0
  "$BUILD/bin/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -max_len="$MAX_LEN" \
    -timeout=10 -print_final_stats=1 -dict="$ROOT/fuzz/${DICT[$t]}" \
    -artifact_prefix="$BUILD/artifacts/$t/" "$BUILD/corpus/$t" >"$log" 2>&1 || rc=$?
  # "Done N runs" is printed only when the time runs out; after a crash the final stats still
  # count the runs.
  runs="$(grep -oE 'Done [0-9]+ runs' "$log" | tail -n1 | grep -oE '[0-9]+' || true)"
  [ -n "$runs" ] || runs="$(grep -oE 'number_of_executed_units: [0-9]+' "$log" | tail -n1 |
    grep -oE '[0-9]+' || true)"
  if [ "$rc" -eq 0 ]; then
    summary+=("$t: ${runs:-?} runs, no crash")
  else
    crashed=1
    artifact="$(grep -oE "Test unit written to [^ ]+" "$log" | tail -n1 | cut -d' ' -f5 || true)"
    summary+=("$t: ${runs:-?} runs, CRASHED (exit $rc) ${artifact:-see $log}")
  fi
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$crashed"
