#!/bin/sh
# Bad samples are visible in the main job: train over a folder with truncated JPEGs names
# each on stderr (path and reason) and counts them in the epoch line and --json; with
# --bad-sample-policy fail it stops with a non-zero exit naming the file. Given SERVE, the
# same folder served by tilefeed-serve to `train --readers` is counted the same way: the
# reader names the files, the frame header carries the count to the trainer.
#
#   bad_samples_test.sh TRAIN MAKE_DEMO [SERVE]
set -u
train=$1
make_demo=$2
serve=${3:-}

. "${0%/*}/../support/shell_test.sh"
begin_test bad_samples_test

# 4 classes x 8 training images: 32 samples, 4 full batches of 8, no remainder dropped.
timeout 60 "$make_demo" "$work/data" --classes 4 --train-per-class 8 --val-per-class 0 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
bad=0
for f in $(find "$work/data/train" -name '*.JPEG' | sort | awk 'NR % 6 == 2'); do
  head -c 300 "$f" >"$f.tmp" && mv "$f.tmp" "$f"
  bad=$((bad + 1))
done
[ "$bad" -ge 4 ] || fail "truncated only $bad files"

timeout 300 "$train" --data "$work/data/train" --core synthetic:us-per-sample=10 --epochs 2 \
  --batch-size 8 --image-size 32 --workers 1 --json "$work/train.jsonl" \
  >"$work/train.log" 2>"$work/train.err" || fail "train exited $? with the skip policy"
for f in $(find "$work/data/train" -name '*.JPEG' -size -400c); do
  grep -q "bad sample $f (epoch 0): " "$work/train.err" || fail "$f not named on stderr"
done
counts=$(sed -n 's/.*"bad_samples":\([0-9]*\).*/\1/p' "$work/train.jsonl" | tr '\n' ' ')
[ "$counts" = "$bad $bad " ] || fail "JSON bad_samples per epoch: '$counts', expected $bad each"
grep -q "epoch 0: .*, $bad bad samples replaced" "$work/train.log" ||
  fail "the epoch line does not count $bad bad samples"

timeout 300 "$train" --data "$work/data/train" --core synthetic:us-per-sample=10 --epochs 1 \
  --batch-size 8 --image-size 32 --workers 1 --bad-sample-policy fail \
  >"$work/fail.log" 2>&1 && fail "train exited 0 with --bad-sample-policy fail"
grep -q "JPEG" "$work/fail.log" || fail "the fail policy's message names no file"

if [ -n "$serve" ]; then
  timeout 300 "$serve" --data "$work/data/train" --bind 'tcp://127.0.0.1:*' --batch-size 8 \
    --image-size 32 --epochs 2 --workers 1 --slice 0/1 --drop-last \
    >"$work/reader.log" 2>&1 &
  reader_pid=$!
  reader_endpoint "$work/reader.log" "$reader_pid" 30
  timeout 300 "$train" --readers "$endpoint" --data "$work/data/train" --core synthetic:us-per-sample=10 \
    --epochs 2 --batch-size 8 --image-size 32 --workers 1 \
    --json "$work/readers.jsonl" >"$work/readers.log" 2>&1 || fail "train --readers exited $?"
  wait "$reader_pid" || fail "the reader exited $?"
  grep -q "bad sample .*JPEG" "$work/reader.log" || fail "the reader named no bad file"
  counts=$(sed -n 's/.*"bad_samples":\([0-9]*\).*/\1/p' "$work/readers.jsonl" | tr '\n' ' ')
  [ "$counts" = "$bad $bad " ] ||
    fail "train --readers JSON bad_samples per epoch: '$counts', expected $bad each"
  grep -q "epoch 0: .*, $bad bad samples replaced" "$work/readers.log" ||
    fail "the epoch line of train --readers does not count $bad bad samples"
fi
echo "bad_samples_test: OK ($bad bad files named and counted${serve:+, also through a reader})"
