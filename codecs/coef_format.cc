// The coefficient record's header: parsing and checking it (ParseGeometry, the group table),
// the geometry libjpeg would compute from it, and the public look-ups that read only the
// header (LooksLikeCoefficients, ReadCoefficientInfo). The bands are read by
// jpeg_coefficients.cc and written by coef_pack.cc.

#include "codecs/coef_format.h"

#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
// clang-format off
#include <jpeglib.h>
// clang-format on

#include "codecs/coef_huffman.h"
#include "codecs/jpeg_coefficients.h"
#include "codecs/libjpeg_errors.h"

namespace tilefeed::codecs {
namespace detail {

void ComputeBlocks(Geometry& g) {
  for (int c = 0; c < g.components; ++c) {
    const std::int64_t imcu_width = std::int64_t{8} * g.max_h;
    const std::int64_t imcu_height = std::int64_t{8} * g.max_v;
    g.wib[c] = static_cast<int>((std::int64_t{g.width} * g.h[c] + imcu_width - 1) / imcu_width);
    g.hib[c] = static_cast<int>((std::int64_t{g.height} * g.v[c] + imcu_height - 1) / imcu_height);
  }
  g.bands = (g.height + 8 * g.max_v - 1) / (8 * g.max_v);
  g.cols = (g.width + 8 * g.max_h - 1) / (8 * g.max_h);
  g.groups = (g.cols + g.group_width - 1) / g.group_width;
}

bool ColorSpaceFits(int color_space, int components) {
  switch (color_space) {
    case JCS_GRAYSCALE:
      return components == 1;
    case JCS_RGB:
    case JCS_YCbCr:
      return components == 3;
    case JCS_CMYK:
    case JCS_YCCK:
      return components == 4;
    default:
      return false;
  }
}

[[noreturn]] void Corrupt(const std::string& what) {
  throw DecodeError(DecodeErrorKind::kCorrupt, "corrupt coefficient record: " + what);
}

}  // namespace detail

namespace {

using detail::ByteAt;
using detail::Corrupt;
using detail::Geometry;
using detail::kFixedHeader;
using detail::kMagic;
using detail::Le16;
using detail::Le32;
using detail::ParseGeometry;

// A record of a layout earlier builds wrote and this one no longer reads: what to repack
// with instead.
[[noreturn]] void Retired(const char* layout, const char* codec) {
  throw DecodeError(DecodeErrorKind::kUnsupported,
                    std::string("coefficient layout ") + layout +
                        ", retired; repack it: tilefeed-pack SRC OUT --codec " + codec);
}

// Checks every group table entry against its blocks and the coding, and that the packed
// sizes fill the record.
void CheckTable(std::span<const std::byte> rec, const Geometry& g) {
  const std::size_t entries = std::size_t(g.bands) * std::size_t(g.groups);
  const std::size_t at = g.band_table;
  std::uint64_t total = 0;
  for (std::size_t e = 0; e < entries; ++e) {
    const std::uint64_t packed = Le32(rec, at + 8 * e);
    const std::uint64_t raw = Le32(rec, at + 8 * e + 4);
    const int band = static_cast<int>(e / std::size_t(g.groups));
    const std::uint64_t blocks = g.group_blocks(band, static_cast<int>(e % std::size_t(g.groups)));
    // 10 bytes a block (DC delta, mask) + up to 63 values of 1 byte, each possibly with 2
    // more in the wide stream.
    const bool sizes_fit = raw >= 10 * blocks && raw <= 199 * blocks;
    const bool packed_fits = g.coding == 0
                                 ? packed == raw
                                 : packed >= detail::kHuffGroupHeader && packed <= 16 + 2 * raw;
    if (!sizes_fit || !packed_fits) {
      Corrupt("band " + std::to_string(band) + " sizes do not fit its blocks");
    }
    total += packed;
  }
  if (total != rec.size() - g.data) Corrupt("bands do not fill the record");
}

}  // namespace

namespace detail {

// Reads and checks everything but the bands' contents.
Geometry ParseGeometry(std::span<const std::byte> rec, std::int64_t max_pixels) {
  if (rec.size() < kFixedHeader || std::memcmp(rec.data(), kMagic, 4) != 0) Corrupt("bad magic");
  Geometry g;
  const int version = static_cast<int>(ByteAt(rec, 4));
  if (version == 1) Retired("v1", "coefficients-fast");
  if (version != 2) Corrupt("unknown version " + std::to_string(version));
  g.components = static_cast<int>(ByteAt(rec, 5));
  g.color_space = static_cast<int>(ByteAt(rec, 6));
  if (!ColorSpaceFits(g.color_space, g.components)) Corrupt("bad colour space or components");
  if ((ByteAt(rec, 7) & ~1u) != 0) Corrupt("unknown flags");
  g.adobe = (ByteAt(rec, 7) & 1) != 0;
  g.width = static_cast<int>(Le16(rec, 8));
  g.height = static_cast<int>(Le16(rec, 10));
  if (g.width == 0 || g.height == 0) Corrupt("zero dimension");
  if (std::int64_t{g.width} * g.height > max_pixels) {
    throw detail::TooLarge(g.width, g.height, max_pixels);
  }
  g.tables = static_cast<int>(ByteAt(rec, 12));
  if (g.tables < 1 || g.tables > 4 || ByteAt(rec, 13) != 0 || Le16(rec, 14) != 0) {
    Corrupt("bad table count or reserved bytes");
  }
  std::size_t at = kFixedHeader;
  const std::size_t fixed = at + 3 * std::size_t(g.components) + 128 * std::size_t(g.tables) + 4;
  if (rec.size() < fixed) Corrupt("header ends early");
  int blocks_in_mcu = 0;
  for (int c = 0; c < g.components; ++c, at += 3) {
    g.h[c] = static_cast<int>(ByteAt(rec, at));
    g.v[c] = static_cast<int>(ByteAt(rec, at + 1));
    g.table[c] = static_cast<int>(ByteAt(rec, at + 2));
    if (g.h[c] < 1 || g.h[c] > 4 || g.v[c] < 1 || g.v[c] > 4 || g.table[c] >= g.tables) {
      Corrupt("bad sampling factors or table number");
    }
    g.max_h = std::max(g.max_h, g.h[c]);
    g.max_v = std::max(g.max_v, g.v[c]);
    blocks_in_mcu += g.h[c] * g.v[c];
  }
  if (g.components > 1 && blocks_in_mcu > 10) Corrupt("sampling factors too large");
  for (int t = 0; t < g.tables; ++t) {
    for (int k = 0; k < 64; ++k, at += 2) g.quant[t][k] = static_cast<std::uint16_t>(Le16(rec, at));
  }
  const std::uint32_t band_count = Le32(rec, at);
  at += 4;
  if (rec.size() - at < 8) Corrupt("header ends early");
  g.coding = static_cast<int>(ByteAt(rec, at));
  if (g.coding == 1) Retired("v2-lz4", "coefficients-fast");
  if (g.coding == 2) Retired("v2-zstd", "coefficients-small");
  g.group_width = static_cast<int>(ByteAt(rec, at + 1));
  if ((g.coding != 0 && g.coding != 3) || g.group_width == 0 || Le16(rec, at + 2) != 0) {
    Corrupt("bad coding, group width or reserved bytes");
  }
  ComputeBlocks(g);
  if (band_count != static_cast<std::uint32_t>(g.bands)) Corrupt("band count differs");
  if (Le32(rec, at + 4) != static_cast<std::uint32_t>(g.groups)) Corrupt("group count differs");
  at += 8;
  const std::size_t entries = std::size_t(g.bands) * std::size_t(g.groups);
  if ((rec.size() - at) / 8 < entries) Corrupt("band table ends early");
  g.band_table = at;
  g.data = at + 8 * entries;
  if (g.coding == 3) {  // u32 table bytes, then the tables
    if (rec.size() - g.data < 4 || rec.size() - g.data - 4 < Le32(rec, g.data)) {
      Corrupt("Huffman tables end early");
    }
    g.huff_tables = g.data + 4;
    g.huff_table_bytes = Le32(rec, g.data);
    g.data = g.huff_tables + g.huff_table_bytes;
  }
  CheckTable(rec, g);
  return g;
}

}  // namespace detail

bool LooksLikeCoefficients(std::span<const std::byte> bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) == 0;
}

ImageInfo ReadCoefficientInfo(std::span<const std::byte> record, std::int64_t max_pixels) {
  const Geometry g = ParseGeometry(record, max_pixels);
  ImageInfo info;
  info.width = g.width;
  info.height = g.height;
  info.components = g.components;
  info.color_space = detail::ColorSpaceOf(static_cast<J_COLOR_SPACE>(g.color_space));
  info.subsampling = detail::SubsamplingOf(g.components, g.h, g.v);
  info.mcu_width = 8 * g.max_h;
  info.mcu_height = 8 * g.max_v;
  return info;
}

}  // namespace tilefeed::codecs
