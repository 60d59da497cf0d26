#pragma once

// JPEG encoding on libjpeg's compress API, with every option that shapes what a decoder
// meets: quality, chroma subsampling, progressive and arithmetic coding, restart markers
// and the colour space written to the file (YCbCr, RGB, grayscale, CMYK, YCCK).
//
// Training never encodes; the encoder exists for tools that make datasets (the demo
// maker, the shard packer) and for tests, which make every file they decode. It is pure:
// one call, caller-owned input, a returned byte vector, no threads, no logging.
//
// Thread safety: EncodeJpeg keeps no state between calls; concurrent calls are safe.

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::codecs {

struct EncodeOptions {
  // libjpeg quality, 1..100 (libjpeg's standard tables scaled).
  int quality = 90;
  // Chroma subsampling of luma-chroma files (YCbCr, YCCK): one of k444, k422, k420,
  // k440, k411, k441. RGB and CMYK files are always written at full resolution (k444)
  // and grayscale files have no chroma, so it is ignored for them.
  // Note: TurboJPEG 2.x's tjDecompressHeader3 cannot classify k441 (libjpeg decodes it).
  Subsampling subsampling = Subsampling::k420;
  // Progressive (libjpeg's standard scan script) instead of baseline sequential.
  bool progressive = false;
  // Optimal Huffman tables (a second pass over the coefficients) instead of the standard
  // ones. Ignored with arithmetic coding, which has no Huffman tables.
  bool optimize_huffman = false;
  // Arithmetic entropy coding: rare in the wild, here to test how readers treat it.
  bool arithmetic = false;
  // MCUs between restart markers; 0 = none. At most one of restart_interval and
  // restart_rows may be non-zero.
  int restart_interval = 0;
  // Or: MCU rows between restart markers (libjpeg's restart_in_rows); 0 = none.
  int restart_rows = 0;
  // Colour space of the file. 3-channel (RGB) input: kYCbCr, kRgb (Adobe marker, no
  // colour transform) or kGrayscale (libjpeg converts to luma). 4-channel (CMYK) input:
  // kCmyk or kYcck, both with an Adobe marker. Ignored for 1-channel input.
  ColorSpace jpeg_color_space = ColorSpace::kYCbCr;
};

// Encoding failed: invalid options or input, or libjpeg's own error (its message
// included).
class EncodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Encodes `pixels` as a JPEG and returns the file's bytes. pixels.channels is 1
// (grayscale), 3 (RGB) or 4 (CMYK in Adobe's inverted convention, as Photoshop writes
// it: 255 means no ink, and C * K / 255 approximates R). Rows are pixels.row_stride
// bytes apart; a row_stride of 0 means tightly packed (width * channels).
// REQUIRES: pixels.data points at height rows of width * channels readable bytes.
// Throws EncodeError.
std::vector<std::byte> EncodeJpeg(const ConstPixelView& pixels, const EncodeOptions& options);

}  // namespace tilefeed::codecs
