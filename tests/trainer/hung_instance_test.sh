#!/bin/sh
# A hung instance once hung the job forever in the all-reduce: a stopped (SIGSTOP) or killed
# (SIGKILL) instance of a 2-instance `poprun ... train` ends the whole job. With `stop`, the
# other instance's collective watchdog (--collective-timeout) names the instance that did not
# arrive and aborts the job; every process must be gone within the timeout + 60 s (the watchdog
# ends a job that would otherwise hang for ever; the margin is for a loaded machine under ASan,
# not a figure: bench/ measures stop-to-gone). With `kill`, mpirun notices the dead process.
# Prints each run's signal-to-gone time and the median.
#
#   hung_instance_test.sh TRAIN POPRUN MAKE_DEMO stop|kill [RUNS] [TIMEOUT_S]
set -u
train=$1
poprun=$2
make_demo=$3
mode=$4
runs=${5:-1}
timeout_s=${6:-20}
bound=$((timeout_s + 60))

. "${0%/*}/../support/shell_test.sh"
begin_test hung_instance_test
job=
# The processes under poprun ($1): mpirun, and the instances it starts.
below() {
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$c"
    ps -o pid= --ppid "$c" 2>/dev/null
  done
}
# A stopped instance takes no TERM: KILL the job's processes themselves, then end_test.
trap '[ -n "$job" ] && for p in $(below "$job") "$job"; do kill -KILL "$p" 2>/dev/null; done; end_test' EXIT
now() { date +%s.%N; }

# OpenMPI's shared-memory segments (vader_segment.*) outlive an aborted job; here they go
# to the work folder, which is removed on the way out.
export OMPI_MCA_btl_vader_backing_directory="$work"

timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 12 --val-per-class 2 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo: $(cat "$work/make_demo.log")"

times=""
run=0
while [ $run -lt "$runs" ]; do
  run=$((run + 1))
  # $! is poprun; its child mpirun starts the instances as its children.
  "$poprun" --instances 2 -- "$train" --data "$work/data/train" --image-size 32 \
    --batch-size 4 --epochs 1000000 --workers 1 --core reference:hidden=16 --check-every 0 \
    --collective-timeout "$timeout_s" >"$work/job.log" 2>&1 &
  job=$!
  # Wait (bounded) until training runs: the first epoch line.
  waitfor "$work/job.log" "epoch 0:" "$job"
  pids=$(below "$job")
  victim=
  for p in $pids; do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      victim=$p
    fi
  done
  [ -n "$victim" ] || fail "no instance 1 among poprun's descendants ($pids)"
  if [ "$mode" = stop ]; then kill -STOP "$victim"; else kill -KILL "$victim"; fi
  start=$(now)
  deadline=$(($(date +%s) + bound + 5))
  while :; do
    alive=
    for p in $pids $job; do running "$p" && alive="$alive $p"; done
    [ -z "$alive" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "still alive $bound s after SIG$mode:$alive"
    sleep 0.05
  done
  gone=$(awk -v a="$(now)" -v b="$start" 'BEGIN { printf "%.2f", a - b }')
  wait "$job"
  rc=$?
  job=
  [ $rc -ne 0 ] || fail "the job exited 0 after SIG$mode of an instance"
  if [ "$mode" = stop ]; then
    grep -q "instance 1 did not arrive" "$work/job.log" ||
      fail "no line naming instance 1 as the one that did not arrive"
    awk -v g="$gone" -v b="$bound" 'BEGIN { exit !(g <= b) }' ||
      fail "gone after $gone s, more than $bound s"
  fi
  echo "hung_instance_test: run $run: SIG$mode -> every process gone in $gone s (rc $rc)"
  times="$times $gone"
done
grep -m1 "did not arrive\|exited on signal\|aborted" "$work/job.log"
median=$(for t in $times; do echo "$t"; done | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
echo "hung_instance_test: OK: SIG$mode, $runs run(s), median $median s, all:$times"
