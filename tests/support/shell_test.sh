# Sourced by the shell tests (POSIX sh) that run the tools on data they make, some with a
# tilefeed-serve or a train in the background.
#
# The one pattern for what a test starts: every command runs under `timeout SECONDS`, so it
# ends even if the test is killed; the test stops a background command by sending TERM to
# its wrapper, which passes TERM on to the command (and the process group it made for it);
# and only end_test escalates, with KILL to that process group. A wrapper is never sent
# KILL alone: it cannot pass KILL on, and the command would outlive the test.
#
# begin_test NAME: makes $work, a temporary folder, with end_test as the EXIT trap (a test
# with more to undo sets its own EXIT trap that calls end_test last), and defines fail
# MESSAGE: prints "NAME: FAIL: MESSAGE" and the tail of every $work/*.log, then exits 1.
begin_test() {
  _bt_name=$1
  work=$(mktemp -d "${TMPDIR:-/tmp}/tilefeed-$1.XXXXXX") || exit 1
  trap end_test EXIT
  trap 'exit 1' INT TERM HUP
}
fail() {
  echo "$_bt_name: FAIL: $*"
  for f in "$work"/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
  done
  exit 1
}
#
# end_test: stops every process the test started that still runs, then removes $work.
end_test() {
  _et_children=
  read -r _et_children <"/proc/$$/task/$$/children" 2>/dev/null
  stop $_et_children
  rm -rf "$work"
}
#
# stop PID...: ends each process PID (a `timeout` wrapper or the command itself) and reaps
# it: TERM first; what still runs 10 s later gets KILL, with its process group (the one
# timeout made for its command). Returns at once for a PID already gone.
stop() {
  for _st_pid in "$@"; do kill -TERM "$_st_pid" 2>/dev/null; done
  _st_deadline=$(($(date +%s) + 10))
  for _st_pid in "$@"; do
    while running "$_st_pid" && [ "$(date +%s)" -lt "$_st_deadline" ]; do sleep 0.05; done
    if running "$_st_pid"; then
      kill -KILL "-$_st_pid" 2>/dev/null
      kill -KILL "$_st_pid" 2>/dev/null
    fi
    wait "$_st_pid" 2>/dev/null
  done
  return 0
}
#
# running PID: whether PID is a process that has not exited (a zombie has).
running() {
  grep -qs '^State:[[:space:]]*[^Z]' "/proc/$1/status"
}
#
# waitfor LOG PATTERN PID [SECONDS]: waits until LOG has a line matching the grep PATTERN;
# calls fail() if PID (the process writing LOG) exits without one, or after SECONDS (default
# 300: a hang). Polls every 50 ms: the line is the only signal the process gives.
waitfor() {
  _wf_deadline=$(($(date +%s) + ${4:-300}))
  until grep -q "$2" "$1" 2>/dev/null; do
    running "$3" || grep -q "$2" "$1" 2>/dev/null || fail "no '$2' in $1: its process exited"
    [ "$(date +%s)" -lt "$_wf_deadline" ] || fail "no '$2' in $1 within ${4:-300} s"
    sleep 0.05
  done
}
#
# reader_endpoint LOG PID [SECONDS]: waitfor the reader started as PID to name its endpoint
# in LOG (its first line ends "... on tcp://HOST:PORT", or ipc://) and sets $endpoint to it.
reader_endpoint() {
  waitfor "$1" " on \(tcp\|ipc\)://" "$2" "${3:-300}"
  endpoint=$(sed -n 's/.* on \(\(tcp\|ipc\):\/\/[^ ]*\)$/\1/p' "$1" | head -n 1)
}
