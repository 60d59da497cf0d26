#!/bin/sh
# Bad samples are visible in the main job: train over a folder with truncated JPEGs names
# each on stderr (path and reason) and counts them in the epoch line and --json; with
# --bad-sample-policy fail it stops with a non-zero exit naming the file.
#
#   bad_samples_test.sh TRAIN MAKE_DEMO
set -u
train=$1
make_demo=$2

work=$(mktemp -d "${TMPDIR:-/tmp}/tilefeed-bad.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP
fail() {
  echo "bad_samples_test: FAIL: $*"
  for f in "$work"/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
  done
  exit 1
}

# 4 classes x 8 training images: 32 samples, 4 full batches of 8, no remainder dropped.
timeout 60 "$make_demo" "$work/data" --classes 4 --train-per-class 8 --val-per-class 0 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
bad=0
for f in $(find "$work/data/train" -name '*.JPEG' | sort | awk 'NR % 6 == 2'); do
  head -c 300 "$f" >"$f.tmp" && mv "$f.tmp" "$f"
  bad=$((bad + 1))
done
[ "$bad" -ge 4 ] || fail "truncated only $bad files"

timeout 300 "$train" --data "$work/data/train" --core synthetic --us-per-sample 10 --epochs 2 \
  --batch-size 8 --image-size 32 --workers 1 --json "$work/train.jsonl" \
  >"$work/train.log" 2>"$work/train.err" || fail "train exited $? with the skip policy"
for f in $(find "$work/data/train" -name '*.JPEG' -size -400c); do
  grep -q "bad sample $f (epoch 0): " "$work/train.err" || fail "$f not named on stderr"
done
counts=$(sed -n 's/.*"bad_samples":\([0-9]*\).*/\1/p' "$work/train.jsonl" | tr '\n' ' ')
[ "$counts" = "$bad $bad " ] || fail "JSON bad_samples per epoch: '$counts', expected $bad each"
grep -q "epoch 0: .*, $bad bad samples replaced" "$work/train.log" ||
  fail "the epoch line does not count $bad bad samples"

timeout 300 "$train" --data "$work/data/train" --core synthetic --us-per-sample 10 --epochs 1 \
  --batch-size 8 --image-size 32 --workers 1 --bad-sample-policy fail \
  >"$work/fail.log" 2>&1 && fail "train exited 0 with --bad-sample-policy fail"
grep -q "JPEG" "$work/fail.log" || fail "the fail policy's message names no file"
echo "bad_samples_test: OK ($bad bad files named and counted)"
