#!/bin/sh
# SIGXFSZ once killed the packer and left a .tmp: tilefeed-pack under a file-size limit
# (ulimit -f) smaller than a shard fails with one message that names the limit, exits 1 (not
# killed by SIGXFSZ), and leaves no .tmp file behind.
#
#   pack_file_size_limit_test.sh PACK MAKE_DEMO
set -u
pack=$1
make_demo=$2
. "${0%/*}/../support/shell_test.sh"
begin_test pack_file_size_limit_test
fail() {
  echo "pack_file_size_limit_test: FAIL: $*"
  [ -f "$work/pack.log" ] && cat "$work/pack.log"
  exit 1
}
timeout 60 "$make_demo" "$work/data" --classes 2 --train-per-class 8 --val-per-class 1 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo"
# 16 raw 64x64 images (~200 KB) against a 100-block (51 200-byte) limit.
(ulimit -f 100 && exec timeout 60 "$pack" "$work/data/train" "$work/out" --codec raw \
  --raw-size 64x64 --shard-size 1MiB) >"$work/pack.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "tilefeed-pack exited $rc, not 1"
grep -q "File too large (the file-size limit" "$work/pack.log" || fail "no message about the limit"
leftover=$(find "$work/out" -name '*.tmp' 2>/dev/null)
[ -z "$leftover" ] || fail "left behind: $leftover"
echo "pack_file_size_limit_test: OK"
