#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS seconds (default 10: CI's smoke run), JOBS at a
# time (default: nproc), from a clang ASan+UBSan tree, after making the seed corpora.
#   tests/fuzz/run_fuzzers.sh [SECONDS] [BUILD_DIR]
# A BUILD_DIR already configured with TILEFEED_BUILD_FUZZERS=ON is used as it is (CI passes
# its ASan tree, which ./run.sh test built with the fuzz targets); any other is configured
# here with clang, ASan + UBSan and coverage on everything (TILEFEED_FUZZ_COVERAGE), which
# is what a long run wants: tests/fuzz/run_fuzzers.sh 3600 (default BUILD_DIR build/fuzz).
# Crashes land in BUILD_DIR/fuzz-out/.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-10}
BUILD=${2:-build/fuzz}
command -v clang++ >/dev/null || { echo "run_fuzzers: clang++ missing: apt-get install clang libclang-rt-14-dev" >&2; exit 1; }
if ! grep -q '^TILEFEED_BUILD_FUZZERS:BOOL=ON$' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  # ccache when there is one (run.sh's package list has it; run.sh sets its base folder).
  launcher=()
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTILEFEED_SANITIZE=address,undefined \
    -DTILEFEED_BUILD_FUZZERS=ON -DTILEFEED_FUZZ_COVERAGE=ON -DTILEFEED_BUILD_BENCH=OFF \
    -DTILEFEED_BUILD_TOOLS=OFF -DTILEFEED_BUILD_PYTHON=OFF >/dev/null
fi
targets=$(cd tests/fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target make_seeds $targets
seeds="$BUILD/fuzz-seeds"
rm -rf "$seeds" && "$BUILD/tests/fuzz/make_seeds" "$seeds"
# fuzz_one TARGET: runs it on its corpus (seeded) for SECONDS_EACH; prints the end of its
# output, all of it when it fails. JOBS targets at a time (each is one process).
fuzz_one() {
  local t=$1 corpus="$BUILD/fuzz-corpus/$1" log="$BUILD/fuzz-out/$1.log"
  mkdir -p "$corpus" "$BUILD/fuzz-out/$t"
  local seed_dir="$seeds/${t%_fuzz}"
  [ -d "$seed_dir" ] && cp -n "$seed_dir"/* "$corpus"/ 2>/dev/null
  local rc=0
  "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$BUILD/fuzz-out/$t/" -print_final_stats=1 "$corpus" >"$log" 2>&1 || rc=$?
  echo "== $t for ${SECONDS_EACH}s: exit $rc"
  if [ $rc -eq 0 ]; then tail -4 "$log"; else cat "$log"; fi
  return $rc
}
export -f fuzz_one
export BUILD SECONDS_EACH seeds
# shellcheck disable=SC2086
printf '%s\n' $targets | xargs -P "${JOBS:-$(nproc)}" -I{} bash -c 'fuzz_one "$1"' _ {} || {
  echo "fuzzers: a target failed (its output above; inputs in $BUILD/fuzz-out/)" >&2
  exit 1
}
echo "fuzzers: all targets ran ${SECONDS_EACH}s without a crash"
