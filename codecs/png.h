#pragma once

// PNG decoding for training input, with the JPEG decoder's API (tilefeed/codecs/jpeg.h): a header
// probe, then DecodeInto(bytes, plan, out), which writes the crop resized to out's size,
// as RGB, into caller memory (a batch slot).
//
// Any PNG comes out as 8-bit RGB: gray is replicated, palettes are looked up, alpha is
// dropped (not composited), as PIL's convert("RGB") does, and 16-bit samples keep their
// high byte (PIL does the same for 16-bit colour; for 16-bit gray PIL clips instead).
// No gamma or colour-profile correction is applied, as PIL applies none.
//
// The crop is planned as for a JPEG, but a PNG has no DCT scaling and no random access:
// rows are decoded one at a time from the top (the rows above the crop too, as the zlib
// stream demands) and streamed through the same resize as JPEG rows (see
// codecs/row_stream.h), and decoding stops after the crop's last row; the
// CRC of every chunk is checked first (the bytes are in memory), so damage below the crop
// still fails the decode instead of going unseen. At 8/8
// the result is exactly "full decode, crop, resize". Interlaced (Adam7) files cannot be
// read row by row: they are decoded whole into a scratch image (within max_pixels) and
// then cropped and resized; they are rare in datasets, and this keeps them loadable.
//
// libspng rather than libpng: it is small (one C file), maintained, fuzzed in OSS-Fuzz,
// checks chunk CRCs, zlib checksums and image/chunk size limits itself, reports every
// failure as an error code (libpng needs setjmp/longjmp, as libjpeg does), and has a
// row-by-row decode API with built-in conversion of every PNG format to RGB8.
//
// Every failure is a DecodeError (tilefeed/codecs/image.h): kNotJpeg when the bytes are not a PNG
// (the kind means "not the format this decoder reads"; the message names what it is),
// kTruncated, kCorrupt (bad CRC, bad zlib stream, bad header), kTooLarge (over
// max_pixels, checked from the header before any allocation), kInvalidArgument (a
// crop that does not fit). libspng never prints or exits.
//
// Thread safety: a PngDecoder holds reusable scratch memory; use one per thread.
// Distinct decoders may run concurrently. The libspng context itself is made per image
// (libspng contexts are single-use); pixel memory is the decoder's reusable row ring.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::codecs {

struct PngOptions {
  // Largest width * height accepted, checked from the header before any allocation
  // (the loader passes JpegOptions::max_pixels, so both formats share one limit).
  std::int64_t max_pixels = std::int64_t{1} << 26;  // 64 MP, e.g. 8192 x 8192
  // Largest ancillary chunk (text, ICC profile, EXIF) libspng may hold, and the total
  // of all of them; bounds the memory a hostile file's metadata can take.
  std::size_t max_chunk_bytes = std::size_t{8} << 20;
};

// True when `bytes` start with the 8-byte PNG signature.
bool IsPng(std::span<const std::byte> bytes);

// True when `bytes` are not IsPng but start like a PNG whose signature was damaged: at
// least 5 of its 8 bytes in place, or the signature with its "\r\n" turned into "\n" (a
// text-mode copy). SniffNonJpeg names such files, and decoders call them corrupt PNGs.
bool HasDamagedPngSignature(std::span<const std::byte> bytes);

class PngDecoder {
 public:
  explicit PngDecoder(const PngOptions& options = {});
  ~PngDecoder();
  PngDecoder(PngDecoder&&) noexcept;
  PngDecoder& operator=(PngDecoder&&) noexcept;

  const PngOptions& options() const;

  // Reads the header (IHDR). ImageInfo::components counts the file's channels (1 gray
  // or palette, 2 gray+alpha, 3 RGB, 4 RGBA), color_space is kGrayscale or kRgb and
  // progressive means Adam7-interlaced. Throws DecodeError.
  ImageInfo ReadInfo(std::span<const std::byte> png);

  // Decodes plan.crop of the image, resized to out.width x out.height, into `out`.
  // DecodeReport::scale_eighths is always 8; decoded is the rows read (from row 0).
  // REQUIRES: out.channels == 3; the crop lies inside the image and is non-empty
  // (otherwise DecodeError kInvalidArgument).
  DecodeReport DecodeInto(std::span<const std::byte> png, const CropPlan& plan,
                          const PixelView& out);

  // The same, with the plan drawn from the header this call reads. An exception from
  // `planner` propagates and leaves the decoder ready for the next image.
  DecodeReport DecodeInto(std::span<const std::byte> png, const JpegDecoder::CropPlanner& planner,
                          const PixelView& out);

  // Decodes every row and checks every chunk through IEND without writing pixels
  // anywhere but the row scratch: what `tilefeed-inspect --verify` runs. Throws
  // DecodeError.
  void Verify(std::span<const std::byte> png);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::codecs
