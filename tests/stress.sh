#!/usr/bin/env bash
# Runs ctest N times beside a CPU hog and lists every test that failed even once, with how
# many times: a test that fails by chance shows up here before it fails CI.
#
#   tests/stress.sh N [TREE] [CTEST ARGS...]
#   ./run.sh stress N [TREE] [CTEST ARGS...]
#
# TREE: a build tree of ./run.sh test (default build/ci, the Release one; build/asan,
# build/tsan). CTEST ARGS choose the tests and are passed to ctest as they are, e.g.
#   tests/stress.sh 10 build/asan -R '^train_readers_faults$'
#   tests/stress.sh 3 build/tsan -L '^tsan$'
#   tests/stress.sh 3                       # the whole Release suite, 3 times
# The hog: two busy loops at normal priority (as many as this 2-core machine has cores),
# killed when the script ends, however it ends. ctest runs with -j JOBS (default: nproc)
# and the sanitizer options CI uses (tests/sanitizer_env.sh). Each run's ctest output is
# kept in TREE/stress/run-K.log. Exit status 0 only if every run passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N [TREE] [CTEST ARGS...]  (N >= 1 runs)" >&2
  exit 2
fi
runs=$1
shift
tree=build/ci
if [ $# -gt 0 ] && [[ $1 != -* ]]; then
  tree=$1
  shift
fi
if [ ! -f "$tree/CTestTestfile.cmake" ]; then
  echo "stress: $tree is not a built ctest tree (./run.sh test builds build/ci, build/asan," \
    "build/tsan)" >&2
  exit 2
fi
jobs=${JOBS:-$(nproc)}
# shellcheck source=tests/sanitizer_env.sh
. tests/sanitizer_env.sh

hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${hogs[@]}"; do wait "$pid" 2>/dev/null; done
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM HUP
for _ in 1 2; do
  (while :; do :; done) &
  hogs+=($!)
done

logs="$tree/stress"
mkdir -p "$logs"
declare -A failures=()
failed_runs=0
for run in $(seq 1 "$runs"); do
  start=$SECONDS
  log="$logs/run-$run.log"
  ctest --test-dir "$tree" -j "$jobs" --timeout 1500 --output-on-failure "$@" >"$log" 2>&1
  rc=$?
  # "  12 - Name (Failed)" lines after "The following tests FAILED:" (Failed, Timeout,
  # SEGFAULT, Subprocess aborted, ...); skipped tests are listed elsewhere.
  failed=$(sed -n '/The following tests FAILED:/,$p' "$log" |
    sed -n 's/^[[:space:]]*[0-9]* - \(.*\) ([^)]*)$/\1/p' || true)
  summary=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1)
  if [ $rc -ne 0 ] && [ -z "$failed" ]; then
    failed="(ctest exited $rc without naming a test; see $log)"
  fi
  [ -n "$failed" ] && failed_runs=$((failed_runs + 1))
  while IFS= read -r name; do
    [ -n "$name" ] && failures[$name]=$((${failures[$name]:-0} + 1))
  done <<<"$failed"
  echo "stress: run $run/$runs: ${summary:-no summary} ($((SECONDS - start)) s, $log)"
done

if [ ${#failures[@]} -eq 0 ]; then
  echo "stress: $runs run(s) of ctest $* in $tree beside 2 busy loops: no test failed"
  exit 0
fi
echo "stress: $failed_runs of $runs run(s) had failures; tests that failed at least once:"
for name in "${!failures[@]}"; do
  printf '%6d of %d  %s\n' "${failures[$name]}" "$runs" "$name"
done | sort -rn
exit 1
