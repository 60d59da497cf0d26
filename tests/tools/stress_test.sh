#!/bin/sh
# tests/stress.sh lists every test that failed even once with its count, exits 1 then and 0
# when nothing failed, and leaves no busy loop behind. Runs it on a small ctest project
# (tests/support/stress_fixture) with a test that always fails and one that fails once.
#
#   stress_test.sh SOURCE_DIR
set -u
source=$1
. "${0%/*}/../support/shell_test.sh"
begin_test stress_test
fail() {
  echo "stress_test: FAIL: $*"
  [ -f "$work/out" ] && cat "$work/out"
  exit 1
}
cmake -S "$source/tests/support/stress_fixture" -B "$work/tree" >/dev/null 2>&1 ||
  fail "cannot configure the fixture"

JOBS=1 "$source/tests/stress.sh" 3 "$work/tree" >"$work/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "exit $rc with failing tests, not 1"
grep -q "^ *3 of 3  always_fails$" "$work/out" || fail "no '3 of 3  always_fails'"
grep -q "^ *1 of 3  second_run_fails$" "$work/out" || fail "no '1 of 3  second_run_fails'"
grep -q "passes" "$work/out" && fail "a passing test is listed"
grep -q "^stress: 3 of 3 run(s) had failures" "$work/out" || fail "no count of failed runs"
# The hog's busy loops are forks of the stress script, so their command line names this
# test's own folder: none may outlive the script.
[ -z "$(pgrep -f "$work/tree")" ] || fail "busy loops left behind: $(pgrep -af "$work/tree")"

JOBS=1 "$source/tests/stress.sh" 2 "$work/tree" -R '^passes$' >"$work/out" 2>&1 ||
  fail "exit $? with only a passing test"
grep -q "no test failed" "$work/out" || fail "no 'no test failed'"
"$source/tests/stress.sh" 2 "$work/none" >"$work/out" 2>&1
[ $? -eq 2 ] || fail "a folder that is not a ctest tree was not refused with exit 2"
echo "stress_test: OK"
