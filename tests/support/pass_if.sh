#!/usr/bin/env bash
# pass_if.sh REGEX COMMAND [ARG...]: runs COMMAND, passing its output (stdout and stderr)
# through, and exits 0 only if COMMAND exited 0 and a line of that output matches the
# extended regular expression REGEX. Otherwise it exits with COMMAND's code (77, ctest's
# "skipped", stays 77), or 1 when COMMAND exited 0 without the line.
#
# ctest's PASS_REGULAR_EXPRESSION ignores the exit code, so a program that printed its
# "OK" and then crashed (a sanitizer report at exit, an abort in MPI_Finalize) would pass.
# Tests with a pass line use this instead (tests/CMakeLists.txt refuses the property).
set -uo pipefail
regex=$1
shift
log=$(mktemp "${TMPDIR:-/tmp}/tilefeed-pass-if.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "pass_if: $1 exited with $rc" >&2
  exit "$rc"
fi
if ! grep -Eq -e "$regex" "$log"; then
  echo "pass_if: $1 exited 0 without a line matching '$regex'" >&2
  exit 1
fi
