#pragma once

// Random-access JPEG: lossless restart-interval transcoding at pack time, and a crop
// decode at read time that entropy-decodes only the restart intervals covering the crop.
//
// TranscodeForRandomAccess rewrites a JPEG without touching its DCT coefficients (same
// pixels) as baseline sequential with optimized Huffman tables and a restart marker
// every k MCUs, where k divides the MCUs per row, so that restart intervals tile every
// MCU row and lie on a grid. It returns the new file and a JpegIntervalIndex: the byte
// offset of every interval's entropy data. IndexedJpegDecoder::DecodeInto copies the
// header and the intervals that cover a crop (plus the decoder's margin) into a smaller
// JPEG whose origin is the first covered interval, and decodes that with
// JpegDecoder::DecodeInto: rows below, rows above and intervals beside the crop are never
// entropy-decoded, and the output is byte-identical to JpegDecoder::DecodeInto on the
// whole transcoded file.
//
// Ownership: all functions borrow their inputs for the duration of the call only;
// results are values. Thread safety: the free functions keep no state and may run
// concurrently; an IndexedJpegDecoder, like a JpegDecoder, is used by one thread at a
// time.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::codecs {

// Where every restart interval of a transcoded JPEG starts. Intervals are numbered row
// by row: interval i covers MCU row i / intervals_per_row(), MCU columns
// (i % intervals_per_row()) * mcus_per_interval and on. All offsets count bytes from the
// start of the JPEG.
struct JpegIntervalIndex {
  int width = 0;  // image size in pixels, as in the SOF
  int height = 0;
  int mcu_width = 0;  // MCU size in pixels (8 for single-component files)
  int mcu_height = 0;
  int mcus_per_row = 0;       // ceil(width / mcu_width)
  int mcu_rows = 0;           // ceil(height / mcu_height)
  int mcus_per_interval = 0;  // the DRI value; divides mcus_per_row
  // Entropy data of interval i starts at offsets[i]; offsets[0] is the scan start, and
  // offsets[i] (i > 0) follows the RSTn marker (n = (i - 1) % 8) ending interval i - 1.
  std::vector<std::uint32_t> offsets;
  std::uint32_t scan_end = 0;  // offset of the EOI marker that ends the last interval

  int intervals_per_row() const { return mcus_per_row / mcus_per_interval; }
  friend bool operator==(const JpegIntervalIndex&, const JpegIntervalIndex&) = default;
};

struct TranscodeOptions {
  // Target restart-interval width in pixels: k is the divisor of the MCUs per row whose
  // width k * mcu_width is nearest to it, among divisors at least half of it (else one
  // interval per MCU row). Wider intervals cost fewer markers; narrower ones skip more.
  // On ImageNet-like files 32 px (2 MCUs at 4:2:0) costs 0.9 % in RST markers and 0.8 %
  // in index, less than optimized Huffman tables save, and the indexed RandomResizedCrop
  // decode is ~1.1x faster than with 64 px and ~1.4x faster than one interval per row.
  int interval_width = 32;
  // Largest width * height accepted, checked from the header before reading any data.
  std::int64_t max_pixels = std::int64_t{1} << 26;
  // Largest number of scans read from a progressive file.
  int max_scans = 100;
  // Keep APPn and COM markers (EXIF, ICC, XMP); training reads no metadata, so by default
  // only what decoding needs (JFIF or Adobe colour-transform markers) is written.
  bool copy_metadata = false;
};

// A transcoded file and its index, or why the input was left as it came.
struct TranscodeResult {
  bool transcoded = false;
  // When !transcoded: the class (kUnsupported for 12-bit, arithmetic, lossless and
  // hierarchical files, and progressive files whose scans leave any of the first 10
  // coefficients unrefined, which libjpeg block-smooths and a transcode would not;
  // kCorrupt, kTruncated, kTooLarge, kNotJpeg, kTooManyScans) and a
  // one-line reason with libjpeg's message. The caller stores such files unchanged.
  DecodeErrorKind refusal = DecodeErrorKind::kUnsupported;
  std::string reason;
  std::vector<std::byte> jpeg;  // the transcoded file (empty when !transcoded)
  JpegIntervalIndex index;      // its interval index
};

// Transcodes `jpeg` losslessly to baseline with optimized Huffman tables and restart
// intervals on a grid. Never throws DecodeError: input it cannot transcode is reported
// in the result. Throws std::bad_alloc only.
TranscodeResult TranscodeForRandomAccess(std::span<const std::byte> jpeg,
                                         const TranscodeOptions& options = {});

// The stored form of `index` (docs/shard-format.md, codec 3): varint deltas, about two
// bytes an interval.
std::vector<std::byte> SerializeIndex(const JpegIntervalIndex& index);

// Parses a stored index and checks every field against `jpeg` as docs/shard-format.md
// requires, so a damaged index is never trusted for an offset. Throws
// DecodeError(kCorrupt) naming the first mismatch.
JpegIntervalIndex ParseIndex(std::span<const std::byte> bytes, std::span<const std::byte> jpeg);

// The part of the image (in source pixels, whole MCUs clipped to the image) whose
// intervals IndexedJpegDecoder::DecodeInto entropy-decodes for `plan` and an output of
// out_width x out_height with `options` (the decoder's), for metrics and tests.
// REQUIRES: `index` belongs to `jpeg` (as for DecodeInto); the crop lies inside the image.
Rect CoveredRegion(std::span<const std::byte> jpeg, const JpegIntervalIndex& index,
                   const CropPlan& plan, int out_width, int out_height, const JpegOptions& options);

// A JpegDecoder that, given an interval index, decodes only the intervals a crop needs.
class IndexedJpegDecoder {
 public:
  explicit IndexedJpegDecoder(const JpegOptions& options = {});

  // The wrapped decoder, for whole-file decodes and files stored without an index.
  JpegDecoder& decoder() { return decoder_; }

  // Decodes plan.crop resized to out.width x out.height into `out`, byte-identical to
  // decoder().DecodeInto(jpeg, plan, out). report.decoded is in scaled pixels of the
  // whole image. REQUIRES: `index` came from ParseIndex(…, jpeg) or from transcoding
  // `jpeg`; out.channels == 3. A mismatched index is still checked enough (header, and the
  // bounds of every offset used) to throw DecodeError(kCorrupt) rather than read out of
  // bounds; other failures are JpegDecoder::DecodeInto's.
  DecodeReport DecodeInto(std::span<const std::byte> jpeg, const JpegIntervalIndex& index,
                          const CropPlan& plan, const PixelView& out);

 private:
  JpegDecoder decoder_;
  std::vector<std::byte> sub_image_;  // the crop's JPEG; only grows
};

}  // namespace tilefeed::codecs
