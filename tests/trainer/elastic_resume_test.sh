#!/bin/sh
# Resuming 2 -> 1 instances once halved the global batch without a word, which changes the
# optimisation: `train --resume` on another instance count keeps the checkpoint's global batch
# and continues the epoch with no sample lost or repeated. Two cases, each a poprun job that
# stops after 2 steps with a checkpoint and a resumed job on another count:
#   2 -> 1: 48 samples, local batch 4; the resumed run doubles the gradient accumulation.
#   3 -> 2: 72 samples, local batch 2, accumulation 2 -> 3.
# TILEFEED_TRACE_SAMPLES (a test hook, docs/development.md) lists every trained sample; epoch 0 must hold each sample exactly once.
# Also: a resume whose global batch cannot be kept is refused with the arithmetic, --resume
# without a checkpoint is an error, --resume if-present without one starts fresh.
#
#   elastic_resume_test.sh TRAIN POPRUN MAKE_DEMO
set -u
train=$1
poprun=$2
make_demo=$3

. "${0%/*}/../support/shell_test.sh"
begin_test elastic_resume_test
# OpenMPI's shared-memory segments of an aborted job stay in the work folder.
export OMPI_MCA_btl_vader_backing_directory="$work"

# Runs `train` on N instances: job NAME N ARGS...
# job NAME INSTANCES TRACE ARGS...: TRACE is the TILEFEED_TRACE_SAMPLES prefix ("" for none).
job() {
  name=$1
  n=$2
  trace=$3
  shift 3
  timeout 600 "$poprun" --instances "$n" -- env "TILEFEED_TRACE_SAMPLES=$trace" "$train" \
    --image-size 32 --workers 1 --core reference:hidden=16 --seed 7 --epochs 1 --collective-timeout 300 "$@" >"$work/$name.log" 2>&1
}

# check_cover CASE SAMPLES: epoch 0 of every trace of CASE holds 0..SAMPLES-1 once each.
check_cover() {
  cat "$work/$1".trace.* | awk '$1 == 0 {print $2}' | sort -n >"$work/$1.seen"
  total=$(wc -l <"$work/$1.seen")
  distinct=$(uniq "$work/$1.seen" | wc -l)
  [ "$total" -eq "$2" ] || fail "$1: $total samples trained in epoch 0, expected $2"
  [ "$distinct" -eq "$2" ] || fail "$1: only $distinct distinct samples of $2 (repeats)"
  [ "$(head -1 "$work/$1.seen")" -eq 0 ] && [ "$(tail -1 "$work/$1.seen")" -eq $(($2 - 1)) ] ||
    fail "$1: samples outside 0..$(($2 - 1))"
}

timeout 300 "$make_demo" "$work/d48" --classes 4 --train-per-class 12 --val-per-class 1 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo"
timeout 300 "$make_demo" "$work/d72" --classes 4 --train-per-class 18 --val-per-class 1 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo"

# --resume without a checkpoint is an error; --resume if-present starts fresh.
job noresume 1 "" --data "$work/d48/train" --batch-size 4 --resume --checkpoint-dir "$work/none" &&
  fail "--resume without a checkpoint exited 0"
grep -q "no checkpoint in" "$work/noresume.log" || fail "--resume without a checkpoint: no message"
job ifpresent 1 "" --data "$work/d48/train" --batch-size 4 --max-steps 1 --resume if-present \
  --checkpoint-dir "$work/none" || fail "--resume if-present without a checkpoint failed"
grep -q "starting from scratch" "$work/ifpresent.log" || fail "--resume if-present said nothing"

# 2 -> 1.
job a1 2 "$work/a.trace" --data "$work/d48/train" --batch-size 4 --max-steps 2 \
  --checkpoint-every 2 --checkpoint-dir "$work/a.ck" || fail "2-instance run"
job a2 1 "$work/a.trace" --data "$work/d48/train" --batch-size 4 --resume \
  --checkpoint-dir "$work/a.ck" || fail "resumed 1-instance run"
grep -q "keeping the checkpoint's global batch 8 on 1 instance(s): local batch 4 -> 4, gradient accumulation 1 -> 2" \
  "$work/a2.log" || fail "2 -> 1: the resumed run did not keep the global batch"
grep -q "x gradient accumulation 2 = 8" "$work/a2.log" || fail "2 -> 1: global batch not 8"
check_cover a 48

# 3 -> 2.
job b1 3 "$work/b.trace" --data "$work/d72/train" --batch-size 2 --gradient-accumulation 2 \
  --max-steps 2 --checkpoint-every 2 --checkpoint-dir "$work/b.ck" || fail "3-instance run"
# Both sizes given: the global batch 12 cannot be kept on 2 instances; refused.
job bad 2 "" --data "$work/d72/train" --batch-size 2 --gradient-accumulation 2 --resume \
  --checkpoint-dir "$work/b.ck" && fail "a resume that changes the global batch exited 0"
grep -q "global batch 12; here local batch 2 x replicas 1 x instances 2 x gradient accumulation 2 = 8" \
  "$work/bad.log" || fail "the refused resume does not give the arithmetic"
job b2 2 "$work/b.trace" --data "$work/d72/train" --batch-size 2 --resume \
  --checkpoint-dir "$work/b.ck" || fail "resumed 2-instance run"
grep -q "gradient accumulation 1 -> 3" "$work/b2.log" || fail "3 -> 2: accumulation not 3"
check_cover b 72

echo "elastic_resume_test: OK (2 -> 1 and 3 -> 2 cover epoch 0 once; refusals and --resume if-present)"
