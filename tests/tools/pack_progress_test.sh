#!/bin/sh
# tilefeed-pack's progress and ETA go to stderr only on a terminal or with
# --progress: a pack whose stderr is a file writes none of them, and with --progress it
# writes plain lines naming the samples done and the ETA. Both packs give the same shards.
#
#   pack_progress_test.sh PACK MAKE_DEMO
set -u
pack=$1
make_demo=$2
. "${0%/*}/../support/shell_test.sh"
begin_test pack_progress_test
fail() {
  echo "pack_progress_test: FAIL: $*"
  for f in "$work"/*.err; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
  exit 1
}
timeout 60 "$make_demo" "$work/data" --classes 2 --train-per-class 8 --val-per-class 1 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo"
timeout 120 "$pack" "$work/data/train" "$work/quiet" --codec coefficients-fast --workers 2 \
  >"$work/quiet.out" 2>"$work/quiet.err" </dev/null || fail "pack without --progress failed"
timeout 120 "$pack" "$work/data/train" "$work/loud" --codec coefficients-fast --workers 2 \
  --progress >"$work/loud.out" 2>"$work/loud.err" </dev/null || fail "pack --progress failed"
grep -q "ETA" "$work/quiet.err" && fail "progress written to a file without --progress"
grep -q "^pack: 16/16 samples (100.0%).*ETA 0:00:00" "$work/loud.err" ||
  fail "no final progress line with --progress"
grep -q "records per CPU-second" "$work/loud.out" || fail "no CPU rate in the summary"
cmp -s "$work/quiet/tilefeed-manifest.txt" "$work/loud/tilefeed-manifest.txt" ||
  fail "the two packs differ"
echo "pack_progress_test: OK"
