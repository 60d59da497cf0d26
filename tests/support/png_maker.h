#pragma once

// PNGs made at run time with libspng's encoder, in every colour type and bit depth a
// decoder meets, together with the 8-bit RGB pixels a correct decoder gives for them
// (gray replicated, palette looked up, alpha dropped, 16-bit samples' high byte: what
// PIL's convert("RGB") gives, except that PIL clips 16-bit gray). Pure functions of their
// arguments.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tilefeed::testing {

enum class PngKind { kGray1, kGray8, kGray16, kGrayAlpha8, kRgb8, kRgba8, kRgb16, kPalette8 };
const char* ToString(PngKind kind);
inline constexpr PngKind kAllPngKinds[] = {
    PngKind::kGray1, PngKind::kGray8, PngKind::kGray16, PngKind::kGrayAlpha8,
    PngKind::kRgb8,  PngKind::kRgba8, PngKind::kRgb16,  PngKind::kPalette8};

struct TestPng {
  std::vector<std::byte> bytes;   // the PNG file
  std::vector<std::uint8_t> rgb;  // its pixels as packed RGB8, width * height * 3
  int width = 0;
  int height = 0;
};

// A width x height PNG of `kind` whose content looks like SyntheticPhoto (seed).
// REQUIRES: width, height > 0.
TestPng MakeTestPng(PngKind kind, int width, int height, bool interlaced = false,
                    std::uint64_t seed = 1);

// Byte offset of the first chunk of `type` ("IHDR", "IDAT", ...) in `png`: the offset of
// its length field. Returns 0 when there is none.
std::size_t FindPngChunk(const std::vector<std::byte>& png, std::string_view type);
// Recomputes the CRC of the chunk that starts at `offset` (after editing its data).
void FixPngChunkCrc(std::vector<std::byte>& png, std::size_t offset);

}  // namespace tilefeed::testing
