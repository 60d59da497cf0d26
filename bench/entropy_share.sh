#!/bin/bash
# entropy_share.sh BUILD DATA [LOADER_BENCH FLAGS...]: the share of loader_bench's CPU samples
# (perf record, all threads, 12 s, 2 workers) spent in libjpeg-turbo's entropy decoders,
# jdhuff.c and jdphuff.c. Debian's libjpeg.so.62.3.0 has no debug symbols, so the two files
# are located by the exported symbols around them (jpeg_make_d_derived_tbl .. the end of
# jinit_huff_decoder; the end of jinit_merged_upsampler .. jinit_d_post_controller): the
# RANGES below hold for Debian 12's libjpeg62-turbo 2.1.5 only.
set -euo pipefail
build=$1 data=$2
shift 2
out=$(mktemp -d)
perf record -q -F 999 -o "$out/perf.data" -- "$build/bench/loader_bench" --data "$data" \
  --workers 2 --seconds 12 "$@" > "$out/bench.txt" 2>&1
perf report -i "$out/perf.data" --sort dso,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" > "$out/syms"
/usr/bin/python3 - "$out/syms" <<'PY'
import re, sys
RANGES = [(0x21e80, 0x240b0), (0x2ab00, 0x2c080)]  # jdhuff.c, jdphuff.c
total = entropy = 0.0
for line in open(sys.argv[1]):
    m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[.\]\s+(\S+)", line)
    if not m:
        continue
    share = float(m.group(1))
    total += share
    if m.group(2).startswith("libjpeg.so") and m.group(3).startswith("0x") and \
            any(a <= int(m.group(3), 16) < b for a, b in RANGES):
        entropy += share
print(f"entropy decoding: {100 * entropy / total:.1f}% of the samples")
PY
grep "images/s" "$out/bench.txt"
rm -rf "$out"
