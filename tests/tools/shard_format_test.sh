#!/bin/sh
# docs/shard-format.md is enough to read a pack: examples/read_shards.py, written from the
# doc alone, checks every record and interval index of packs made here by tilefeed-pack
# with each codec (plain, --jpeg-index, raw, coefficients) from a demo set with a PNG in
# it, and the record order against torchvision's ImageFolder order. A flipped byte fails.
#
#   shard_format_test.sh PACK MAKE_DEMO PYTHON READ_SHARDS_PY
set -u
pack=$1
make_demo=$2
python=$3
reader=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/tilefeed-shard-format.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
fail() {
  echo "shard_format_test: FAIL: $*"
  exit 1
}
timeout 120 "$make_demo" "$work/data" --classes 3 --train-per-class 12 --val-per-class 1 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo: $(cat "$work/make_demo.log")"
# A PNG among the JPEGs: stored as a codec-1 record by every codec but raw.
"$python" - "$work/data/train" <<'PY' || fail "writing the PNG"
import os, struct, sys, zlib
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
w, h = 40, 24
rows = b"".join(b"\0" + bytes(((x * 6 + y) % 256, y * 10, 128)[c] for x in range(w) for c in range(3)) for y in range(h))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
       chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
classes = sorted(os.listdir(sys.argv[1]))
open(os.path.join(sys.argv[1], classes[1], "zz-drawn.png"), "wb").write(png)
PY
src=$work/data/train
run_pack() {  # OUT ARGS...
  out=$1
  shift
  timeout 300 "$pack" "$src" "$work/$out" --shard-size 64KiB --workers 2 "$@" \
    >"$work/$out.log" 2>&1 || fail "tilefeed-pack $*: $(cat "$work/$out.log")"
}
run_pack plain
run_pack indexed --jpeg-index
run_pack raw --codec raw --raw-size 24x16
run_pack coef --codec coefficients --coef-layout v1  # the reader knows version 1 only
for p in plain indexed raw coef; do
  extra=""
  [ "$p" = raw ] && extra="--raw-size 24x16"
  # shellcheck disable=SC2086
  "$python" "$reader" "$work/$p" --source "$src" $extra >"$work/read-$p.log" 2>&1 ||
    fail "$p: $(cat "$work/read-$p.log")"
  cat "$work/read-$p.log"
done
grep -q "1 png" "$work/read-plain.log" || fail "the plain pack holds no PNG record"
grep -q " indexed" "$work/read-indexed.log" || fail "no indexed record"
grep -q "1 png" "$work/read-indexed.log" || fail "no codec-1 PNG in the indexed pack"
grep -q " coefficients" "$work/read-coef.log" || fail "no coefficient record"
grep -q " raw" "$work/read-raw.log" || fail "no raw record"
grep -q "in [2-9] shards\|in [0-9][0-9] shards" "$work/read-indexed.log" || fail "only one shard"
# The reader is not a rubber stamp: one byte flipped inside a record is refused.
cp -r "$work/indexed" "$work/bad"
"$python" - "$work/bad/shard-00000.tfs" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[40] ^= 1
open(sys.argv[1], "wb").write(data)
PY
if "$python" "$reader" "$work/bad" >"$work/read-bad.log" 2>&1; then
  fail "a flipped byte was not noticed"
fi
grep -q "record checksum" "$work/read-bad.log" || fail "flipped byte: $(cat "$work/read-bad.log")"
echo "shard_format_test: OK"
