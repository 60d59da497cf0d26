#!/bin/sh
# A shm:// ring that does not fit in /dev/shm. The reader used to start,
# then die of SIGBUS (rc 135) at its first batch while the trainer said only "dropped the
# connection". Now the reader refuses at startup with one line, and a trainer whose session
# ring no longer fits is told why. /dev/shm is a 1 MiB tmpfs mounted in a private mount
# namespace (unshare -m), so nothing outside the test sees it; skipped (77) without root.
#
#   small_shm_test.sh SERVE TRAIN MAKE_DEMO
set -u
serve=$1
train=$2
make_demo=$3
if [ "${SMALL_SHM_INSIDE:-}" != 1 ]; then
  if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    echo "small_shm_test: SKIP: needs root and unshare -m"
    exit 77
  fi
  SMALL_SHM_INSIDE=1 exec unshare -m /bin/sh "$0" "$@"
fi
mount -t tmpfs -o size=1m tmpfs /dev/shm || { echo "small_shm_test: SKIP: cannot mount"; exit 77; }

. "${0%/*}/../support/shell_test.sh"
begin_test small_shm_test
# OpenMPI's shared-memory files stay out of the small /dev/shm.
export OMPI_MCA_btl_vader_backing_directory="$work"
timeout 60 "$make_demo" "$work/data" --classes 2 --train-per-class 16 --val-per-class 1 \
  --threads 1 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"

# 1. A ring of 8 slots of 32 images of 64x64 (about 3.2 MB) in 1 MiB: one line, rc 1.
timeout 60 "$serve" --data "$work/data/train" --bind shm://small-$$ --batch-size 32 \
  --image-size 64 --prefetch-depth 8 --workers 1 >"$work/big.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "a ring larger than /dev/shm: reader rc $rc, expected 1"
[ "$(wc -l <"$work/big.log")" -eq 2 ] || fail "expected the data line and one error line"
grep -q "tilefeed-serve: shared memory .*: the ring needs [0-9]* bytes, which do not fit in /dev/shm; /dev/shm has [0-9]* bytes free of [0-9]*" \
  "$work/big.log" || fail "no line saying the ring does not fit"
echo "small_shm_test: reader: $(tail -1 "$work/big.log")"

# 2. A ring that fits at startup, then /dev/shm fills up: the trainer is refused with why.
timeout 120 "$serve" --data "$work/data/train" --bind shm://fits-$$ --batch-size 4 \
  --image-size 32 --prefetch-depth 2 --workers 1 --epochs 1 --drop-last >"$work/fits.log" 2>&1 &
reader=$!
reader_endpoint "$work/fits.log" "$reader" 30
head -c 2000000 /dev/zero >/dev/shm/filler 2>/dev/null  # fills it (ENOSPC expected)
timeout 60 "$train" --readers shm://fits-$$ --core synthetic --batch-size 4 --image-size 32 \
  --epochs 1 --data "$work/data" --workers 1 >"$work/train.log" 2>&1
rc=$?
stop "$reader"
[ $rc -ne 0 ] || fail "train exited 0 without a ring"
grep -q "refused: .*do not fit in /dev/shm" "$work/train.log" ||
  fail "the trainer does not say why"
echo "small_shm_test: trainer: $(grep -o "refused: .*" "$work/train.log" | head -1)"
echo "small_shm_test: OK"
