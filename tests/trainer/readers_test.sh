#!/bin/sh
# Disaggregated mode end to end: a tilefeed-serve serves a tiny demo dataset on a free
# loopback port and `train --readers` trains on it with the synthetic core for two epochs;
# its checkpoint holds the same data position line as a run on the local data. The reader
# serves an image-size schedule (32 px in epoch 0, 40 from epoch 1): a trainer of another
# schedule is refused naming both, one of the same trains at each epoch's size (its metrics
# say which), and so does the reference core on the local data.
#
#   readers_test.sh TRAIN READER MAKE_DEMO
#
# Bounded in time (every process runs under timeout) and the reader is always reaped.
set -u
train=$1
reader=$2
make_demo=$3

. "${0%/*}/../support/shell_test.sh"
begin_test readers_test

# 4 classes x 16 training images: 64 samples, 8 batches of 8 per epoch.
timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 16 --val-per-class 4 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo: $(cat "$work/make_demo.log")"

# Port 0 ("*"): the reader picks a free one and names it in its first line.
# A peer may be silent for 60 s (both sides): far above what load and ASan cause.
timeout 600 "$reader" --data "$work/data/train" --bind 'tcp://127.0.0.1:*' --batch-size 8 \
  --image-size 32,1:40 --epochs 2 --workers 1 --prefetch-depth 2 --slice 0/1 \
  --drop-last --timeout 60 >"$work/reader.log" 2>&1 &
reader_pid=$!

reader_endpoint "$work/reader.log" "$reader_pid"
echo "readers_test: reader on $endpoint"

timeout 300 "$train" --readers "$endpoint" --data "$work/data" --core synthetic --batch-size 8 \
  --image-size 32 --epochs 2 --workers 1 --reader timeout=60 >"$work/refused.log" 2>&1 &&
  fail "a trainer of another image-size schedule was served"
grep -q "image size: trainer 32, reader 32,1:40" "$work/refused.log" ||
  fail "the refusal does not name both schedules: $(cat "$work/refused.log")"

timeout 300 "$train" --readers "$endpoint" --data "$work/data" --core synthetic:us-per-sample=50 \
  --batch-size 8 --image-size 32,1:40 --epochs 2 --workers 1 --check-every 4 \
  --reader timeout=60 --metrics "file=$work/metrics.jsonl" \
  --checkpoint-every 4 --checkpoint-dir "$work/ckpt" >"$work/train.log" 2>&1
rc=$?
cat "$work/train.log"
[ $rc -eq 0 ] || fail "train exited with $rc"
grep -q "reader $endpoint" "$work/train.log" || fail "train did not read from $endpoint"
grep -q "epoch 1: 8 steps.*images/s" "$work/train.log" || fail "no report of epoch 1 with images/s"
grep -q "done: 16 steps" "$work/train.log" || fail "train did not finish 16 steps"
grep -q '"record":"epoch".*"epoch":0,.*"image_size":"32"' "$work/metrics.jsonl" ||
  fail "no epoch 0 record at 32 px: $(grep epoch "$work/metrics.jsonl")"
grep -q '"record":"epoch".*"epoch":1,.*"image_size":"40"' "$work/metrics.jsonl" ||
  fail "no epoch 1 record at 40 px: $(grep epoch "$work/metrics.jsonl")"

# One data position for both modes, so a checkpoint resumes either way. The last checkpoint
# (step 16, after epoch 1's last batch) holds the loader state line that the same run on local
# data writes.
timeout 300 "$train" --data "$work/data" --core reference --batch-size 8 \
  --image-size 32,1:40 --epochs 2 --workers 1 --checkpoint-every 4 --checkpoint-dir "$work/ckpt_local" \
  >"$work/train_local.log" 2>&1 || fail "the local run failed: $(cat "$work/train_local.log")"
remote_position=$(sed -n 2p "$work/ckpt/checkpoint.tfck")
local_position=$(sed -n 2p "$work/ckpt_local/checkpoint.tfck")
[ "$remote_position" = "tilefeed-loader-state v1 seed=0 epoch=1 position=64 size=64" ] ||
  fail "the remote run's checkpoint holds '$remote_position'"
[ "$remote_position" = "$local_position" ] ||
  fail "checkpoints differ: remote '$remote_position', local '$local_position'"

# The reader sent its two epochs and ends on its own once the trainer says bye.
wait "$reader_pid"
reader_rc=$?
cat "$work/reader.log"
[ $reader_rc -eq 0 ] || fail "the reader exited with $reader_rc"
grep -q "16 batches" "$work/reader.log" || fail "the reader did not send 16 batches"
echo "readers_test: OK"
