#!/bin/sh
# The dataset identity covers the content. Two datasets with the same class
# names and counts but other images (tilefeed-make-demo with another --seed): a reader of one
# refuses a trainer of the other, and a checkpoint of one is refused by --resume --data of
# the other; each line names both values. The same data is accepted both ways. A copy with
# one image replaced that the identity does not read is refused by a trainer of the original.
#
#   other_data_test.sh TRAIN SERVE MAKE_DEMO
set -u
train=$1
serve=$2
make_demo=$3
. "${0%/*}/../support/shell_test.sh"
begin_test other_data_test
export OMPI_MCA_btl_vader_backing_directory="$work"
for d in a b; do
  seed=1; [ $d = b ] && seed=2
  timeout 60 "$make_demo" "$work/$d" --classes 2 --train-per-class 16 --val-per-class 1 \
    --threads 1 --seed $seed >"$work/make_$d.log" 2>&1 || fail "tilefeed-make-demo failed"
done
common="--core synthetic:us-per-sample=1 --batch-size 4 --image-size 16 --workers 1"

# refused NAME READER_DATA TRAINER_DATA SAMPLES: a reader of READER_DATA (left running as
# $reader_pid at $endpoint) refuses a trainer of TRAINER_DATA, naming both datasets.
refused() {
  timeout 60 "$serve" --data "$2/train" --bind 'tcp://127.0.0.1:*' --batch-size 4 \
    --image-size 16 --epochs 1 --workers 1 --drop-last >"$work/reader_$1.log" 2>&1 &
  reader_pid=$!
  reader_endpoint "$work/reader_$1.log" "$reader_pid" 30
  # shellcheck disable=SC2086
  timeout 60 "$train" $common --data "$3" --readers "$endpoint" --epochs 1 \
    >"$work/refused_$1.log" 2>&1 && fail "$1: the reader served the trainer"
  grep -q "dataset: trainer $4 samples, digest [0-9a-f]\{16\}, reader $4 samples, digest [0-9a-f]\{16\}" \
    "$work/refused_$1.log" || fail "$1: no line naming both datasets"
  echo "other_data_test: $1: $(grep -o "dataset: .*" "$work/refused_$1.log" | head -1)"
}

# A reader of b refuses a trainer of a.
refused other-images "$work/b" "$work/a" 32
# shellcheck disable=SC2086
timeout 60 "$train" $common --data "$work/b" --readers "$endpoint" --epochs 1 \
  >"$work/served.log" 2>&1 || fail "the same data was refused"
stop "$reader_pid"

# A checkpoint of a, resumed with --data b: refused; with --data a: accepted.
# shellcheck disable=SC2086
timeout 120 "$train" $common --data "$work/a" --epochs 1 --checkpoint-every 2 \
  --checkpoint-dir "$work/ckpt" --max-steps 4 >"$work/first.log" 2>&1 || fail "the first run failed"
# shellcheck disable=SC2086
timeout 120 "$train" $common --data "$work/b" --epochs 2 --checkpoint-dir "$work/ckpt" --resume \
  >"$work/resume_b.log" 2>&1 && fail "--resume --data of other images was accepted"
grep -q "resume: the checkpoint in $work/ckpt was written for the dataset digest [0-9a-f]\{16\}; --data $work/b is 32 samples, 2 classes, digest [0-9a-f]\{16\}" \
  "$work/resume_b.log" || fail "no line naming both datasets on resume"
echo "other_data_test: resume: $(grep -o "resume: the checkpoint.*" "$work/resume_b.log" | head -1)"
# shellcheck disable=SC2086
timeout 120 "$train" $common --data "$work/a" --epochs 2 --checkpoint-dir "$work/ckpt" --resume \
  >"$work/resume_a.log" 2>&1 || fail "--resume --data of the same data was refused"

# A copy with one image replaced that the identity's 64 content samples leave out (sample 4
# of 80: floor(k x 80 / 64) skips it) is other data too: every sample's size counts.
timeout 60 "$make_demo" "$work/c" --classes 2 --train-per-class 40 --val-per-class 1 \
  --threads 1 >"$work/make_c.log" 2>&1 || fail "tilefeed-make-demo failed"
cp -R "$work/c" "$work/d"
class=$(LC_ALL=C ls "$work/d/train" | head -n 1)
victim=$work/d/train/$class/$(LC_ALL=C ls "$work/d/train/$class" | sed -n 5p)
donor=$work/d/train/$class/$(LC_ALL=C ls "$work/d/train/$class" | sed -n 6p)
[ "$(wc -c <"$victim")" != "$(wc -c <"$donor")" ] || fail "the donor image has the victim's size"
cp "$donor" "$victim"
refused unsampled-image-replaced "$work/d" "$work/c" 80
echo "other_data_test: OK"
