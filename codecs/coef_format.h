// The coefficient record's format, shared by its writer (codecs/coef_pack.cc), its reader
// (codecs/coef_format.cc) and its decoder (codecs/jpeg_coefficients.cc): the magic, the
// little-endian fields, and the geometry the header states (docs/shard-format.md). Not
// installed.

#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "codecs/byte_order.h"

namespace tilefeed::codecs::detail {

inline constexpr std::uint8_t kMagic[4] = {'T', 'F', 'J', 'C'};
inline constexpr std::size_t kFixedHeader = 16;
inline constexpr int kMaxGroupWidth = 255;  // iMCU columns

// --- The record's geometry, as the header states it and libjpeg would compute it.

struct Geometry {
  int width = 0, height = 0, components = 0;
  int color_space = 0;  // libjpeg's J_COLOR_SPACE value
  bool adobe = false;   // the file had an Adobe marker (CMYK stored inverted)
  int tables = 0;
  int max_h = 1, max_v = 1;
  std::array<int, 4> h{}, v{}, table{}, wib{}, hib{};  // wib/hib: size in blocks
  std::array<std::array<std::uint16_t, 64>, 4> quant{};
  int bands = 0;                                      // iMCU rows
  int coding = 0;                                     // CoefficientCoding: 0 stored, 3 Huffman
  int cols = 0;                                       // iMCU columns
  int group_width = 0;                                // iMCU columns per group
  int groups = 1;                                     // column groups per band
  std::size_t band_table = 0;                         // offset of the band (group) table
  std::size_t data = 0;                               // offset of the first band's (group's) data
  std::size_t huff_tables = 0, huff_table_bytes = 0;  // coding 3: the Huffman tables
  int huff_classes() const { return components == 1 ? 1 : 2; }
  // Block columns [group_begin, group_end) of component c in column group k.
  int group_begin(int k, int c) const {
    return static_cast<int>(std::min<std::int64_t>(std::int64_t{k} * group_width * h[c], wib[c]));
  }
  int group_end(int k, int c) const { return group_begin(k + 1, c); }
  int band_rows(int band, int c) const { return std::min(v[c], hib[c] - band * v[c]); }
  std::size_t group_blocks(int band, int k, int c) const {
    return std::size_t(band_rows(band, c)) * std::size_t(group_end(k, c) - group_begin(k, c));
  }
  std::size_t group_blocks(int band, int k) const {
    std::size_t n = 0;
    for (int c = 0; c < components; ++c) n += group_blocks(band, k, c);
    return n;
  }
};

// Fills the block counts, bands, columns and groups from the size and sampling factors.
void ComputeBlocks(Geometry& g);

// Whether libjpeg's colour space `color_space` (a J_COLOR_SPACE) has `components` components.
bool ColorSpaceFits(int color_space, int components);

// Throws DecodeError kCorrupt naming the coefficient record.
[[noreturn]] void Corrupt(const std::string& what);

// Reads and checks everything but the bands' contents. Throws DecodeError.
Geometry ParseGeometry(std::span<const std::byte> rec, std::int64_t max_pixels);

}  // namespace tilefeed::codecs::detail
