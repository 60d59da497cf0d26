#!/bin/sh
# docs/shard-format.md is enough to read a pack: examples/read_shards.py, written from the
# doc alone, checks every record and interval index of packs made here by tilefeed-pack
# with each --codec (jpeg, jpeg-index, raw, coefficients-fast, coefficients-small) from a
# demo set with a PNG and two grayscale JPEGs in it, and the record order against
# torchvision's ImageFolder order.
# A flipped byte fails, and so does each damaged version-2 structure behind a valid checksum,
# and a record of a retired coefficient layout (v1, v2-lz4, v2-zstd) is refused by name.
#
#   shard_format_test.sh PACK MAKE_DEMO PYTHON READ_SHARDS_PY
set -u
pack=$1
make_demo=$2
python=$3
reader=$4
. "${0%/*}/../support/shell_test.sh"
begin_test shard_format_test
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
# Two grayscale JPEGs (one component: one Huffman table class), one of them flat (every
# Huffman table of its record codes one byte value: mode 0).
from PIL import Image
Image.new("L", (40, 24), 128).save(os.path.join(sys.argv[1], classes[0], "zz-flat.jpg"), quality=90)
gray = bytes((x * 7 + (x * y) % 23 + y * 3) % 256 for y in range(30) for x in range(70))
Image.frombytes("L", (70, 30), gray).save(os.path.join(sys.argv[1], classes[0], "zz-gray.jpg"), quality=90)
PY
src=$work/data/train
run_pack() {  # OUT ARGS...
  out=$1
  shift
  timeout 300 "$pack" "$src" "$work/$out" --shard-size 64KiB --workers 2 "$@" \
    >"$work/$out.log" 2>&1 || fail "tilefeed-pack $*: $(cat "$work/$out.log")"
}
run_pack plain
run_pack indexed --codec jpeg-index
run_pack raw --codec raw --raw-size 24x16
run_pack coef --codec coefficients-fast  # version 2, stored groups
run_pack coef-small --codec coefficients-small  # version 2, Huffman groups
for p in plain indexed raw coef coef-small; do
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
for p in coef coef-small; do
  grep -q " coefficients" "$work/read-$p.log" || fail "$p: no coefficient record"
  grep -q "[1-9][0-9]* groups checked" "$work/read-$p.log" || fail "$p: no group checked"
done
grep -q " raw" "$work/read-raw.log" || fail "no raw record"
grep -q "in [2-9] shards\|in [0-9][0-9] shards" "$work/read-indexed.log" || fail "only one shard"
# The reader is not a rubber stamp: one byte flipped inside a record is refused.
for p in indexed coef-small; do
  rm -rf "$work/bad"
  cp -r "$work/$p" "$work/bad"
  "$python" - "$work/bad/shard-00000.tfs" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[40] ^= 1
open(sys.argv[1], "wb").write(data)
PY
  if "$python" "$reader" "$work/bad" >"$work/read-bad.log" 2>&1; then
    fail "$p: a flipped byte was not noticed"
  fi
  grep -q "record checksum" "$work/read-bad.log" || fail "$p flipped byte: $(cat "$work/read-bad.log")"
done
# Nor are its version-2 structure checks: each case damages the first record of a pack
# (a group's raw bytes, the group table, a Huffman table or stream, or the version or coding
# byte of a retired layout), then reseals the record, index, trailer and manifest checksums,
# so only that check can catch it.
"$python" - "$reader" "$work" <<'PY' || fail "version-2 structure checks"
import os, re, shutil, struct, subprocess, sys
reader, work = sys.argv[1:]
sys.path.insert(0, os.path.dirname(reader))
import read_shards as rs  # for xxh3 and the record's geometry, to find the bytes to damage

def huffman_at(p):
    """Where a v2 record's group table ends (its u32 H, for coding 3); its component count."""
    geo, at = rs.coefficient_header(bytes(p))
    return at + 8 + 8 * geo["bands"] * struct.unpack_from("<I", p, at + 4)[0], len(geo["comps"])

def group0(p):
    """Group 0,0 of a v2 record: (offset of its coded bytes, its table entry's offset, K)."""
    geo, at = rs.coefficient_header(bytes(p))
    data = huffman_at(p)[0]
    if p[at] == 3:
        data += 4 + struct.unpack_from("<I", p, data)[0]
    return data, at + 8, rs.group_blocks(geo, p[at + 1], 0, 0)

def mask_bit0(p):
    data, _, k = group0(p)
    p[data + 2 * sum(k)] |= 1

def escape(p):  # group 0's first value byte becomes (or stops being) a 0x80 escape
    data, entry, k = group0(p)
    assert struct.unpack_from("<I", p, entry + 4)[0] > 10 * sum(k), "group 0,0 has no values"
    p[data + 10 * sum(k)] = 0x7F if p[data + 10 * sum(k)] == 0x80 else 0x80

def packed_sizes(p):  # one byte moves from group 0,1's packed size to group 0,0's
    _, entry, _ = group0(p)
    struct.pack_into("<I", p, entry, struct.unpack_from("<I", p, entry)[0] + 1)
    struct.pack_into("<I", p, entry + 8, struct.unpack_from("<I", p, entry + 8)[0] - 1)

def version_1(p):  # the record says it is of the retired version 1
    p[4] = 1

def coding_lz4(p):  # the record says its groups are LZ4 blocks (retired coding 1)
    p[group0(p)[1] - 8] = 1

def coding_zstd(p):  # ... or zstd frames (retired coding 2)
    p[group0(p)[1] - 8] = 2

def huff_table(p):  # byte value 0's code length changes in the first table
    tables = huffman_at(p)[0] + 4
    assert p[tables] == 1, "the first Huffman table is not of mode 1"
    p[tables + 2] ^= 1 if p[tables + 2] & 15 in (0, 1) else 3

def stream_sizes(p):
    data, _, _ = group0(p)
    struct.pack_into("<I", p, data, 1 << 30)

def padding(p):  # the last bit of a stream of group 0,0 that ends in padding becomes 1
    data, entry, k = group0(p)
    at, comps = huffman_at(p)
    tables = rs.huffman_tables(bytes(p[at + 4:data]), 3 if comps == 1 else 6)
    packed, raw = struct.unpack_from("<II", p, entry)
    ends, finish = [], rs.BitStream.finish
    rs.BitStream.finish = lambda stream, s: ends.append(stream.pos % 8) or finish(stream, s)
    rs.huffman_group(bytes(p[data:data + packed]), raw, k[0], sum(k), tables)
    rs.BitStream.finish = finish
    s = next(s for s in range(4) if ends[s])
    sizes = list(struct.unpack_from("<III", p, data))
    sizes.append(packed - 12 - sum(sizes))
    p[data + 12 + sum(sizes[:s + 1]) - 1] |= 1
    return s

def damage(pack, edit, expect):
    bad = os.path.join(work, f"bad-{pack}-{edit.__name__}")
    shutil.copytree(os.path.join(work, pack), bad)
    path = os.path.join(bad, "shard-00000.tfs")
    shard = bytearray(open(path, "rb").read())
    index_offset = struct.unpack_from("<Q", shard, len(shard) - 32)[0]
    offset, size = struct.unpack_from("<QI", shard, index_offset)
    payload = bytearray(shard[offset + 8:offset + size])
    assert payload[:4] == b"TFJC" and payload[4] == 2, f"{pack}: record 0 is not a v2 record"
    expect = expect.format(edit(payload))
    shard[offset + 8:offset + size] = payload
    struct.pack_into("<Q", shard, index_offset + 16, rs.xxh3(shard[offset:offset + size]))
    footer = rs.xxh3(shard[index_offset:len(shard) - 16])
    struct.pack_into("<Q", shard, len(shard) - 16, footer)
    open(path, "wb").write(shard)
    manifest = os.path.join(bad, "tilefeed-manifest.txt")
    text = open(manifest).read()
    text = re.sub(r"^(shard shard-00000\.tfs \S+ \S+ )\S+$", r"\g<1>%016x" % footer, text, flags=re.M)
    body = text[:text.index("\nchecksum ") + 1]
    open(manifest, "w").write(body + "checksum %016x\n" % rs.xxh3(body.encode()))
    run = subprocess.run([sys.executable, reader, bad], capture_output=True, text=True)
    out = (run.stdout + run.stderr).strip()
    assert run.returncode == 1 and "shard-00000.tfs#0: " + expect in out, f"{edit.__name__}: {out}"
    print(f"refused ({edit.__name__}): {out}")

def huffman_kinds(pack):
    """(components, all tables of mode 0) of each record of a coefficients-small pack."""
    _, codec, _, _, shards = rs.read_manifest(pack)
    kinds = set()
    for s, line in enumerate(shards):
        for _, _, r_codec, _, p in rs.read_shard(os.path.join(pack, line[0]), s, 3, codec, line):
            if r_codec == 4:
                at, comps = huffman_at(p)
                size = struct.unpack_from("<I", p, at)[0]
                tables = rs.huffman_tables(p[at + 4:at + 4 + size], 3 if comps == 1 else 6)
                kinds.add((comps, all(isinstance(t, int) for t in tables)))
    return kinds

# The Huffman pack exercises one and two table classes, and mode-0 tables.
kinds = huffman_kinds(os.path.join(work, "coef-small"))
assert {(1, True), (1, False), (3, False)} <= kinds, f"Huffman records: {kinds}"
damage("coef", mask_bit0, "group 0,0: bit 0 of a mask is set")
damage("coef", escape, "group 0,0: 10K + V + 2E")
damage("coef", packed_sizes, "group 0,0: packed")
damage("coef", version_1, "coefficient layout v1, retired")
damage("coef", coding_lz4, "coefficient layout v2-lz4, retired")
damage("coef-small", coding_zstd, "coefficient layout v2-zstd, retired")
damage("coef-small", huff_table, "Huffman table 0: the code is not complete")
damage("coef-small", stream_sizes, "group 0,0: stream sizes")
damage("coef-small", packed_sizes, "group 0,0: Huffman stream 3 is")  # a byte past its codes
damage("coef-small", padding, "group 0,0: Huffman stream {}: padding bits not zero")
PY
echo "shard_format_test: OK"
