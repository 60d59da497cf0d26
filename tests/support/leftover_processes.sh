#!/usr/bin/env bash
# leftover_processes.sh TREE: run after a ctest tier of the build tree TREE. Fails, naming
# each, if a process started from TREE still runs (its executable, or a word of its command
# line, under TREE): a test's cleanup stops what it started (tests/support/shell_test.sh),
# or it would outlive the suite, orphaned, serving a deleted folder.
set -uo pipefail
tree=$(realpath "$1")
left=0
for dir in /proc/[0-9]*; do
  exe=$(readlink "$dir/exe" 2>/dev/null)
  command=$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline") || continue
  case "$exe $command" in
    *leftover_processes.sh*) ;;  # this check itself
    "$tree"/* | *" $tree"/*)
      echo "still running after the tests of $tree: pid ${dir#/proc/}: $command" >&2
      left=$((left + 1))
      ;;
  esac
done
[ "$left" -eq 0 ] || { echo "$left process(es) started from $tree outlived their tests" >&2; exit 1; }
