#!/bin/sh
# Old spellings keep working: a job run with tilefeed-serve --shard, --heartbeat-ms and
# --timeout-ms and train --reader-timeout-ms, --reconnect-window-ms trains on the same samples
# as the job run with --slice, --heartbeat, --timeout, --reader-timeout and --reconnect-window
# (seconds), and each tool names each old spelling it was given in exactly one warning line
# (tools/option_flags.h).
#
#   deprecated_aliases_test.sh TRAIN READER MAKE_DEMO
#
# Bounded in time (every process runs under timeout) and the reader is always reaped.
set -u
train=$1
reader=$2
make_demo=$3

. "${0%/*}/../support/reader_endpoint.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/tilefeed-aliases.XXXXXX") || exit 1
reader_pid=
cleanup() {
  stop_reader "$reader_pid"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() {
  echo "deprecated_aliases_test: FAIL: $*"
  for f in "$work"/*.log; do
    [ -f "$f" ] && { echo "--- $f"; cat "$f"; }
  done
  exit 1
}

# 4 classes x 8 training images: 32 samples, 4 batches of 8 per epoch.
timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 8 --val-per-class 0 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"

# run NAME "READER FLAGS" "TRAIN FLAGS": one reader and one trainer, 2 epochs.
run() {
  # shellcheck disable=SC2086 # the flags are words
  timeout 600 "$reader" --data "$work/data/train" --bind 'tcp://127.0.0.1:*' --batch-size 8 \
    --image-size 32 --epochs 2 --workers 1 --prefetch 2 $2 >"$work/$1.reader.log" 2>&1 &
  reader_pid=$!
  reader_endpoint "$work/$1.reader.log" "$reader_pid"
  # shellcheck disable=SC2086
  timeout 300 "$train" --readers "$endpoint" --data "$work/data" --core synthetic \
    --us-per-sample 50 --batch-size 8 --image-size 32 --epochs 2 --workers 1 \
    --trace-samples "$work/$1.trace" $3 >"$work/$1.train.log" 2>&1 ||
    fail "train ($1) exited with $?"
  wait "$reader_pid" || fail "the reader ($1) exited with $?"
  reader_pid=
  grep -q "done: 8 steps" "$work/$1.train.log" || fail "train ($1) did not finish 8 steps"
  grep -q "(slice 0/1) on tcp://" "$work/$1.reader.log" || fail "the reader ($1) serves no slice 0/1"
}
run new "--slice 0/1 --heartbeat 0.5 --timeout 60" \
  "--reader-timeout 60 --reconnect --reconnect-window 60"
run old "--shard 0/1 --heartbeat-ms 500 --timeout-ms 60000" \
  "--reader-timeout-ms 60000 --reconnect --reconnect-window-ms 60000"

cmp -s "$work/new.trace.0" "$work/old.trace.0" || fail "the old spellings trained on other samples"
[ -s "$work/new.trace.0" ] || fail "no samples traced"
! grep -q "deprecated" "$work/new.reader.log" "$work/new.train.log" ||
  fail "a warning for the new spellings"
# expect LOG COUNT LINE: LINE is in LOG exactly COUNT times.
expect() {
  n=$(grep -cxF -e "$3" "$work/$1") || true
  [ "$n" -eq "$2" ] || fail "$1 holds '$3' $n times, not $2"
}
expect old.reader.log 1 "warning: --shard is deprecated; use --slice"
expect old.reader.log 1 "warning: --heartbeat-ms is deprecated; use --heartbeat (in seconds)"
expect old.reader.log 1 "warning: --timeout-ms is deprecated; use --timeout (in seconds)"
expect old.train.log 1 \
  "warning: --reader-timeout-ms is deprecated; use --reader-timeout (in seconds)"
expect old.train.log 1 \
  "warning: --reconnect-window-ms is deprecated; use --reconnect-window (in seconds)"
[ "$(grep -c "deprecated" "$work/old.reader.log" "$work/old.train.log" |
  awk -F: '{ n += $2 } END { print n }')" -eq 5 ] || fail "more warning lines than old spellings"
echo "deprecated_aliases_test: OK"
