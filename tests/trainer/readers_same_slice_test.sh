#!/bin/sh
# Two instances of one poprun job never read the same slice (they would train on it twice and
# never see another, with exit 0). Instances pointed at one reader (its endpoint twice in
# --readers) are refused before connecting, with one line naming the endpoint and both
# instances; instances pointed at two readers that serve the same slice are refused by the
# reader/trainer agreement, with the line naming the trainer's slice and the reader's. Either
# way the job ends with rc != 0, in bounded time.
#
#   readers_same_slice_test.sh TRAIN POPRUN READER MAKE_DEMO
set -u
train=$1
poprun=$2
reader=$3
make_demo=$4

. "${0%/*}/../support/shell_test.sh"
begin_test readers_same_slice_test
# OpenMPI's shared-memory segments of an aborted job stay in the work folder.
export OMPI_MCA_btl_vader_backing_directory="$work"

timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 16 --val-per-class 0 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
args="--data $work/data/train --core synthetic --workers 1 --batch-size 4 --image-size 32
  --epochs 2 --reader timeout=60 --collective-timeout 300"

# serve NAME ARGS...: a reader of slice 0/2 on a free loopback port; sets $endpoint.
serve() {
  name=$1
  shift
  timeout 600 "$reader" --data "$work/data/train" --bind 'tcp://127.0.0.1:*' --workers 1 \
    --batch-size 4 --image-size 32 --epochs 2 --drop-last --slice 0/2 \
    --timeout 60 "$@" >"$work/$name.log" 2>&1 &
  reader_endpoint "$work/$name.log" $!
}

# --- One reader named for both instances: refused before any connection, one line.
serve one
# shellcheck disable=SC2086
timeout 600 "$poprun" --instances 2 -- "$train" $args --readers "$endpoint,$endpoint" \
  >"$work/twice.log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "one reader for two instances: rc $rc"
line="--readers names $endpoint for instances 0 and 1; each instance needs its own reader"
grep -q -- "$line" "$work/twice.log" || fail "no line naming $endpoint and both instances"
[ "$(grep -c -- "--readers names" "$work/twice.log")" -eq 1 ] || fail "more than one line"
echo "readers_same_slice_test: one reader twice refused: $(grep -- "--readers names" "$work/twice.log")"

# --- Two readers of the same slice (0/2): instance 1 is refused by its reader, naming the
# trainer's slice and the reader's, and the whole job ends.
first=$endpoint
serve two
second=$endpoint
start=$(date +%s)
# shellcheck disable=SC2086
timeout 600 "$poprun" --instances 2 -- "$train" $args --readers "$first,$second" \
  >"$work/same.log" 2>&1
rc=$?
took=$(($(date +%s) - start))
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "two readers of one slice: rc $rc"
grep -q "$second.*slice (instance/instances): trainer 1/2, reader 0/2" "$work/same.log" ||
  fail "no line naming the reader $second, the trainer's slice 1/2 and the reader's 0/2"
grep -q "refused a peer at .*trainer 1/2, reader 0/2" "$work/two.log" ||
  fail "reader two logged no refusal"
echo "readers_same_slice_test: same slice refused in ${took} s:" \
  "$(grep -o "slice (instance/instances).*" "$work/same.log" | head -n 1)"
echo "readers_same_slice_test: OK"
