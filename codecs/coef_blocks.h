#pragma once

// The coefficient store's unpack of its streams into 8x8 coefficient blocks
// (codecs/jpeg_coefficients.cc; the bytes are specified in docs/shard-format.md).
//
// The unpack is the store's hottest loop after the entropy decode. With AVX-512 VBMI2
// (asked at run time: the build targets any x86-64) a block is one masked load of its
// values, one expand by its mask, and two zigzag permutations to 16-bit coefficients,
// whatever its number of values; elsewhere, one store per value.
//
// Thread safety: stateless.

#include <array>
#include <cstddef>
#include <cstdint>

#include "codecs/jpeg_coefficients.h"

namespace tilefeed::codecs::detail {

// Zigzag index -> natural (row-major) index, as in the JPEG standard.
inline constexpr std::array<std::uint8_t, 64> kNatural = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

// Where the next block of each of a column group's streams starts.
struct MaskedStreams {
  const std::uint8_t* dc;
  const std::uint8_t* masks;
  const std::uint8_t* values;
  const std::uint8_t* wide;
};

// Unpacks the next `count` blocks of `s` into out[0, count) and moves `s` past them; `dc`
// is the DC value before the first block and becomes the last block's. `portable` forces
// the one-store-per-value loop (tests compare the two).
// REQUIRES: the streams hold those blocks whole, masks without bit 0 and as many value and
// wide bytes as the masks and escapes say (the store checks each group before unpacking).
void UnpackMaskedBlocks(MaskedStreams& s, int count, std::uint16_t& dc, CoefficientBlock* out,
                        bool portable = false);

// The 0x80 bytes (escapes to the wide stream) among values[0, n): the store's check of
// every group and its step over the blocks beside a crop. 64 bytes per compare with
// AVX-512 (asked at run time), else eight per 64-bit word; `portable` forces the latter.
std::size_t CountEscapes(const std::uint8_t* values, std::size_t n, bool portable = false);

}  // namespace tilefeed::codecs::detail
