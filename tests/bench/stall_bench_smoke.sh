#!/bin/sh
# stall_bench end to end on a tiny demo dataset: every demand point runs its rounds (the
# capacity measurements, the loader-fed runs, the interleaved runs with their dropper
# thread) and prints its row, and the bench exits 0 (a valid run) or 3 (a run it judged
# invalid: on a tiny dataset and a shared machine the capacity may move). Figures are not
# checked here -- they are the benchmark's business -- only that it runs to the end and
# reports every point.
#
#   stall_bench_smoke.sh STALL_BENCH MAKE_DEMO
set -u
bench=$1
make_demo=$2

. "${0%/*}/../support/shell_test.sh"
begin_test stall_bench_smoke
fail() {
  echo "stall_bench_smoke: FAIL: $*"
  [ -f "$work/bench.log" ] && cat "$work/bench.log"
  exit 1
}

"$make_demo" --classes 2 --train-per-class 48 --val-per-class 0 --seed 5 --threads 1 \
  "$work/data" >"$work/demo.log" 2>&1 || fail "tilefeed-make-demo failed"

timeout 240 "$bench" --data "$work/data" --batch 4 --image-size 32 --steps 6 \
  --capacity-steps 6 --rounds 2 --tune-rounds 1 --mixed-seconds 0.5 \
  --json "$work/bench.json" >"$work/bench.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || fail "exit status $rc (0: valid run, 3: invalid run)"
for point in 50 90 120; do
  grep -Eq "^ +$point% " "$work/bench.log" || fail "no row for the $point % point"
done
grep -q "interleaved steps of the rounds judged" "$work/bench.log" || fail "no interleaved steps reported"
[ "$(grep -c '"demand":' "$work/bench.json")" -eq 3 ] || fail "the JSON lines lack a point"
grep -Eq "^run (valid|INVALID): [0-3] of 3 goals met" "$work/bench.log" || fail "no verdict line"
echo "stall_bench_smoke: OK (exit $rc)"
