#pragma once

// Raw uint8 HWC tensors compressed with the LZ4 block format, for datasets stored
// pre-decoded (CIFAR, pre-resized ImageNet). An encoded tensor is a 16-byte header ("TFR1",
// height, width, channels 1..4, the block's size) followed by one LZ4 block; the byte
// layout is docs/shard-format.md's (codec 2).
//
// Decoding checks every size field against the input length, the pixel limit and the
// caller's buffer before it writes a byte, so a hostile input cannot overrun anything.
// Thread safety: all functions are stateless and may be called concurrently.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tilefeed/codecs/image.h"

namespace tilefeed::codecs {

struct RawInfo {
  int height = 0;
  int width = 0;
  int channels = 0;

  std::size_t pixel_bytes() const { return static_cast<std::size_t>(height) * width * channels; }
  friend bool operator==(const RawInfo&, const RawInfo&) = default;
};

inline constexpr std::size_t kRawHeaderSize = 16;

// Compresses `pixels` (HWC, tightly packed, info.pixel_bytes() long) into a new buffer.
// REQUIRES: pixels.size() == info.pixel_bytes(); info dimensions within the header's range.
// A violation throws DecodeError(kInvalidArgument) rather than writing a bad header.
std::vector<std::byte> EncodeRaw(std::span<const std::uint8_t> pixels, const RawInfo& info);

// Reads and validates the header. Throws DecodeError (kNotJpeg is never used here:
// a foreign input is kCorrupt, a short one kTruncated, one over `max_pixels` kTooLarge).
RawInfo ReadRawInfo(std::span<const std::byte> encoded, std::int64_t max_pixels = 1 << 26);

// Decompresses into `out`, which must hold exactly info.pixel_bytes() bytes of HWC
// pixels. Throws DecodeError if the header is bad (as ReadRawInfo), if the block is
// corrupt or does not decompress to exactly that many bytes (kCorrupt), or if out.size()
// != ReadRawInfo(encoded).pixel_bytes() (kInvalidArgument, checked before any write).
// After a kCorrupt failure the contents of `out` are unspecified.
void DecodeRawInto(std::span<const std::byte> encoded, std::span<std::uint8_t> out,
                   std::int64_t max_pixels = 1 << 26);

}  // namespace tilefeed::codecs
