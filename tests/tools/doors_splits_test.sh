#!/bin/sh
# One dataset, every door, every split: each door opens ROOT/SPLIT for --split SPLIT, because
# split resolution lives only in loader::ResolveDataset (tilefeed/loader/dataset.h). ROOT has
# train/, val/ and test/ (2 classes of 4, 3 and 2 images: 8, 6 and 4 samples), and each door
# names the folder it opened in its summary line ("ImageFolder ROOT/SPLIT: N samples"):
#   - tilefeed-serve --split, tilefeed-pack --split, tilefeed-inspect --split and
#     loader_bench --split: one row per split (train, val, test);
#   - train, which has no --split: train/ for training and val/ for validation (its
#     "val data: ROOT/val" line).
# (Python's row per split is python/tests/test_doors.py.) A root without test/ asked for test
# is refused by every door with one line naming the root and the splits it has.
#
#   doors_splits_test.sh TRAIN READER PACK INSPECT LOADER_BENCH MAKE_DEMO
#
# Bounded in time (every process runs under timeout); the reader is always reaped.
set -u
train=$1
reader=$2
pack=$3
inspect=$4
loader_bench=$5
make_demo=$6

. "${0%/*}/../support/shell_test.sh"
begin_test doors_splits_test

root=$work/root
timeout 60 "$make_demo" "$root" --classes 2 --train-per-class 4 --val-per-class 3 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
timeout 60 "$make_demo" "$work/other" --classes 2 --train-per-class 1 --val-per-class 2 \
  --seed 7 --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
mv "$work/other/val" "$root/test" || fail "cannot make $root/test"
no_test=$work/no_test
mkdir -p "$no_test" && cp -r "$root/train" "$root/val" "$no_test/" || fail "cannot copy"

samples() {
  case $1 in
    train) echo 8 ;;
    val) echo 6 ;;
    test) echo 4 ;;
  esac
}

# opened DOOR SPLIT LOG: fails unless LOG names ROOT/SPLIT as the folder DOOR opened.
opened() {
  grep -q "ImageFolder $root/$2: $(samples "$2") samples" "$3" ||
    fail "$1 --split $2 did not open $root/$2"
  echo "doors_splits_test: $1, $2: $root/$2"
}

small="--batch-size 2 --image-size 16 --workers 1"
for split in train val test; do
  # shellcheck disable=SC2086
  timeout 120 "$inspect" "$root" --split "$split" >"$work/inspect.log" 2>&1 ||
    fail "tilefeed-inspect --split $split exited $?"
  opened tilefeed-inspect "$split" "$work/inspect.log"

  timeout 120 "$pack" "$root" "$work/pack-$split" --split "$split" --workers 1 \
    >"$work/pack.log" 2>&1 || fail "tilefeed-pack --split $split exited $?"
  opened tilefeed-pack "$split" "$work/pack.log"

  # shellcheck disable=SC2086
  timeout 120 "$loader_bench" --data "$root" --split "$split" --epochs 1 --warmup 0 $small \
    >"$work/bench.log" 2>&1 || fail "loader_bench --split $split exited $?"
  opened loader_bench "$split" "$work/bench.log"

  # A log per split: the shell truncates a reused one only once the reader's process runs,
  # and reader_endpoint could read the previous split's endpoint line before that.
  # shellcheck disable=SC2086
  timeout 120 "$reader" --data "$root" --split "$split" --bind 'tcp://127.0.0.1:*' $small \
    --epochs 1 >"$work/reader-$split.log" 2>&1 &
  reader_pid=$!
  reader_endpoint "$work/reader-$split.log" "$reader_pid" 60
  stop "$reader_pid"
  opened tilefeed-serve "$split" "$work/reader-$split.log"
done

# train: train/ to train on, val/ to validate on.
# shellcheck disable=SC2086
timeout 300 "$train" --data "$root" --core reference --epochs 1 $small >"$work/train.log" 2>&1 ||
  fail "train exited $?"
opened train train "$work/train.log"
grep -q "val data: $root/val\$" "$work/train.log" || fail "train did not validate on $root/val"
echo "doors_splits_test: train, val: $root/val"

# A root without the split asked for: the same line from every door.
missing="$no_test: no test/ split; it has train/ and val/"
refused() {  # refused DOOR LOG: the door exited non-zero and LOG holds the line.
  grep -qF "$missing" "$2" || fail "$1 --split test on a root without test/: no '$missing'"
  echo "doors_splits_test: $1 refuses: $missing"
}
timeout 60 "$inspect" "$no_test" --split test >"$work/refused.log" 2>&1 &&
  fail "tilefeed-inspect opened a missing test split"
refused tilefeed-inspect "$work/refused.log"
timeout 60 "$pack" "$no_test" "$work/pack-none" --split test >"$work/refused.log" 2>&1 &&
  fail "tilefeed-pack opened a missing test split"
refused tilefeed-pack "$work/refused.log"
# shellcheck disable=SC2086
timeout 60 "$loader_bench" --data "$no_test" --split test $small >"$work/refused.log" 2>&1 &&
  fail "loader_bench opened a missing test split"
refused loader_bench "$work/refused.log"
# shellcheck disable=SC2086
timeout 60 "$reader" --data "$no_test" --split test --bind 'tcp://127.0.0.1:*' $small \
  >"$work/refused.log" 2>&1 && fail "tilefeed-serve opened a missing test split"
refused tilefeed-serve "$work/refused.log"

echo "doors_splits_test: OK"
