#pragma once

// The coefficient store: a JPEG's quantised DCT coefficients kept in a byte-aligned
// coding that decodes at memory speed, for decodes that skip Huffman decoding entirely.
//
// PackCoefficients reads a JPEG's coefficients losslessly (libjpeg's
// jpeg_read_coefficients, so baseline, progressive and arithmetic files alike) and
// stores them with what decoding needs in bands of column groups, one band per iMCU row
// (the layout is docs/shard-format.md's, "Coefficient records"). The layouts earlier
// builds also wrote (version 1, LZ4 and zstd groups) are retired: reading one is a
// DecodeError (kUnsupported) that names it and the repack command.
// CoefficientDecoder::DecodeInto reads only the column groups that cover a crop, unpacks
// only the blocks of the crop's iMCU columns, and hands them to libjpeg-turbo's own IDCT,
// upsampling and colour conversion (or one fused pass with libjpeg's arithmetic,
// codecs/ycc_rows.h): its pixels are byte-identical to JpegDecoder::DecodeInto on the
// original JPEG with the same plan and options.
//
// ReadCoefficientInfo checks a stored record's header against itself (sizes, factors,
// tables, group table adding up to the record's length) before any allocation, so a
// damaged or hostile record is a DecodeError (kCorrupt, kTooLarge), never a crash.
//
// Ownership: all functions borrow their inputs for the call only; results are values.
// Thread safety: the free functions keep no state; a CoefficientDecoder, like a
// JpegDecoder, is used by one thread at a time.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::codecs {

// How a record codes each column group (docs/shard-format.md); the values are the
// record's coding byte (1 and 2 are retired).
enum class CoefficientCoding : std::uint8_t { kNone = 0, kHuffman = 3 };

struct CoefficientPackOptions {
  // Largest width * height accepted, checked from the header before reading any data.
  std::int64_t max_pixels = std::int64_t{1} << 26;
  // Largest number of scans read from a progressive file.
  int max_scans = 100;
  // The coding of each column group, and the group width in pixels (rounded down to
  // whole iMCUs, at least one; 1..255 iMCUs). On the shared corpus
  // (bench/RESULTS-coef.md): stored (the default) ~1.88x the JPEG bytes, the fastest to
  // decode; Huffman ~1.06x at ~0.58x its speed.
  CoefficientCoding coding = CoefficientCoding::kNone;
  int group_pixels = 128;
};

// A stored record, or why the input was left as it came.
struct CoefficientPackResult {
  bool packed = false;
  // When !packed: the class (kUnsupported for 12-bit, lossless files and progressive
  // files whose scans leave coefficients unrefined, which libjpeg would smooth;
  // kCorrupt, kTruncated, kTooLarge, kNotJpeg, kTooManyScans) and a one-line reason.
  // The caller stores such files unchanged.
  DecodeErrorKind refusal = DecodeErrorKind::kUnsupported;
  std::string reason;
  std::vector<std::byte> record;  // the stored form (empty when !packed)
};

// Reads the coefficients of `jpeg` and stores them. Never throws DecodeError: input it
// cannot store is reported in the result. Throws std::bad_alloc, and
// std::invalid_argument for options out of their ranges.
CoefficientPackResult PackCoefficients(std::span<const std::byte> jpeg,
                                       const CoefficientPackOptions& options = {});

// Whether `bytes` start with the coefficient record magic ("TFJC").
bool LooksLikeCoefficients(std::span<const std::byte> bytes);

// The image a record holds, from its header alone: width, height, components, colour
// space, subsampling, mcu_width/mcu_height (the iMCU: 8 x the largest sampling
// factors). Checks the whole header and group table against the record's size, and the
// pixel limit. Throws DecodeError (kCorrupt, kTooLarge; kUnsupported for a retired
// layout).
ImageInfo ReadCoefficientInfo(std::span<const std::byte> record,
                              std::int64_t max_pixels = std::int64_t{1} << 26);

// ReadCoefficientInfo's checks, and every column group decoded and checked as a decode
// would: for verifying stored data. Throws DecodeError as ReadCoefficientInfo.
void CheckCoefficients(std::span<const std::byte> record,
                       std::int64_t max_pixels = std::int64_t{1} << 26);

// Where the time of one DecodeInto went, for codec_bench.
struct CoefficientTimes {
  double groups_seconds = 0;  // the header, Huffman decoding and checks of the groups
  double unpack_seconds = 0;  // coefficient unpacking (zero for DecodeUnpackedInto)
  double idct_seconds = 0;    // libjpeg-turbo's inverse DCT of the crop's blocks
  double rows_seconds = 0;    // the rest of the scanline decode: upsampling, colour
};

// One 8x8 block of quantised coefficients in natural (row-major) order, as libjpeg's
// JBLOCK; aligned as libjpeg-turbo's SIMD IDCT may load it.
struct alignas(32) CoefficientBlock {
  std::int16_t c[64];
};

// A record with all its coefficients unpacked in memory: what DecodeUnpackedInto decodes,
// so that codec_bench can measure the decode's ceiling (IDCT, upsampling, colour and
// resize alone, no group decoding and no unpacking). `blocks` holds component after component, each
// its height_in_blocks x width_in_blocks blocks row-major; `first_block[c]` is where
// component c starts. Memory: 128 bytes per block (about 6x the record).
struct UnpackedCoefficients {
  std::vector<std::byte> record;  // a copy of the record (its header is read per decode)
  std::vector<CoefficientBlock> blocks;
  std::size_t first_block[4] = {0, 0, 0, 0};
};

// Decodes and unpacks every column group of `record`. Throws DecodeError as CheckCoefficients.
UnpackedCoefficients UnpackCoefficients(std::span<const std::byte> record,
                                        std::int64_t max_pixels = std::int64_t{1} << 26);

class CoefficientDecoder {
 public:
  // portable_kernels: the portable code instead of the AVX-512 kernels (unpack, group
  // checks, Huffman table build, and the fused upsampling and colour conversion in place of
  // libjpeg's own) that it picks at run time where the CPU has them, and the resize's SSE2
  // kernels instead of its AVX2 ones. The same pixels; for tests.
  explicit CoefficientDecoder(const JpegOptions& options = {}, bool portable_kernels = false);
  ~CoefficientDecoder();
  CoefficientDecoder(CoefficientDecoder&&) noexcept;
  CoefficientDecoder& operator=(CoefficientDecoder&&) noexcept;

  const JpegOptions& options() const;

  // Decodes plan.crop of the stored image resized to out.width x out.height into `out`,
  // byte-identical to JpegDecoder(options()).DecodeInto on the original JPEG.
  // report.decoded is in scaled pixels of the whole image; report.resize_seconds is the
  // resize's share. `times`, if given, receives the rest of the split.
  // REQUIRES: out.channels == 3; the crop lies inside the image and is non-empty
  // (otherwise DecodeError kInvalidArgument). Throws DecodeError as ReadCoefficientInfo.
  DecodeReport DecodeInto(std::span<const std::byte> record, const CropPlan& plan,
                          const PixelView& out, CoefficientTimes* times = nullptr);

  // DecodeInto from coefficients UnpackCoefficients already unpacked: the same pixels,
  // without the groups' decoding and unpacking (the ceiling a stored decode can reach).
  // REQUIRES and throws as DecodeInto.
  DecodeReport DecodeUnpackedInto(const UnpackedCoefficients& unpacked, const CropPlan& plan,
                                  const PixelView& out, CoefficientTimes* times = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::codecs
