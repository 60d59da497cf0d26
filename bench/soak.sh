#!/usr/bin/env bash
# Soak: runs the loader for MINUTES on DATA, sampling its RSS and open file descriptors
# every second, and says whether both stayed flat after warm-up (within 5 %), with the
# throughput over time.
#   bench/soak.sh MINUTES [DATA] [BUILD_DIR]
# DATA defaults to the demo dataset (made if missing); BUILD_DIR to build/release.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:?usage: bench/soak.sh MINUTES [DATA] [BUILD_DIR]}
BUILD=${3:-build/release}
DATA=${2:-$BUILD/../demo-data}
bench=$BUILD/bench/loader_bench
[ -x "$bench" ] || { echo "soak: $bench missing: cmake --preset release && cmake --build --preset release" >&2; exit 2; }
if [ ! -d "$DATA" ]; then "$BUILD/tools/tilefeed-make-demo" "$DATA" >/dev/null; fi
seconds=$((MINUTES * 60))
out=$(mktemp -d)
"$bench" --data "$DATA" --seconds "$seconds" --interval 10 --batch 64 --warmup 2 \
  >"$out/bench.log" 2>"$out/bench.err" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
  [ -n "$rss" ] && echo "$SECONDS $rss $fds" >>"$out/samples"
  sleep 1
done
wait "$pid" || { cat "$out/bench.err" >&2; echo "soak: loader_bench failed" >&2; exit 1; }
echo "soak: $MINUTES min of loader_bench on $DATA"
grep '^interval' "$out/bench.log" | awk '{split($2,t,"="); split($3,r,"="); printf "  t=%5.0fs  %8.1f images/s\n", t[2], r[2]}'
# Warm-up: the first fifth of the run (at least 10 s), while slots fill and caches warm.
# Each decode worker has at most one image file open at a time, so the fd count may move
# by up to the worker count without a leak.
awk -v total="$seconds" -v workers="$(nproc)" '
  NR == 1 { t0 = $1 }
  { t = $1 - t0; if (t < (total / 5 > 10 ? total / 5 : 10)) next
    if (n++ == 0) { rmin = rmax = $2; fmin = fmax = $3 }
    if ($2 < rmin) rmin = $2; if ($2 > rmax) rmax = $2
    if ($3 < fmin) fmin = $3; if ($3 > fmax) fmax = $3 }
  END {
    if (n == 0) { print "soak: no samples after warm-up"; exit 1 }
    rflat = (rmax - rmin) <= 0.05 * rmax; fflat = (fmax - fmin) <= workers
    printf "  RSS after warm-up: %.1f .. %.1f MiB (%s)\n", rmin / 1024, rmax / 1024, rflat ? "flat" : "NOT flat"
    printf "  open fds after warm-up: %d .. %d (%s; up to %d files in flight)\n", fmin, fmax, fflat ? "flat" : "NOT flat", workers
    printf "soak: %s\n", (rflat && fflat) ? "RSS and fds stayed flat" : "RSS or fds grew"
    exit (rflat && fflat) ? 0 : 1 }' "$out/samples"
rm -rf "$out"
