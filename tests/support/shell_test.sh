# Sourced by the shell tests (POSIX sh) that run the tools on data they make, some with a
# tilefeed-serve in the background.
#
# begin_test NAME: makes $work, a temporary folder removed at exit (the reader started as
# $reader_pid, if any, stopped first), and defines fail MESSAGE: prints "NAME: FAIL: MESSAGE"
# and the tail of every $work/*.log, then exits 1.
begin_test() {
  _bt_name=$1
  work=$(mktemp -d "${TMPDIR:-/tmp}/tilefeed-$1.XXXXXX") || exit 1
  reader_pid=
  trap 'stop_reader "$reader_pid"; rm -rf "$work"' EXIT
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
# stop_reader PID: for the sourcing test's EXIT trap. Ends the reader started as PID if it
# still runs (TERM; KILL a second later for one that ignores TERM) and reaps it, so no
# reader outlives its test. PID may be empty (no reader started).
stop_reader() {
  [ -n "$1" ] || return 0
  if kill -0 "$1" 2>/dev/null; then
    kill -TERM "$1" 2>/dev/null
    sleep 1
    kill -KILL "$1" 2>/dev/null
  fi
  wait "$1" 2>/dev/null
  return 0
}
#
# reader_endpoint LOG PID [SECONDS]: waits until the reader started as PID, whose output
# goes to LOG, names its endpoint (its first line ends "... on tcp://HOST:PORT", or ipc://)
# and sets $endpoint to it. Calls the sourcing test's fail() if PID exits first or if
# SECONDS (default 300: a hang; a reader that fails exits, which ends the wait at once) pass.
# Polls the log every 50 ms: the log line is the only signal the reader gives.
reader_endpoint() {
  _re_log=$1
  _re_pid=$2
  _re_deadline=$(($(date +%s) + ${3:-300}))
  endpoint=
  while [ "$(date +%s)" -lt "$_re_deadline" ]; do
    endpoint=$(sed -n 's/.* on \(\(tcp\|ipc\):\/\/[^ ]*\)$/\1/p' "$_re_log" | head -n 1)
    [ -n "$endpoint" ] && return 0
    kill -0 "$_re_pid" 2>/dev/null || fail "the reader ($_re_log) exited before serving"
    sleep 0.05
  done
  fail "the reader ($_re_log) named no endpoint within ${3:-300} s"
}
