#!/bin/sh
# SIGTERM or SIGINT of poprun ended the job with rc 1 and no line. poprun must
# forward the signal to mpirun, say so in one line, and exit 128 + the signal's number;
# the job's processes must be gone.
#
#   poprun_signal_test.sh POPRUN
set -u
poprun=$1
. "${0%/*}/../support/shell_test.sh"
begin_test poprun_signal_test
export OMPI_MCA_btl_vader_backing_directory="$work"

for signal in TERM INT; do
  case $signal in TERM) want=143 ;; INT) want=130 ;; esac
  # A job that would run for 100 s: one instance that says it started, then sleeps.
  "$poprun" --instances 1 -- /bin/sh -c "echo started-$signal; exec sleep 100" \
    >"$work/$signal.out.log" 2>"$work/$signal.err.log" &
  pid=$!
  i=0
  while ! grep -q "started-$signal" "$work/$signal.out.log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 1200 ] && fail "SIG$signal: the job did not start within 60 s"
    sleep 0.05
  done
  kill -"$signal" $pid
  # Bounded wait for poprun itself (mpirun tears the job down within seconds).
  i=0
  while running $pid; do
    i=$((i + 1))
    [ $i -gt 1200 ] && fail "SIG$signal: poprun still running 60 s later"
    sleep 0.05
  done
  wait $pid
  rc=$?
  [ $rc -eq $want ] || fail "SIG$signal: poprun exited $rc, expected $want"
  grep -q "poprun: SIG$signal: forwarded to mpirun (pid [0-9]*), which ends the job" \
    "$work/$signal.err.log" || fail "SIG$signal: no line saying the signal was forwarded"
  pgrep -f "sleep 100" >/dev/null 2>&1 && pgrep -af "started-$signal" >/dev/null 2>&1 &&
    fail "SIG$signal: the job's process is still there"
  echo "poprun_signal_test: SIG$signal: rc $rc, $(grep -o "poprun: SIG.*" "$work/$signal.err.log")"
done
echo "poprun_signal_test: OK"
