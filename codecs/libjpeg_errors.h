#pragma once

// libjpeg's error and progress plumbing, and what a header says, shared by the codecs that
// call libjpeg (decoding, transcoding, the coefficient store). Internal: not installed.
//
// libjpeg reports a fatal error by calling error_exit, which must not return. These
// handlers record the failure and longjmp to LibjpegErrors::jump, taken by a setjmp in a
// "guarded" function of the caller whose frames up to libjpeg hold only trivially
// destructible objects (longjmp over a non-trivial destructor is undefined behaviour).
// Corrupt-data warnings jump too when stop_on_damage is set, which also bounds the work a
// hostile file can cause; otherwise the first warning is recorded. Nothing is printed.

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <utility>

// jpeglib.h needs FILE and size_t declared before it.
// clang-format off
#include <jpeglib.h>
// clang-format on

#include "tilefeed/codecs/jpeg.h"  // ImageInfo and its enums

namespace tilefeed::codecs::detail {

enum class LibjpegFailure { kNone, kLibjpeg, kDamage, kTooManyScans };

// `pub` must stay first: libjpeg hands the callbacks a pointer to it.
struct LibjpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  bool stop_on_damage;
  LibjpegFailure failure;
  int failure_code;               // libjpeg message code of the failure
  bool saw_eof;                   // the data ran out (JWRN_JPEG_EOF) at some point
  bool warned;                    // a warning was accepted; message says which
  char message[JMSG_LENGTH_MAX];  // the failure's, or the first accepted warning's, text

  // Forgets the previous image's failure and warnings.
  void Reset(bool stop_on_damage_warnings);
};

// Bounds the scans of a progressive file.
struct LibjpegProgress {
  jpeg_progress_mgr pub;
  LibjpegErrors* errors;
  int max_scans;
};

// Fills errors.pub with our handlers and returns it, for cinfo.err.
jpeg_error_mgr* InstallErrorHandlers(LibjpegErrors& errors);
// Fills progress.pub with the scan-limit monitor and returns it, for cinfo.progress.
jpeg_progress_mgr* InstallScanLimit(LibjpegProgress& progress, LibjpegErrors& errors,
                                    int max_scans);
// The DecodeError for the failure a guarded call recorded while reading `subject` ("JPEG",
// "coefficient record") at `stage` ("header", "data", ...): its class, and a reason
// "<class> <subject> (<stage>): <libjpeg's message>".
DecodeError FailureOf(const LibjpegErrors& errors, const char* subject, const char* stage);
// The DecodeError (kTooLarge) of a width x height JPEG over max_pixels.
DecodeError TooLarge(std::int64_t width, std::int64_t height, std::int64_t max_pixels);
// A PackCoefficients or TranscodeForRandomAccess result that holds nothing but the
// refusal `why`: the input is left as it came.
template <class Result>
Result Refused(const DecodeError& why) {
  Result result;
  result.refusal = why.kind();
  result.reason = why.what();
  return result;
}

// jpeg_create_decompress, jpeg_mem_src + jpeg_read_header (with `save_markers`, keeping
// the COM and APPn markers for a transcode to copy) and jpeg_read_coefficients, each a
// guarded function (above): false when libjpeg jumped out, errors->message saying why.
bool GuardedCreate(jpeg_decompress_struct* cinfo, LibjpegErrors* errors);
bool GuardedReadHeader(jpeg_decompress_struct* cinfo, LibjpegErrors* errors,
                       std::span<const std::byte> jpeg, bool save_markers = false);
bool GuardedReadCoefficients(jpeg_decompress_struct* cinfo, LibjpegErrors* errors,
                             jvirt_barray_ptr** coefficients);

// The ImageInfo names of libjpeg's colour space `space`, and of a file of `components`
// components whose first (up to three) have sampling factors h[c] x v[c].
ColorSpace ColorSpaceOf(J_COLOR_SPACE space);
// ColorSpace is libjpeg's JCS_UNKNOWN ... JCS_YCCK, in libjpeg's order: a cast either way.
static_assert(JCS_UNKNOWN == static_cast<int>(ColorSpace::kUnknown) &&
              JCS_GRAYSCALE == static_cast<int>(ColorSpace::kGrayscale) &&
              JCS_RGB == static_cast<int>(ColorSpace::kRgb) &&
              JCS_YCbCr == static_cast<int>(ColorSpace::kYCbCr) &&
              JCS_CMYK == static_cast<int>(ColorSpace::kCmyk) &&
              JCS_YCCK == static_cast<int>(ColorSpace::kYcck));
// The first component's sampling factors (h, v) of k444 ... k441, in Subsampling's order.
inline constexpr std::pair<int, int> kLumaSampling[] = {{1, 1}, {2, 1}, {2, 2},
                                                        {1, 2}, {4, 1}, {1, 4}};
Subsampling SubsamplingOf(int components, std::span<const int> h, std::span<const int> v);

// After jpeg_read_coefficients: nullptr if a decode of the file runs libjpeg's plain IDCT
// path on the coefficients read, else why not. A progressive file whose scans leave any of
// a component's first 10 coefficients unrefined (coef_bits != 0 after the last scan) is
// block-smoothed by libjpeg (jdcoefct.c, do_block_smoothing); coefficients stored or
// transcoded to a complete baseline file would not be, so their pixels would differ.
// --codec jpeg-index (jpeg_index.cc) and the coefficient codecs (jpeg_coefficients.cc) both store
// such files as they came, by this one test.
const char* NotPlain(const jpeg_decompress_struct& cinfo);

}  // namespace tilefeed::codecs::detail
