#pragma once

// libjpeg-turbo's fancy upsampling (jdsample.c: h2v2_fancy_upsample, h2v1_fancy_upsample)
// and its YCbCr -> RGB conversion (jdcolor.c: ycc_rgb_convert) fused into one pass per
// output row, for the coefficient store's crop decode (codecs/jpeg_coefficients.cc).
//
// Why: after the store stopped entropy-decoding, libjpeg's upsampling and colour
// conversion were a fifth of the loader's profile. libjpeg runs them as two passes over
// whole rows (the upsampled chroma written out and read back) behind its main controller's
// context-row machinery; one pass that keeps the upsampled chroma in registers and writes
// each RGB byte once does the same integer arithmetic in a fraction of the time. The
// arithmetic is libjpeg's to the bit (every coefficient-store test compares against
// libjpeg's own decode of the original; ycc_rows_test compares the kernel against
// libjpeg's formulas written out plainly), so the pixels do not change.
//
// The kernel needs AVX-512 BW and VBMI (asked at run time; the build targets any x86-64).
// Elsewhere the decoder keeps libjpeg's own passes, which are then the fastest there is.
//
// Thread safety: stateless.

#include <cstddef>
#include <cstdint>

namespace tilefeed::codecs::detail {

// How the two chroma components are subsampled against luma (the eligible JPEG
// samplings: luma 2x2, 2x1 or 1x1 sampling factors, chroma 1x1).
enum class ChromaSampling : std::uint8_t { k444, k422, k420 };

// Bytes every plane row passed to YccToRgbRow must be readable before its first sample
// and past its last (the kernel loads whole registers and keeps what it needs).
inline constexpr std::size_t kYccRowSlack = 64;

// True if this CPU runs YccToRgbRow.
bool YccKernelAvailable();

// One RGB row of `width` pixels (width * 3 bytes, nothing written past them) from luma row
// `y` and the chroma rows. For k420, *_near is the chroma row nearest the output row and
// *_far the next nearest (the row above for an even output row, below for an odd one,
// clamped to the component's rows), as libjpeg's h2v2 fancy upsampling pairs them; other
// samplings read *_near only. For k422 and k420, each chroma row must repeat its first
// sample at index -1 and its last at index (width + 1) / 2, as libjpeg's special first
// and last columns behave.
// REQUIRES: YccKernelAvailable(); width >= 1, and (width + 1) / 2 > 2 for k422 and k420
// (libjpeg replicates instead of interpolating below that); every row readable
// kYccRowSlack bytes beyond its samples on either side.
void YccToRgbRow(ChromaSampling sampling, const std::uint8_t* y, const std::uint8_t* cb_near,
                 const std::uint8_t* cb_far, const std::uint8_t* cr_near,
                 const std::uint8_t* cr_far, int width, std::uint8_t* out);

}  // namespace tilefeed::codecs::detail
