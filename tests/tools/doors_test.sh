#!/bin/sh
# One dataset, every door: a demo folder, its plain pack and its --codec jpeg-index pack give the
# same training through each door that reads data, because every door opens datasets with
# tilefeed/loader/dataset.h and the batches are byte-identical:
#   - train on 1 instance and under poprun on 2 instances: the same parameter checksum;
#   - tilefeed-serve -> train --readers: the same parameter checksum.
# The packs are split roots (packed/train, packed/val), so train also finds the val split.
#
#   doors_test.sh TRAIN READER PACK MAKE_DEMO POPRUN
#
# Bounded in time (every process runs under timeout); the reader is always reaped.
set -u
train=$1
reader=$2
pack=$3
make_demo=$4
poprun=$5

. "${0%/*}/../support/shell_test.sh"
begin_test doors_test

# 3 classes x 12 training images (36 samples: 4 batches of 8 and a dropped remainder),
# 3 x 3 validation images.
timeout 60 "$make_demo" "$work/folder" --classes 3 --train-per-class 12 --val-per-class 3 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
for split in train val; do
  timeout 120 "$pack" "$work/folder" "$work/plain/$split" --split "$split" --workers 2 \
    >"$work/pack.log" 2>&1 || fail "tilefeed-pack $split failed"
  timeout 120 "$pack" "$work/folder" "$work/indexed/$split" --split "$split" --workers 2 \
    --codec jpeg-index >"$work/pack.log" 2>&1 ||
    fail "tilefeed-pack --codec jpeg-index $split failed"
done

common="--core reference --epochs 2 --batch-size 8 --image-size 32 --workers 1 --seed 3"

# checksum LOG: the parameter checksum train printed last.
checksum() {
  sed -n 's/.*parameter checksum \([0-9][0-9]*\).*/\1/p' "$1" | tail -n 1
}

# same WHAT A B C: fails unless three checksums are equal and non-empty.
same() {
  [ -n "$2" ] || fail "$1: no checksum from the folder"
  [ "$2" = "$3" ] && [ "$2" = "$4" ] ||
    fail "$1: folder $2, plain pack $3, --codec jpeg-index pack $4"
  echo "doors_test: $1: checksum $2 from the folder and both packs"
}

# One instance, in process.
for d in folder plain indexed; do
  # shellcheck disable=SC2086
  timeout 300 "$train" --data "$work/$d" $common >"$work/train1-$d.log" 2>&1 ||
    fail "train --data $d exited $?"
  grep -q "val accuracy" "$work/train1-$d.log" || fail "train --data $d found no val split"
done
same "train, 1 instance" "$(checksum "$work/train1-folder.log")" \
  "$(checksum "$work/train1-plain.log")" "$(checksum "$work/train1-indexed.log")"

# Two instances under poprun (OpenMPI).
for d in folder plain indexed; do
  # shellcheck disable=SC2086
  timeout 300 "$poprun" --instances 2 -- "$train" --data "$work/$d" $common \
    >"$work/train2-$d.log" 2>&1 || fail "poprun --instances 2 train --data $d exited $?"
done
same "poprun --instances 2 train" "$(checksum "$work/train2-folder.log")" \
  "$(checksum "$work/train2-plain.log")" "$(checksum "$work/train2-indexed.log")"

# tilefeed-serve -> train --readers, one reader per dataset kind.
for d in folder plain indexed; do
  timeout 300 "$reader" --data "$work/$d" --bind 'tcp://127.0.0.1:*' --batch-size 8 \
    --image-size 32 --epochs 2 --workers 1 --prefetch-depth 2 --seed 3 --slice 0/1 \
    --drop-last >"$work/reader-$d.log" 2>&1 &
  reader_pid=$!
  reader_endpoint "$work/reader-$d.log" "$reader_pid" 30
  timeout 300 "$train" --readers "$endpoint" --data "$work/$d" --core reference \
    --batch-size 8 --image-size 32 --epochs 2 --workers 1 --seed 3 >"$work/readers-$d.log" 2>&1 ||
    fail "train --readers (data $d) exited $?"
  wait "$reader_pid" 2>/dev/null
done
same "tilefeed-serve -> train --readers" "$(checksum "$work/readers-folder.log")" \
  "$(checksum "$work/readers-plain.log")" "$(checksum "$work/readers-indexed.log")"

echo "doors_test: OK"
