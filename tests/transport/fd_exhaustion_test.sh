#!/bin/sh
# Out of descriptors, libzmq's accept loop spins a core: a reader that runs out of file
# descriptors neither spins a core nor drops the trainer it serves. tilefeed-serve runs under a
# small `prlimit --nofile`; a trainer starts streaming, then a flood of plain TCP connections
# (more than the limit) arrives and stays open. The reader must say one clear line about the
# connections it refuses, use little CPU while the flood lasts (libzmq's accept loop retried
# EMFILE at full speed before), and finish the trainer's epochs.
#
# The trainer is stopped (SIGSTOP) while the flood is made and the reader's CPU is measured,
# so the trainer cannot finish before the flood, however slow or fast the machine; it is
# continued with the flood still open and must then finish. Both sides allow a peer 120 s of
# silence, far longer than the pause.
#
#   fd_exhaustion_test.sh PYTHON READER TRAIN MAKE_DEMO
set -u
python=$1
reader=$2
train=$3
make_demo=$4

command -v prlimit >/dev/null 2>&1 || {
  echo "fd_exhaustion_test: SKIP: no prlimit (util-linux)"
  exit 77
}
. "${0%/*}/../support/shell_test.sh"
begin_test fd_exhaustion_test
# CPU seconds x 100 (user + system) that process $1 has used so far.
cpu_ticks() {
  # Fields after the ")" that ends the command name: utime is the 12th, stime the 13th.
  sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
silence=120

timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 16 --val-per-class 0 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"

# 128 descriptors: enough for the reader and one trainer, far fewer than the flood.
prlimit --nofile=128:128 timeout 600 "$reader" --data "$work/data/train" \
  --bind 'tcp://127.0.0.1:*' --batch-size 8 --image-size 32 --epochs 8 --drop-last \
  --workers 1 --prefetch-depth 2 --timeout "$silence" >"$work/reader.log" 2>&1 &
reader_pid=$!
waitfor "$work/reader.log" " on tcp://" "$reader_pid"
endpoint=$(sed -n 's/.* on \(tcp:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/reader.log" | head -n 1)
port=${endpoint##*:}
serve_pid=$(pgrep -P "$reader_pid" | head -n 1)
[ -n "$serve_pid" ] || fail "no tilefeed-serve under timeout"

# A trainer of 8 epochs of 8 steps that cost 16 ms of CPU each (the synthetic core is
# calibrated), stopped after its first epoch until the flood has been measured: the 7 left
# need 0.9 s of CPU, so it cannot end between its epoch line and the stop.
timeout 600 "$train" --readers "$endpoint" --data "$work/data/train" --core synthetic:us-per-sample=2000 \
  --epochs 8 --batch-size 8 --image-size 32 --workers 1 \
  --reader timeout=$silence >"$work/train.log" 2>&1 &
train_pid=$!
waitfor "$work/train.log" "epoch 0:" "$train_pid"
trainer=$(pgrep -P "$train_pid" | head -n 1)
[ -n "$trainer" ] || fail "no train under timeout"
kill -STOP "$trainer"

timeout 200 "$python" - "$port" "$work/flood.ready" >"$work/flood.log" 2>&1 <<'PY' &
import socket, sys, time
held = []
for _ in range(400):
    try:
        held.append(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5))
    except OSError as e:
        print("connect:", e)
        break
open(sys.argv[2], "w").write(f"{len(held)}\n")
time.sleep(180)
PY
flood_pid=$!
waitfor "$work/flood.ready" "[0-9]" "$flood_pid"
# The reader's I/O thread has met the flood when it says so.
waitfor "$work/reader.log" "refused connections" "$reader_pid"

before=$(cpu_ticks "$serve_pid")
start=$(date +%s.%N)
sleep 4
after=$(cpu_ticks "$serve_pid")
elapsed=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
used=$((after - before))
share=$(awk -v u="$used" -v e="$elapsed" 'BEGIN { printf "%d", u / e }')
echo "fd_exhaustion_test: $(cat "$work/flood.ready") connections held; the reader used" \
  "$used CPU ticks in ${elapsed} s (${share}% of a core)"
[ "$share" -lt 40 ] || fail "the reader used ${share}% of a core while out of descriptors"
running "$train_pid" || fail "the trainer ended during the flood"
kill -CONT "$trainer"

wait "$train_pid" || fail "train exited $? during or after the flood"
grep -q "done: 64 steps" "$work/train.log" || fail "the trainer did not finish its 64 steps"
stop "$flood_pid"
wait "$reader_pid" || fail "the reader exited $?"
grep -q "refused connections: .*file descriptors" "$work/reader.log" ||
  fail "the reader did not say why it refused connections"
lines=$(grep -c "refused connections" "$work/reader.log")
[ "$lines" -le 3 ] || fail "$lines lines about refused connections (one, then a summary)"
echo "fd_exhaustion_test: OK"
