#!/usr/bin/env python3
"""A tilefeed pack reader written from docs/shard-format.md alone.

It walks a pack's manifest and shards and checks every byte the format describes: the
manifest and its checksum, each shard's header, index and trailer, every record's
checksum and header, and every payload of every codec (JPEG and PNG files, LZ4 raw
tensors, indexed JPEGs with their interval index, coefficient records column group by
group: stored or Huffman-coded, decoded here; the retired layouts are refused). It uses
nothing of tilefeed: the standard library, numpy, and the two C libraries the format names
(xxHash for XXH3_64bits, liblz4 for LZ4 blocks) through ctypes.

    read_shards.py PACK [--source FOLDER] [--raw-size WxH]

--source checks the record order against a torchvision ImageFolder walk of FOLDER (and,
for codec-1 records, that the bytes are the files'). Exit status 0 and one "OK" line when
everything holds; 1 and the first problem otherwise.
"""

import argparse
import ctypes
import ctypes.util
import os
import struct
import sys
import zlib

import numpy as np


class FormatError(Exception):
    pass


def need(condition, what):
    if not condition:
        raise FormatError(what)


def _load(name, soname):
    path = ctypes.util.find_library(name) or soname
    return ctypes.CDLL(path)


_xxhash = _load("xxhash", "libxxhash.so.0")
_xxhash.XXH3_64bits.restype = ctypes.c_uint64
_xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_lz4 = _load("lz4", "liblz4.so.1")
_lz4.LZ4_decompress_safe.restype = ctypes.c_int
_lz4.LZ4_decompress_safe.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]


def xxh3(data):
    return _xxhash.XXH3_64bits(bytes(data), len(data))


def lz4_block(packed, raw_size):
    """Decompresses one LZ4 block that must hold exactly raw_size bytes."""
    out = ctypes.create_string_buffer(max(raw_size, 1))
    got = _lz4.LZ4_decompress_safe(bytes(packed), out, len(packed), raw_size)
    need(got == raw_size, f"LZ4 block gives {got} bytes, expected {raw_size}")
    return out.raw[:raw_size]


def u(fmt, data, at):
    return struct.unpack_from("<" + fmt, data, at)


# ---------------------------------------------------------------------------- manifest

def read_manifest(pack):
    text = open(os.path.join(pack, "tilefeed-manifest.txt"), "rb").read().decode("utf-8")
    need(text.endswith("\n"), "manifest does not end in a newline")
    lines = text[:-1].split("\n")
    pos = 0

    def expect(key):
        nonlocal pos
        need(pos < len(lines), f"manifest ends before '{key}'")
        line = lines[pos]
        pos += 1
        need(line.startswith(key + " "), f"manifest line {pos}: expected '{key} ...'")
        return line[len(key) + 1:]

    version = int(expect("tilefeed-shards"))
    codec_name = expect("codec")
    codecs = {"jpeg": 1, "lz4raw": 2, "jpeg-indexed": 3, "coefficients": 4}
    need(codec_name in codecs, f"unknown codec {codec_name}")
    codec = codecs[codec_name]
    need(version == {3: 2, 4: 3}.get(codec, 1), f"codec {codec_name} in a version {version} manifest")
    records = int(expect("records"))
    classes = [expect("class") for _ in range(int(expect("classes")))]
    shards = []
    for s in range(int(expect("shards"))):
        name, count, size, footer = expect("shard").split(" ")
        need(name == "shard-%05d.tfs" % s, f"shard {s} is named {name}")
        need(len(footer) == 16 and footer == footer.lower(), "footer checksum not 16 lowercase hex")
        shards.append((name, int(count), int(size), int(footer, 16)))
    body = len("\n".join(lines[:pos])) + 1
    checksum = expect("checksum")
    need(pos == len(lines), "text after the checksum line")
    need(len(checksum) == 16 and int(checksum, 16) == xxh3(text[:body].encode()),
         "manifest checksum mismatch")
    need(sum(s[1] for s in shards) == records, "shard record counts do not add up")
    return version, codec, records, classes, shards


# ---------------------------------------------------------------------------- shard

def read_shard(path, number, version, codec, line):
    name, count, size, footer_sum = line
    data = open(path, "rb").read()
    need(len(data) == size, f"{name}: {len(data)} bytes, the manifest says {size}")
    need(size >= 64, f"{name}: shorter than header + trailer")
    need(data[0:8] == b"TFSHARD\0", f"{name}: bad magic")
    h_version, h_codec, reserved, h_number, h_count, h_sum = u("HBBIQQ", data, 8)
    need(h_version == version and h_codec == codec, f"{name}: version/codec differ from the manifest")
    need(reserved == 0, f"{name}: reserved header byte")
    need(h_sum == xxh3(data[0:24]), f"{name}: header checksum")
    need(h_number == number, f"{name}: header says shard {h_number}")
    need(h_count == count, f"{name}: header says {h_count} records")
    index_offset, t_count, t_sum = u("QQQ", data, size - 32)
    need(data[size - 8:] == b"TFSFOOT\0", f"{name}: bad end magic")
    need(t_count == count and 32 <= index_offset <= size - 32, f"{name}: trailer fields")
    need(size - 32 - index_offset == 24 * count, f"{name}: index does not fill its space")
    need(t_sum == xxh3(data[index_offset:size - 16]) and t_sum == footer_sum, f"{name}: footer checksum")
    records = []
    expected = 32  # records are contiguous: [32, index_offset)
    for i in range(count):
        offset, rsize, label, rsum = u("QIiQ", data, index_offset + 24 * i)
        where = f"{name}#{i}"
        need(offset == expected and rsize >= 8 and offset + rsize <= index_offset, f"{where}: place")
        need(label >= 0, f"{where}: negative label")
        record = data[offset:offset + rsize]
        need(xxh3(record) == rsum, f"{where}: record checksum")
        r_label, r_codec = u("iB", record, 0)
        need(r_label == label, f"{where}: label differs from the index's")
        mixed = codec in (3, 4) and r_codec == 1
        need(r_codec == codec or mixed, f"{where}: record codec {r_codec}")
        index_len = 0
        if r_codec == 3:
            index_len = record[5] | record[6] << 8 | record[7] << 16
            need(1 <= index_len < rsize - 8, f"{where}: index length {index_len}")
        else:
            need(record[5:8] == b"\0\0\0", f"{where}: reserved record bytes")
        records.append((where, label, r_codec, index_len, record[8:]))
        expected = offset + rsize
    need(expected == index_offset, f"{name}: records end at {expected}, index at {index_offset}")
    return records


# ---------------------------------------------------------------------------- JPEG

def jpeg_segments(jpeg):
    """The header's (marker, body) segments up to and including SOS, and the scan start."""
    need(jpeg[0:2] == b"\xff\xd8", "no SOI")
    pos, segments = 2, []
    while True:
        need(pos < len(jpeg) and jpeg[pos] == 0xFF, "no marker in the header")
        while jpeg[pos] == 0xFF:
            pos += 1
        marker = jpeg[pos]
        length = struct.unpack_from(">H", jpeg, pos + 1)[0]
        need(length >= 2 and pos + 1 + length <= len(jpeg), "bad segment length")
        segments.append((marker, jpeg[pos + 3:pos + 1 + length]))
        pos += 1 + length
        if marker == 0xDA:
            return segments, pos


def check_jpeg(jpeg):
    segments, scan_start = jpeg_segments(jpeg)
    need(any(0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC) for m, _ in segments), "no SOF")
    need(jpeg.rfind(b"\xff\xd9") >= scan_start, "no EOI after the scan")
    return segments, scan_start


def check_indexed(index, jpeg):
    """Checks a codec-3 payload's interval index against its JPEG; returns intervals."""
    need(index[0:4] == b"TFJI" and index[4] == 1, "bad index magic or version")
    pos = 5

    def varint():
        nonlocal pos
        value, shift = 0, 0
        while True:
            need(pos < len(index), "index ends inside a varint")
            byte = index[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    width, height, mcu_w, mcu_h, k = (varint() for _ in range(5))
    segments, scan_start = jpeg_segments(jpeg)
    # What decoding needs comes first (JFIF APP0 or Adobe APP14); other APPn and COM are gone.
    first_marker, first_body = segments[0]
    need((first_marker, first_body[:5]) in ((0xE0, b"JFIF\0"), (0xEE, b"Adobe")),
         "first segment is neither a JFIF APP0 nor an Adobe APP14")
    need(not any(0xE0 <= m <= 0xEF or m == 0xFE for m, _ in segments[1:]), "metadata kept")
    sof = [body for m, body in segments if m in (0xC0, 0xC1)]
    need(len(sof) == 1, "not one baseline SOF")
    sof = sof[0]
    f_h, f_w, comps = struct.unpack_from(">HHB", sof, 1)
    factors = [sof[6 + 3 * c + 1] for c in range(comps)]
    h_max, v_max = max(f >> 4 for f in factors), max(f & 15 for f in factors)
    # MCU size in pixels; a one-component scan's MCU is one 8x8 block.
    sof_mcu = (8, 8) if comps == 1 else (8 * h_max, 8 * v_max)
    need((width, height) == (f_w, f_h) and (mcu_w, mcu_h) == sof_mcu, "geometry differs from the SOF")
    dri = [struct.unpack_from(">H", body)[0] for m, body in segments if m == 0xDD]
    need(dri == [k], "MCUs per interval differs from the DRI")
    per_row = -(-width // mcu_w)
    need(k > 0 and per_row % k == 0, "intervals do not tile the MCU rows")
    count = -(-height // mcu_h) * (per_row // k)
    offset = varint()
    need(offset == scan_start, "interval 0 is not at the scan start")
    for i in range(1, count):
        offset += varint()
        rst = 0xD0 + (i - 1) % 8
        need(offset <= len(jpeg) and jpeg[offset - 2] == 0xFF and jpeg[offset - 1] == rst,
             f"interval {i} does not follow RST{(i - 1) % 8}")
    offset += varint()
    need(jpeg[offset:offset + 2] == b"\xff\xd9" and offset + 2 == len(jpeg), "EOI not at the scan end")
    need(pos == len(index), "bytes after the last offset")
    return count


# ---------------------------------------------------------------------------- PNG, raw

def check_png(png):
    need(png[0:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature")
    pos, idat, ihdr = 8, b"", None
    while True:
        length, kind = struct.unpack_from(">I4s", png, pos)
        body = png[pos + 8:pos + 8 + length]
        need(len(body) == length, "PNG chunk ends early")
        (crc,) = struct.unpack_from(">I", png, pos + 8 + length)
        need(zlib.crc32(kind + body) == crc, f"PNG {kind} chunk CRC")
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, colour = ihdr[:4]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    need(ihdr[6] == 0, "interlaced PNG in this test")
    row = 1 + (width * channels * depth + 7) // 8
    need(len(zlib.decompress(idat)) == row * height, "PNG pixel data size")


def check_raw(payload, raw_size):
    need(payload[0:4] == b"TFR1", "bad raw magic")
    height, width, channels, r0, r1, r2, block = u("HHBBBBI", payload, 4)
    need(height >= 1 and width >= 1 and 1 <= channels <= 4 and (r0, r1, r2) == (0, 0, 0), "raw header")
    need(16 + block == len(payload), "the LZ4 block size is not the rest of the payload")
    pixels = lz4_block(payload[16:], height * width * channels)
    if raw_size is not None:
        need((width, height, channels) == raw_size + (3,), f"raw tensor {width}x{height}x{channels}")
    return np.frombuffer(pixels, np.uint8).reshape(height, width, channels)


# ---------------------------------------------------------------------------- coefficients

def coefficient_header(rec):
    """Checks a coefficient record's header; returns (geometry, band-count offset)."""
    need(rec[0:4] == b"TFJC", "bad coefficient magic")
    need(rec[4] != 1, "coefficient layout v1, retired")
    need(rec[4] == 2, f"coefficient record version {rec[4]}")
    n, space, flags, width, height, tables = u("BBBHHB", rec, 5)
    need(rec[13:16] == b"\0\0\0", "reserved coefficient header bytes")
    need({1: (1,), 2: (3,), 3: (3,), 4: (4,), 5: (4,)}.get(space, ()) == (n,), "colour space")
    need(flags & ~1 == 0 and width >= 1 and height >= 1 and 1 <= tables <= 4, "header fields")
    comps = [tuple(rec[16 + 3 * c:19 + 3 * c]) for c in range(n)]
    need(all(1 <= h <= 4 and 1 <= v <= 4 and t < tables for h, v, t in comps), "component fields")
    need(n == 1 or sum(h * v for h, v, _ in comps) <= 10, "more than 10 blocks per MCU")
    h_max, v_max = max(c[0] for c in comps), max(c[1] for c in comps)
    geo = {
        "comps": comps, "width": width, "h_max": h_max,
        "wib": [-(-width * h // (8 * h_max)) for h, _, _ in comps],
        "hib": [-(-height * v // (8 * v_max)) for _, v, _ in comps],
        "bands": -(-height // (8 * v_max)),
    }
    at = 16 + 3 * n + 128 * tables
    (count,) = u("I", rec, at)
    need(count == geo["bands"], f"band count {count}, expected {geo['bands']}")
    return geo, at + 4


def band_rows(geo, b, c):
    """Band b holds block rows [b * v, min((b + 1) * v, hib)) of component c."""
    v = geo["comps"][c][1]
    return min((b + 1) * v, geo["hib"][c]) - b * v


def check_coefficients(rec):
    """Checks a codec-4 payload; returns the column groups checked."""
    geo, at = coefficient_header(rec)
    return check_groups_v2(rec, geo, at)


# ---------------------------------------------------------------------------- version 2

def group_blocks(geo, w, b, g):
    """Blocks per component of column group g of band b: rows of the band x [x0, x1)."""
    blocks = []
    for c, (h, _, _) in enumerate(geo["comps"]):
        x0 = min(g * w * h, geo["wib"][c])
        x1 = min((g + 1) * w * h, geo["wib"][c])
        blocks.append(band_rows(geo, b, c) * (x1 - x0))
    return blocks


def group_bounds(coding, raw):
    """The packed sizes the doc allows a group of `raw` bytes for its coding."""
    if coding == 0:
        return raw, raw
    return 12, 16 + 2 * raw


def check_groups_v2(rec, geo, at):
    coding, w, reserved, groups = u("BBHI", rec, at)
    retired = {1: "v2-lz4", 2: "v2-zstd"}
    need(coding not in retired, f"coefficient layout {retired.get(coding)}, retired")
    need(coding in (0, 3), f"unknown group coding {coding}")
    need(w >= 1 and reserved == 0, f"group width {w} or reserved bytes {reserved}")
    columns = -(-geo["width"] // (8 * geo["h_max"]))
    need(groups == -(-columns // w), f"{groups} groups per band, expected {-(-columns // w)}")
    entries = geo["bands"] * groups
    need(at + 8 + 8 * entries <= len(rec), f"group table of {entries} entries runs past the record")
    table = np.frombuffer(rec, "<u4", 2 * entries, at + 8).reshape(entries, 2).tolist()
    data = at + 8 + 8 * entries
    tables = None
    if coding == 3:
        (size,) = u("I", rec, data)
        need(data + 4 + size <= len(rec), f"Huffman tables of {size} bytes run past the record")
        classes = 1 if len(geo["comps"]) == 1 else 2
        tables = huffman_tables(rec[data + 4:data + 4 + size], 3 * classes)
        data += 4 + size
    need(sum(p for p, _ in table) == len(rec) - data, "groups do not fill the payload")
    blocks = [group_blocks(geo, w, i // groups, i % groups) for i in range(entries)]
    for i, ((packed, raw), k) in enumerate(zip(table, blocks)):
        low, high = group_bounds(coding, raw)
        need(10 * sum(k) <= raw <= 199 * sum(k) and low <= packed <= high,
             f"group {i // groups},{i % groups}: packed {packed} / raw {raw} bytes out of bounds")
    view = memoryview(rec)
    for i, ((packed, raw), k) in enumerate(zip(table, blocks)):
        where = f"group {i // groups},{i % groups}"
        coded = view[data:data + packed]
        data += packed
        try:
            group = decode_group(coding, coded, raw, k, tables)
            check_group(group, sum(k))
        except FormatError as e:
            raise FormatError(f"{where}: {e}") from None
    return entries


def decode_group(coding, coded, raw, blocks, tables):
    if coding == 0:
        return bytes(coded)
    return huffman_group(coded, raw, blocks[0], sum(blocks), tables)


def check_group(group, k):
    """The raw bytes' checks: DC K x i16, masks K x u64 (bit 0 clear), V values, E wide."""
    raw = len(group)
    masks = np.frombuffer(group, "<u8", k, 2 * k)
    need(not (masks & np.uint64(1)).any(), "bit 0 of a mask is set")
    v = int(np.unpackbits(np.frombuffer(group, np.uint8, 8 * k, 2 * k)).sum())
    need(10 * k + v <= raw, f"{v} values run past the raw size {raw}")
    values = np.frombuffer(group, np.int8, v, 10 * k)
    need((values != 0).all(), "a value byte is 0 (values are the nonzero coefficients)")
    e = int((values == -128).sum())
    need(10 * k + v + 2 * e == raw, f"10K + V + 2E = {10 * k + v + 2 * e}, raw size {raw}")
    wide = np.frombuffer(group, "<i2", e, 10 * k + v)
    need(((wide < -127) | (wide > 127)).all(), "a wide coefficient fits in -127..127")


# ---------------------------------------------------------------------------- Huffman

def huffman_tables(data, count):
    """Parses `count` tables filling `data`: a constant byte (mode 0) or a lookup (mode 1)."""
    pos, tables = 0, []
    for t in range(count):
        need(pos + 2 <= len(data), f"Huffman table {t} runs past the tables' size")
        mode, arg = data[pos], data[pos + 1]
        need(mode in (0, 1), f"Huffman table {t}: mode {mode}")
        if mode == 0:
            tables.append(arg)
            pos += 2
            continue
        nibbles = data[pos + 2:pos + 3 + arg // 2]
        need(len(nibbles) == arg // 2 + 1, f"Huffman table {t} runs past the tables' size")
        need(arg % 2 or nibbles[-1] >> 4 == 0, f"Huffman table {t}: high nibble past m")
        lengths = [nibbles[v // 2] >> (4 * (v % 2)) & 15 for v in range(arg + 1)]
        try:
            tables.append(huffman_lookup(lengths))
        except FormatError as e:
            raise FormatError(f"Huffman table {t}: {e}") from None
        pos += 3 + arg // 2
    need(pos == len(data), f"Huffman tables take {pos} of their {len(data)} bytes")
    return tables


def huffman_lookup(lengths):
    """Canonical codes from code lengths; returns (symbol, length) lists by the next 11 bits."""
    need(max(lengths) <= 11, "a code longer than 11 bits")
    need(lengths[-1] > 0, "no code for m")
    coded = sorted((n, v) for v, n in enumerate(lengths) if n)
    need(len(coded) >= 2, "fewer than two codes")
    need(sum(1 << (11 - n) for n, _ in coded) == 1 << 11, "the code is not complete")
    symbols, sizes = [0] * 2048, [0] * 2048
    code, last = 0, coded[0][0]
    for n, v in coded:
        code <<= n - last
        last = n
        first = code << (11 - n)
        symbols[first:first + (1 << (11 - n))] = [v] * (1 << (11 - n))
        sizes[first:first + (1 << (11 - n))] = [n] * (1 << (11 - n))
        code += 1
    return symbols, sizes


class BitStream:
    """One of a group's four streams: the next 11 bits at every bit position, MSB first."""

    def __init__(self, data):
        self.bits = np.unpackbits(np.frombuffer(bytes(data), np.uint8))
        self.size = len(self.bits)
        padded = np.concatenate([self.bits, np.zeros(11, np.uint8)]).astype(np.uint16)
        window = np.zeros(self.size + 1, np.uint16)
        for k in range(11):
            window = (window << 1) | padded[k:k + self.size + 1]
        self.window = window.tolist()
        self.pos = 0

    def decode(self, table, count, p):
        if isinstance(table, int):  # mode 0: every byte is the table's, in no bits
            return bytes([table]) * count
        symbols, sizes = table
        window, pos, out = self.window, self.pos, bytearray(count)
        try:
            for i in range(count):
                w = window[pos]
                out[i] = symbols[w]
                pos += sizes[w]
        except IndexError:
            pos = self.size + 1
        need(pos <= self.size, f"Huffman stream {p} runs past its {self.size // 8} bytes")
        self.pos = pos
        return out

    def finish(self, p):
        need(-(-self.pos // 8) * 8 == self.size,
             f"Huffman stream {p} is {self.size // 8} bytes for {self.pos} bits of codes")
        need(not self.bits[self.pos:].any(), f"Huffman stream {p}: padding bits not zero")


def huffman_group(coded, raw, k0, k, tables):
    """Decodes a coding-3 group: six segments, each cut in four parts, one per stream."""
    sizes = u("III", coded, 0)
    need(sum(sizes) <= len(coded) - 12, f"stream sizes {sizes} exceed the packed size")
    cuts = [12, 12 + sizes[0], 12 + sizes[0] + sizes[1], 12 + sum(sizes), len(coded)]
    streams = [BitStream(coded[cuts[p]:cuts[p + 1]]) for p in range(4)]
    one = 3 if len(tables) == 6 else 0  # class 1's first table; class 0's when L = 1
    out = bytearray()
    for n, table in ((2 * k0, 0), (2 * (k - k0), one), (8 * k0, 1), (8 * (k - k0), one + 1)):
        out += huffman_segment(streams, tables[table], n)
    v0 = int(np.unpackbits(np.frombuffer(bytes(out[2 * k:2 * k + 8 * k0]), np.uint8)).sum())
    need(v0 <= raw - 10 * k, f"component 0's {v0} values run past the raw size {raw}")
    out += huffman_segment(streams, tables[2], v0)
    out += huffman_segment(streams, tables[one + 2], raw - 10 * k - v0)
    for p, stream in enumerate(streams):
        stream.finish(p)
    return bytes(out)


def huffman_segment(streams, table, n):
    q = -(-n // 4)
    return b"".join(s.decode(table, min((p + 1) * q, n) - min(p * q, n), p)
                    for p, s in enumerate(streams))


# ---------------------------------------------------------------------------- source

def imagefolder_order(root):
    """torchvision ImageFolder's (path, label) list: classes sorted, os.walk sorted."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for label, name in enumerate(classes):
        for folder, _, files in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for f in sorted(files):
                if f.lower().endswith((".jpg", ".jpeg", ".png")):
                    samples.append((os.path.join(folder, f), label))
    return classes, samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pack")
    parser.add_argument("--source", help="the ImageFolder the pack was made from")
    parser.add_argument("--raw-size", help="WxH that codec-2 tensors must have")
    args = parser.parse_args()
    raw_size = tuple(int(v) for v in args.raw_size.split("x")) if args.raw_size else None
    try:
        version, codec, total, classes, shards = read_manifest(args.pack)
        records = []
        for s, line in enumerate(shards):
            records += read_shard(os.path.join(args.pack, line[0]), s, version, codec, line)
        need(len(records) == total, "record count")
        kinds, intervals, groups = {}, 0, 0
        for where, label, r_codec, index_len, payload in records:
            need(not classes or label < len(classes), f"{where}: label {label} >= {len(classes)}")
            try:
                if r_codec == 1 and payload[:2] == b"\xff\xd8":
                    check_jpeg(payload)
                    kind = "jpeg"
                elif r_codec == 1:
                    check_png(payload)
                    kind = "png"
                elif r_codec == 2:
                    check_raw(payload, raw_size)
                    kind = "raw"
                elif r_codec == 3:
                    intervals += check_indexed(payload[:index_len], payload[index_len:])
                    kind = "indexed"
                else:
                    groups += check_coefficients(payload)
                    kind = "coefficients"
            except (FormatError, struct.error, IndexError, ValueError, KeyError, TypeError) as e:
                raise FormatError(f"{where}: {e}") from None
            kinds[kind] = kinds.get(kind, 0) + 1
        if args.source:
            src_classes, samples = imagefolder_order(args.source)
            need(classes == src_classes, f"classes {classes} differ from {src_classes}")
            need(len(samples) == total, f"{total} records, the folder has {len(samples)} images")
            for (path, label), (where, r_label, r_codec, _, payload) in zip(samples, records):
                need(label == r_label, f"{where}: label {r_label}, {path} has {label}")
                if codec == 1:
                    need(payload == open(path, "rb").read(), f"{where} is not {path}")
    except (FormatError, OSError, ValueError, struct.error) as e:
        print(f"read_shards: FAIL: {args.pack}: {e}")
        return 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"read_shards: OK {args.pack}: {total} records in {len(shards)} shards ({summary}); "
          f"{intervals} intervals, {groups} groups checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
