// coef_coding_bench: which coding of the coefficient store's bands meets the byte goal
// most cheaply, measured side by side on the same files in one run.
//
// Every JPEG is packed once into a version-1 coefficient record (LZ4 fast bands; the pack
// is timed: that is the coefficient read + stream building + LZ4 fast, per file); each
// band is decompressed back to its byte-aligned streams (docs/shard-format.md,
// "Coefficient records"), and then every band is coded, band by band as the store does,
// with each candidate:
//   v1 streams as stored (block headers, DC deltas, positions, values) under
//     none, LZ4 fast, LZ4HC 4 and 9, zstd -1, 1 and 3;
//   mask streams, a denser byte-aligned coding of the same blocks: per block the DC delta
//     (one byte, or 0x80 then two), a byte saying which of the 8 bytes of the 64-bit
//     zigzag nonzero mask follow, those mask bytes, then the nonzero values (one byte, or
//     0x80 then two), under none, LZ4 fast, zstd -1, 1 and 3.
// Then (--set v2 or all) version 2's column groups as the store writes them (each JPEG
// packed as a stored v2 record, --group-pixels wide), each group coded on its own with
// none, LZ4 fast, zstd 1 and the store's Huffman coding (codecs/coef_huffman.h: per-record
// canonical tables per component class and role, four interleaved bit streams per group):
// whole record bytes against the JPEGs, encode CPU time, and decode + check + unpack of a
// whole image's groups to blocks in rotating rounds, as ratios to LZ4 and zstd 1 (medians
// of per-round ratios), plus the Huffman decode's own split (tables, groups).
// For each v1 coding it prints the bytes against the JPEG files, the encode time (so the pack rate
// the coding would give: the pack's coefficient read + this encode) and the decode time
// of a whole image's bands to unpacked 8x8 blocks (decompression + unpacking), each the
// median over --reps rounds in which the codings rotate every 16 files on one thread.
// The machine this runs on is shared: read the ratios, not the absolute times.

#include <lz4.h>
#include <lz4hc.h>
#include <zstd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/median.h"
#include "codecs/coef_blocks.h"
#include "codecs/coef_huffman.h"
#include "tilefeed/codecs/jpeg_coefficients.h"
#include "tools/cli_checks.h"

namespace {

namespace codecs = tilefeed::codecs;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::uint8_t>;

using codecs::detail::kNatural;  // zigzag index -> natural index

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds of the calling thread: the pack and encode times are charged in these, so
// that other jobs on a loaded machine do not inflate them (the decode rounds use wall
// time, but only their ratios, measured in the same rounds, are read).
double CpuNow() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::uint32_t Le16(const std::uint8_t* p) { return p[0] | p[1] << 8; }
std::uint32_t Le32(const std::uint8_t* p) { return Le16(p) | Le16(p + 2) << 16; }

using Block = codecs::CoefficientBlock;

// One image: its bands' v1 streams (raw) and the blocks in each band.
struct Image {
  std::size_t jpeg_bytes = 0;
  std::vector<Bytes> bands;
  std::vector<std::size_t> blocks;  // blocks per band
};

// Splits a version-1 record into its decompressed bands (the layout of
// docs/shard-format.md; the record was just made by PackCoefficients, so it is trusted).
Image BandsOf(const std::vector<std::byte>& record) {
  const auto* r = reinterpret_cast<const std::uint8_t*>(record.data());
  const int n = r[5], tables = r[12];
  const int width = static_cast<int>(Le16(r + 8)), height = static_cast<int>(Le16(r + 10));
  int h[4], v[4], hmax = 1, vmax = 1;
  for (int c = 0; c < n; ++c) {
    h[c] = r[16 + 3 * c];
    v[c] = r[17 + 3 * c];
    hmax = std::max(hmax, h[c]);
    vmax = std::max(vmax, v[c]);
  }
  std::size_t at = 16 + 3 * std::size_t(n) + 128 * std::size_t(tables);
  const std::uint32_t band_count = Le32(r + at);
  at += 4;
  std::size_t data = at + 8 * std::size_t(band_count);
  Image image;
  for (std::uint32_t b = 0; b < band_count; ++b) {
    const std::uint32_t packed = Le32(r + at + 8 * std::size_t{b}),
                        raw = Le32(r + at + 8 * std::size_t{b} + 4);
    Bytes band(raw);
    LZ4_decompress_safe(reinterpret_cast<const char*>(r + data),
                        reinterpret_cast<char*>(band.data()), static_cast<int>(packed),
                        static_cast<int>(raw));
    data += packed;
    std::size_t blocks = 0;
    for (int c = 0; c < n; ++c) {
      const int wib = (width * h[c] + 8 * hmax - 1) / (8 * hmax);
      const int hib = (height * v[c] + 8 * vmax - 1) / (8 * vmax);
      blocks += std::size_t(std::min(v[c], hib - static_cast<int>(b) * v[c])) * wib;
    }
    image.bands.push_back(std::move(band));
    image.blocks.push_back(blocks);
  }
  return image;
}

// v1 streams -> blocks, with CoefficientDecoder's unpack (the band as one row).
void UnpackV1(const Bytes& band, std::size_t count, Block* out) {
  const std::uint8_t* headers = band.data();
  const std::uint8_t* positions = headers + 3 * count;
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) total += headers[i] & 63u;
  codecs::detail::ListedStreams s{headers, headers + count, positions, positions + total};
  const int width = static_cast<int>(count);
  codecs::detail::UnpackListedRow(s, width, 0, width, out);
}

void PutSmall(Bytes& out, int value) {  // one byte, or 0x80 and two
  if (value >= -127 && value <= 127) {
    out.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(value)));
  } else {
    out.push_back(0x80);
    out.push_back(static_cast<std::uint8_t>(value & 0xFF));
    out.push_back(static_cast<std::uint8_t>((value >> 8) & 0xFF));
  }
}

Bytes ToMask(const Bytes& band, std::size_t count) {
  std::vector<Block> blocks(count);
  UnpackV1(band, count, blocks.data());
  Bytes out;
  int previous = 0;
  for (const Block& b : blocks) {
    PutSmall(out, b.c[0] - previous);
    previous = b.c[0];
    std::uint64_t mask = 0;
    for (int k = 1; k < 64; ++k) mask |= std::uint64_t{b.c[kNatural[k]] != 0} << k;
    std::uint8_t which = 0;
    for (int i = 0; i < 8; ++i) which |= std::uint8_t(((mask >> (8 * i)) & 0xFF) != 0) << i;
    out.push_back(which);
    for (int i = 0; i < 8; ++i) {
      if (which >> i & 1) out.push_back(static_cast<std::uint8_t>(mask >> (8 * i)));
    }
    for (std::uint64_t m = mask; m != 0; m &= m - 1)
      PutSmall(out, b.c[kNatural[__builtin_ctzll(m)]]);
  }
  return out;
}

int GetSmall(const std::uint8_t*& p) {
  if (*p != 0x80) return static_cast<std::int8_t>(*p++);
  const int v = static_cast<std::int16_t>(p[1] | p[2] << 8);
  p += 3;
  return v;
}

void UnpackMask(const Bytes& band, std::size_t count, Block* out) {
  const std::uint8_t* p = band.data();
  int dc = 0;
  for (std::size_t x = 0; x < count; ++x) {
    std::int16_t* block = out[x].c;
    std::memset(block, 0, sizeof(Block));
    dc += GetSmall(p);
    block[0] = static_cast<std::int16_t>(dc);
    const unsigned which = *p++;
    std::uint64_t mask = 0;
    for (unsigned w = which; w != 0; w &= w - 1) {
      const unsigned i = static_cast<unsigned>(__builtin_ctz(w));
      mask |= std::uint64_t{*p++} << (8 * i);
    }
    for (; mask != 0; mask &= mask - 1)
      block[kNatural[__builtin_ctzll(mask)]] = static_cast<std::int16_t>(GetSmall(p));
  }
}

enum class Back { kNone, kLz4, kLz4Hc, kZstd };

struct Coding {
  std::string name;
  bool mask;
  Back back;
  int level;
  std::vector<Bytes> coded;                       // per image, per band, concatenated ...
  std::vector<std::vector<std::uint32_t>> sizes;  // ... with each band's coded size
  std::size_t bytes = 0;
  double encode_seconds = 0;
  std::vector<double> decode_rounds;  // seconds per round
};

Bytes Compress(const Bytes& raw, Back back, int level, ZSTD_CCtx* cctx) {
  Bytes out;
  switch (back) {
    case Back::kNone:
      return raw;
    case Back::kLz4:
    case Back::kLz4Hc: {
      const int bound = LZ4_compressBound(static_cast<int>(raw.size()));
      out.resize(std::size_t(bound));
      const auto* src = reinterpret_cast<const char*>(raw.data());
      auto* dst = reinterpret_cast<char*>(out.data());
      const int n = back == Back::kLz4
                        ? LZ4_compress_default(src, dst, static_cast<int>(raw.size()), bound)
                        : LZ4_compress_HC(src, dst, static_cast<int>(raw.size()), bound, level);
      out.resize(std::size_t(n));
      return out;
    }
    case Back::kZstd: {
      out.resize(ZSTD_compressBound(raw.size()));
      const std::size_t n =
          ZSTD_compressCCtx(cctx, out.data(), out.size(), raw.data(), raw.size(), level);
      out.resize(n);
      return out;
    }
  }
  return out;
}

// Decodes one image's coded bands to blocks; returns a checksum so nothing is optimised
// away.
std::uint64_t DecodeImage(const Coding& coding, std::size_t i, const Image& image, Bytes& raw,
                          std::vector<Block>& blocks, ZSTD_DCtx* dctx) {
  const std::uint8_t* p = coding.coded[i].data();
  std::uint64_t sum = 0;
  for (std::size_t b = 0; b < image.bands.size(); ++b) {
    const std::uint32_t size = coding.sizes[i][2 * b], raw_size = coding.sizes[i][2 * b + 1];
    if (raw.size() < raw_size) raw.resize(raw_size);
    switch (coding.back) {
      case Back::kNone:
        std::memcpy(raw.data(), p, raw_size);
        break;
      case Back::kLz4:
      case Back::kLz4Hc:
        LZ4_decompress_safe(reinterpret_cast<const char*>(p), reinterpret_cast<char*>(raw.data()),
                            static_cast<int>(size), static_cast<int>(raw_size));
        break;
      case Back::kZstd:
        ZSTD_decompressDCtx(dctx, raw.data(), raw_size, p, size);
        break;
    }
    const std::size_t count = image.blocks[b];
    if (blocks.size() < count) blocks.resize(count);
    Bytes view(raw.begin(), raw.begin() + raw_size);  // exact size for the unpackers
    if (coding.mask) {
      UnpackMask(view, count, blocks.data());
    } else {
      UnpackV1(view, count, blocks.data());
    }
    sum += static_cast<std::uint16_t>(blocks[count / 2].c[0]);
    p += size;
  }
  return sum;
}

std::vector<Bytes> LoadJpegs(const std::filesystem::path& root, std::size_t limit) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.size() > limit) paths.resize(limit);
  std::vector<Bytes> files;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return files;
}

// Codes every image's bands with every coding (CPU time charged to each); returns v1
// LZ4 fast's encode time, to take out of the measured pack time.
double EncodeAll(std::vector<Coding>& codings, const std::vector<Image>& images) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  double lz4_fast_encode = 0;
  for (Coding& coding : codings) {
    for (const Image& image : images) {
      const double start = CpuNow();
      Bytes all;
      std::vector<std::uint32_t> sizes;
      for (std::size_t b = 0; b < image.bands.size(); ++b) {
        const Bytes raw = coding.mask ? ToMask(image.bands[b], image.blocks[b]) : image.bands[b];
        const Bytes coded = Compress(raw, coding.back, coding.level, cctx);
        all.insert(all.end(), coded.begin(), coded.end());
        sizes.push_back(static_cast<std::uint32_t>(coded.size()));
        sizes.push_back(static_cast<std::uint32_t>(raw.size()));
      }
      coding.encode_seconds += CpuNow() - start;
      coding.bytes += all.size();
      coding.coded.push_back(std::move(all));
      coding.sizes.push_back(std::move(sizes));
    }
    if (coding.name == "v1 lz4") lz4_fast_encode = coding.encode_seconds;
  }

  ZSTD_freeCCtx(cctx);
  return lz4_fast_encode;
}

// Decodes every image with every coding in `reps` rounds, the codings rotating every 16
// images, and appends each coding's seconds of each round to its decode_rounds; returns
// the sum of decode(coding, image index, image), a checksum of the blocks.
template <typename CodingT, typename ImageT, typename Decode>
std::uint64_t RotatingRounds(std::vector<CodingT>& codings, const std::vector<ImageT>& images,
                             int reps, Decode decode) {
  std::uint64_t checksum = 0;
  constexpr std::size_t kBlock = 16;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> seconds(codings.size(), 0.0);
    for (std::size_t begin = 0, k = 0; begin < images.size(); begin += kBlock, ++k) {
      const std::size_t end = std::min(images.size(), begin + kBlock);
      for (std::size_t turn = 0; turn < codings.size(); ++turn) {
        const std::size_t m = (k + turn) % codings.size();
        const auto start = Clock::now();
        for (std::size_t i = begin; i < end; ++i) checksum += decode(codings[m], i, images[i]);
        seconds[m] += Since(start);
      }
    }
    for (std::size_t m = 0; m < codings.size(); ++m) codings[m].decode_rounds.push_back(seconds[m]);
  }
  return checksum;
}

// Decodes every image with every coding in `reps` rounds (RotatingRounds).
std::uint64_t DecodeRounds(std::vector<Coding>& codings, const std::vector<Image>& images,
                           int reps) {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  Bytes raw;
  std::vector<Block> blocks;
  const std::uint64_t checksum = RotatingRounds(
      codings, images, reps, [&](const Coding& coding, std::size_t i, const Image& image) {
        return DecodeImage(coding, i, image, raw, blocks, dctx);
      });
  ZSTD_freeDCtx(dctx);
  return checksum;
}

// What main measured besides the codings.
struct Totals {
  std::size_t images, files, jpeg_bytes, v1_lz4_record_bytes;
  double pack_seconds, lz4_fast_encode;
};

void PrintTable(const std::vector<Coding>& codings, const Totals& t, const std::string& root,
                int reps, std::uint64_t checksum) {
  const double n = double(t.images);
  const std::size_t jpeg_bytes = t.jpeg_bytes;
  const double pack_seconds = t.pack_seconds, lz4_fast_encode = t.lz4_fast_encode;
  const double read_seconds = pack_seconds - lz4_fast_encode;  // coefficient read + streams
  std::printf(
      "coef_coding_bench: %zu storable JPEGs of %zu files from %s, %.1f MB; one thread, "
      "decode median of %d rotating rounds (checksum %llu)\n",
      t.images, t.files, root.c_str(), static_cast<double>(jpeg_bytes) / 1e6, reps,
      static_cast<unsigned long long>(checksum));
  std::printf(
      "  pack with v1 LZ4 fast: %.0f images per CPU-second (coefficient read + streams %.0f "
      "CPU-us/image, LZ4 fast %.0f); v1 records %.3fx the JPEGs\n",
      n / pack_seconds, 1e6 * read_seconds / n, 1e6 * lz4_fast_encode / n,
      double(t.v1_lz4_record_bytes) / double(jpeg_bytes));
  std::printf("  %-13s %9s %8s %10s %14s %10s %10s\n", "coding", "MB", "x JPEG", "enc CPU-us",
              "pack img/CPU-s", "decode us", "x v1 lz4");
  double v1_lz4_decode = 0;
  for (const Coding& c : codings) {
    if (c.name == "v1 lz4") v1_lz4_decode = tilefeed::bench::Median(c.decode_rounds);
  }
  for (const Coding& c : codings) {
    const double decode = tilefeed::bench::Median(c.decode_rounds);
    std::printf("  %-13s %9.1f %8.3f %10.0f %14.0f %10.1f %10.2f\n", c.name.c_str(),
                double(c.bytes) / 1e6, double(c.bytes) / double(jpeg_bytes),
                1e6 * c.encode_seconds / n, n / (read_seconds + c.encode_seconds), 1e6 * decode / n,
                decode / v1_lz4_decode);
  }
  std::printf(
      "  (bytes: band data only, without the record header and band table; decode: a "
      "whole image's bands to 8x8 blocks)\n");
}

// --- Version 2: the store's column groups (DC deltas, masks, values, wide), each group
// coded on its own as the store does, plus the record's header and group table.

namespace detail = tilefeed::codecs::detail;

struct Group {
  std::size_t offset, size;  // in V2Image::raw
  detail::HuffGroupShape shape;
};

// One image as a version-2 record holds it, its groups' raw bytes back to back.
struct V2Image {
  std::size_t overhead = 0;  // the record's header and group table
  int classes = 1;           // Huffman table classes: 1 for gray, else 2
  Bytes raw;
  std::vector<Group> groups;
};

// Splits a version-2 stored record (coding 0) into its groups (docs/shard-format.md; the
// record was just made by PackCoefficients, so it is trusted).
V2Image GroupsOf(const std::vector<std::byte>& record) {
  const auto* r = reinterpret_cast<const std::uint8_t*>(record.data());
  const int n = r[5], tables = r[12];
  const int width = static_cast<int>(Le16(r + 8)), height = static_cast<int>(Le16(r + 10));
  int h[4], v[4], wib[4], hib[4], hmax = 1, vmax = 1;
  for (int c = 0; c < n; ++c) {
    h[c] = r[16 + 3 * c];
    v[c] = r[17 + 3 * c];
    hmax = std::max(hmax, h[c]);
    vmax = std::max(vmax, v[c]);
  }
  for (int c = 0; c < n; ++c) {
    wib[c] = (width * h[c] + 8 * hmax - 1) / (8 * hmax);
    hib[c] = (height * v[c] + 8 * vmax - 1) / (8 * vmax);
  }
  std::size_t at = 16 + 3 * std::size_t(n) + 128 * std::size_t(tables);
  const std::uint32_t bands = Le32(r + at);
  const int group_width = r[at + 5];
  const std::uint32_t groups = Le32(r + at + 8);
  at += 12;
  V2Image image;
  image.classes = n == 1 ? 1 : 2;
  image.overhead = at + 8 * std::size_t{bands} * groups;
  image.raw.assign(r + image.overhead, r + record.size());
  std::size_t offset = 0;
  for (std::uint32_t b = 0; b < bands; ++b) {
    for (std::uint32_t k = 0; k < groups; ++k) {
      Group group{offset, Le32(r + at + 8 * (std::size_t{b} * groups + k) + 4), {}};
      for (int c = 0; c < n; ++c) {
        const int x0 = std::min<int>(static_cast<int>(k) * group_width * h[c], wib[c]);
        const int x1 = std::min<int>(static_cast<int>(k + 1) * group_width * h[c], wib[c]);
        const std::size_t blocks =
            std::size_t(std::min(v[c], hib[c] - static_cast<int>(b) * v[c])) * (x1 - x0);
        group.shape.blocks += blocks;
        if (c == 0) group.shape.first_blocks = blocks;
      }
      offset += group.size;
      image.groups.push_back(group);
    }
  }
  return image;
}

enum class V2Back { kNone, kLz4, kZstd, kHuff };

struct V2Coding {
  std::string name;
  V2Back back;
  std::vector<Bytes> coded;                       // per image: (tables,) groups
  std::vector<std::vector<std::uint32_t>> sizes;  // per image: (table bytes,) group sizes
  std::size_t bytes = 0;
  double encode_seconds = 0;
  std::vector<double> decode_rounds;
};

// Codes one image's groups; returns its coded bytes and sizes.
void EncodeV2(V2Coding& coding, const V2Image& image, ZSTD_CCtx* cctx) {
  Bytes all;
  std::vector<std::uint32_t> sizes;
  if (coding.back == V2Back::kHuff) {
    detail::HuffEncoder encoder(image.classes);
    for (const Group& g : image.groups) encoder.Count(image.raw.data() + g.offset, g.size, g.shape);
    encoder.Finish();
    std::vector<std::byte> out;
    encoder.AppendTables(out);
    sizes.push_back(static_cast<std::uint32_t>(out.size()));
    for (const Group& g : image.groups) {
      const std::size_t before = out.size();
      encoder.AppendGroup(image.raw.data() + g.offset, g.size, g.shape, out);
      sizes.push_back(static_cast<std::uint32_t>(out.size() - before));
    }
    const auto* p = reinterpret_cast<const std::uint8_t*>(out.data());
    all.assign(p, p + out.size());
  } else {
    const Back back = coding.back == V2Back::kNone  ? Back::kNone
                      : coding.back == V2Back::kLz4 ? Back::kLz4
                                                    : Back::kZstd;
    for (const Group& g : image.groups) {
      const Bytes raw(image.raw.begin() + std::ptrdiff_t(g.offset),
                      image.raw.begin() + std::ptrdiff_t(g.offset + g.size));
      const Bytes coded = Compress(raw, back, 1, cctx);
      all.insert(all.end(), coded.begin(), coded.end());
      sizes.push_back(static_cast<std::uint32_t>(coded.size()));
    }
  }
  coding.bytes += all.size() + image.overhead;
  coding.coded.push_back(std::move(all));
  coding.sizes.push_back(std::move(sizes));
}

// The store's check of a decoded group (CheckGroup) and its unpack to blocks, with the
// store's own pieces; returns a checksum.
std::uint64_t CheckAndUnpackV2(const std::uint8_t* raw, std::size_t size, std::size_t blocks,
                               Block* out) {
  const std::uint8_t* masks = raw + 2 * blocks;
  const std::uint8_t* values = raw + 10 * blocks;
  std::uint64_t bit0 = 0;
  for (std::size_t i = 0; i < blocks; ++i) {
    std::uint64_t mask;
    std::memcpy(&mask, masks + 8 * i, 8);
    bit0 |= mask;
  }
  const std::size_t count = codecs::detail::CountMaskBits(masks, blocks);
  if ((bit0 & 1) != 0 || 10 * blocks + count > size) std::abort();
  const std::size_t escapes = codecs::detail::CountEscapes(values, count);
  if (10 * blocks + count + 2 * escapes != size) std::abort();
  codecs::detail::MaskedStreams s{raw, masks, values, values + count};
  std::uint16_t dc = 0;
  codecs::detail::UnpackMaskedBlocks(s, static_cast<int>(blocks), dc, out);
  return static_cast<std::uint16_t>(out[blocks / 2].c[0]);
}

// Decodes one image's groups to blocks (decode, check, unpack); returns a checksum.
std::uint64_t DecodeV2(const V2Coding& coding, std::size_t i, const V2Image& image, Bytes& raw,
                       std::vector<Block>& blocks, ZSTD_DCtx* dctx, detail::HuffDecoder& huff) {
  const std::uint8_t* p = coding.coded[i].data();
  const std::vector<std::uint32_t>& sizes = coding.sizes[i];
  std::size_t s = 0;
  if (coding.back == V2Back::kHuff) {
    const char* why = nullptr;
    if (huff.ReadTables(p, sizes[0], image.classes, &why) != sizes[0]) std::abort();
    p += sizes[s++];
  }
  std::uint64_t sum = 0;
  for (const Group& g : image.groups) {
    const std::uint32_t size = sizes[s++];
    if (raw.size() < g.size) raw.resize(g.size);
    bool ok = true;
    switch (coding.back) {
      case V2Back::kNone:
        std::memcpy(raw.data(), p, g.size);
        break;
      case V2Back::kLz4:
        ok = LZ4_decompress_safe(reinterpret_cast<const char*>(p),
                                 reinterpret_cast<char*>(raw.data()), static_cast<int>(size),
                                 static_cast<int>(g.size)) == int(g.size);
        break;
      case V2Back::kZstd:
        ok = ZSTD_decompressDCtx(dctx, raw.data(), g.size, p, size) == g.size;
        break;
      case V2Back::kHuff:
        ok = huff.DecodeGroup(p, size, raw.data(), g.size, g.shape) == nullptr;
        break;
    }
    if (!ok) std::abort();
    if (blocks.size() < g.shape.blocks + 1) blocks.resize(g.shape.blocks + 1);
    sum += CheckAndUnpackV2(raw.data(), g.size, g.shape.blocks, blocks.data());
    p += size;
  }
  return sum;
}

// Checks that the Huffman coding gives back every group's raw bytes exactly (the other
// codings are checked by their decoders' sizes and DecodeV2's check in the rounds).
void VerifyHuff(const V2Coding& huff, const std::vector<V2Image>& images) {
  detail::HuffDecoder decoder;
  Bytes raw;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const std::uint8_t* p = huff.coded[i].data();
    const char* why = nullptr;
    if (decoder.ReadTables(p, huff.sizes[i][0], images[i].classes, &why) != huff.sizes[i][0]) {
      std::fprintf(stderr, "coef_coding_bench: huff tables refused: %s\n", why);
      std::abort();
    }
    p += huff.sizes[i][0];
    std::size_t s = 1;
    for (const Group& g : images[i].groups) {
      raw.assign(g.size, 0);
      const char* bad = decoder.DecodeGroup(p, huff.sizes[i][s], raw.data(), g.size, g.shape);
      if (bad != nullptr || std::memcmp(raw.data(), images[i].raw.data() + g.offset, g.size) != 0) {
        std::fprintf(stderr, "coef_coding_bench: huff round trip differs (image %zu): %s\n", i,
                     bad != nullptr ? bad : "other bytes");
        std::abort();
      }
      p += huff.sizes[i][s++];
    }
  }
}

// Decodes every image with every v2 coding in `reps` rounds (RotatingRounds).
std::uint64_t DecodeRoundsV2(std::vector<V2Coding>& codings, const std::vector<V2Image>& images,
                             int reps) {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  detail::HuffDecoder huff;
  Bytes raw;
  std::vector<Block> blocks;
  const std::uint64_t checksum = RotatingRounds(
      codings, images, reps, [&](const V2Coding& coding, std::size_t i, const V2Image& image) {
        return DecodeV2(coding, i, image, raw, blocks, dctx, huff);
      });
  ZSTD_freeDCtx(dctx);
  return checksum;
}

// Prints the v2 table: bytes against the JPEGs, encode CPU time, decode time and its
// ratios to LZ4 and zstd 1 (medians of the per-round ratios).
void PrintV2(const std::vector<V2Coding>& codings, std::size_t images, std::size_t jpeg_bytes,
             int reps, std::uint64_t checksum) {
  std::printf(
      "v2 groups: %zu images, %.1f MB of JPEG; decode = group decode + check + unpack to "
      "blocks, median of %d rotating rounds (checksum %llu)\n",
      images, double(jpeg_bytes) / 1e6, reps, static_cast<unsigned long long>(checksum));
  std::printf("  %-10s %9s %8s %10s %10s %10s %10s\n", "coding", "MB", "x JPEG", "enc CPU-us",
              "decode us", "x lz4", "x zstd 1");
  const auto find = [&](V2Back back) -> const V2Coding& {
    for (const V2Coding& c : codings) {
      if (c.back == back) return c;
    }
    return codings.front();
  };
  const V2Coding& lz4 = find(V2Back::kLz4);
  const V2Coding& zstd = find(V2Back::kZstd);
  for (const V2Coding& c : codings) {
    std::vector<double> over_lz4, over_zstd;
    for (int r = 0; r < reps; ++r) {
      over_lz4.push_back(c.decode_rounds[r] / lz4.decode_rounds[r]);
      over_zstd.push_back(c.decode_rounds[r] / zstd.decode_rounds[r]);
    }
    std::printf("  %-10s %9.1f %8.3f %10.0f %10.1f %10.3f %10.3f\n", c.name.c_str(),
                double(c.bytes) / 1e6, double(c.bytes) / double(jpeg_bytes),
                1e6 * c.encode_seconds / double(images),
                1e6 * tilefeed::bench::Median(c.decode_rounds) / double(images),
                tilefeed::bench::Median(over_lz4), tilefeed::bench::Median(over_zstd));
  }
  std::printf(
      "  (bytes: whole version-2 records; decode time: a ratio below 1 is faster; per-image "
      "times of the median round)\n");
}

// The Huffman decode's own split, outside the rounds: reading the record's tables (and
// building the lookup tables) against decoding its groups, per image, and per raw byte.
void PrintHuffSplit(const V2Coding& huff, const std::vector<V2Image>& images) {
  detail::HuffDecoder decoder;
  Bytes raw;
  double tables = 0, groups = 0;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const std::uint8_t* p = huff.coded[i].data();
    const char* why = nullptr;
    auto start = Clock::now();
    decoder.ReadTables(p, huff.sizes[i][0], images[i].classes, &why);
    tables += Since(start);
    p += huff.sizes[i][0];
    start = Clock::now();
    std::size_t s = 1;
    for (const Group& g : images[i].groups) {
      if (raw.size() < g.size) raw.resize(g.size);
      if (decoder.DecodeGroup(p, huff.sizes[i][s], raw.data(), g.size, g.shape) != nullptr) {
        std::abort();
      }
      p += huff.sizes[i][s++];
      bytes += g.size;
    }
    groups += Since(start);
  }
  const double n = double(images.size());
  std::printf("v2 huff alone: tables %.1f us/image, groups %.1f us/image (%.2f ns per raw byte)\n",
              1e6 * tables / n, 1e6 * groups / n, 1e9 * groups / double(bytes));
}

// Packs `files` as version-2 stored records and measures the v2 codings on them.
void RunV2(const std::vector<Bytes>& files, int group_pixels, int reps) {
  codecs::CoefficientPackOptions stored;
  stored.version = 2;
  stored.coding = codecs::CoefficientCoding::kNone;
  stored.group_pixels = group_pixels;
  std::vector<V2Image> images;
  std::size_t jpeg_bytes = 0;
  for (const Bytes& f : files) {
    const codecs::CoefficientPackResult r = codecs::PackCoefficients(
        std::span(reinterpret_cast<const std::byte*>(f.data()), f.size()), stored);
    if (!r.packed) continue;
    images.push_back(GroupsOf(r.record));
    jpeg_bytes += f.size();
  }
  std::vector<V2Coding> codings = {{"v2 none", V2Back::kNone, {}, {}, 0, 0, {}},
                                   {"v2 lz4", V2Back::kLz4, {}, {}, 0, 0, {}},
                                   {"v2 zstd 1", V2Back::kZstd, {}, {}, 0, 0, {}},
                                   {"v2 huff", V2Back::kHuff, {}, {}, 0, 0, {}}};
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  for (V2Coding& coding : codings) {
    for (const V2Image& image : images) {
      const double start = CpuNow();
      EncodeV2(coding, image, cctx);
      coding.encode_seconds += CpuNow() - start;
    }
  }
  ZSTD_freeCCtx(cctx);
  VerifyHuff(codings.back(), images);
  PrintHuffSplit(codings.back(), images);
  const std::uint64_t checksum = DecodeRoundsV2(codings, images, reps);
  PrintV2(codings, images.size(), jpeg_bytes, reps, checksum);
}

// The bench itself; main() turns an exception that escapes it into one line.
int Run(int argc, char** argv) {
  CLI::App app{
      "coef_coding_bench: bytes, encode and decode time of candidate codings of the\n"
      "coefficient store's bands, side by side on one thread"};
  std::string data;
  std::size_t max_files = 1000;
  int reps = 3;
  app.add_option("--data", data, "corpus root (its train/ split if present) or folder")->required();
  app.add_option("--files", max_files, "at most this many files")->capture_default_str();
  app.add_option("--reps", reps, "decode rounds (median reported)")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  std::string set = "all";
  int group_pixels = 128;
  app.add_option("--set", set, "which codings: v1 (whole bands), v2 (column groups) or all")
      ->check(CLI::IsMember({"v1", "v2", "all"}))
      ->capture_default_str();
  app.add_option("--group-pixels", group_pixels, "v2: column group width in pixels")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "coef_coding_bench")) return *rc;
  std::filesystem::path root(data);
  if (!std::filesystem::is_directory(root)) {
    std::fprintf(stderr, "coef_coding_bench: %s is not a directory\n", data.c_str());
    return 2;
  }
  if (std::filesystem::is_directory(root / "train")) root /= "train";
  const std::vector<Bytes> files = LoadJpegs(root, max_files);
  if (set != "v1") RunV2(files, group_pixels, reps);
  if (set == "v2") return 0;

  codecs::CoefficientPackOptions fast;
  fast.version = 1;  // BandsOf reads version 1 records
  fast.lz4hc_level = 0;
  std::vector<Image> images;
  std::size_t jpeg_bytes = 0, v1_lz4_record_bytes = 0;
  double pack_seconds = 0;
  for (const Bytes& f : files) {
    const double start = CpuNow();
    const codecs::CoefficientPackResult r = codecs::PackCoefficients(
        std::span(reinterpret_cast<const std::byte*>(f.data()), f.size()), fast);
    pack_seconds += CpuNow() - start;
    if (!r.packed) continue;
    images.push_back(BandsOf(r.record));
    images.back().jpeg_bytes = f.size();
    jpeg_bytes += f.size();
    v1_lz4_record_bytes += r.record.size();
  }
  if (images.empty()) {
    std::fprintf(stderr, "coef_coding_bench: no storable JPEG under %s\n", root.c_str());
    return 2;
  }

  std::vector<Coding> codings = {
      {"v1 none", false, Back::kNone, 0, {}, {}, 0, 0, {}},
      {"v1 lz4", false, Back::kLz4, 0, {}, {}, 0, 0, {}},
      {"v1 lz4hc 4", false, Back::kLz4Hc, 4, {}, {}, 0, 0, {}},
      {"v1 lz4hc 9", false, Back::kLz4Hc, 9, {}, {}, 0, 0, {}},
      {"v1 zstd -1", false, Back::kZstd, -1, {}, {}, 0, 0, {}},
      {"v1 zstd 1", false, Back::kZstd, 1, {}, {}, 0, 0, {}},
      {"v1 zstd 3", false, Back::kZstd, 3, {}, {}, 0, 0, {}},
      {"mask none", true, Back::kNone, 0, {}, {}, 0, 0, {}},
      {"mask lz4", true, Back::kLz4, 0, {}, {}, 0, 0, {}},
      {"mask zstd -1", true, Back::kZstd, -1, {}, {}, 0, 0, {}},
      {"mask zstd 1", true, Back::kZstd, 1, {}, {}, 0, 0, {}},
      {"mask zstd 3", true, Back::kZstd, 3, {}, {}, 0, 0, {}},
  };
  const double lz4_fast_encode = EncodeAll(codings, images);
  const std::uint64_t checksum = DecodeRounds(codings, images, reps);

  PrintTable(codings,
             Totals{images.size(), files.size(), jpeg_bytes, v1_lz4_record_bytes, pack_seconds,
                    lz4_fast_encode},
             root.string(), reps, checksum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coef_coding_bench: %s\n", e.what());
    return 1;
  }
}
