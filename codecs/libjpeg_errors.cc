#include "codecs/libjpeg_errors.h"

// clang-format off
#include <jerror.h>  // after jpeglib.h: it needs its configuration macros
// clang-format on

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace tilefeed::codecs::detail {
namespace {

// Warnings after which the pixels are wrong (grey or garbage past the damage), as
// opposed to harmless ones (extraneous bytes, an unknown JFIF version).
bool IsDamageWarning(int code) {
  switch (code) {
    case JWRN_ARITH_BAD_CODE:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_JPEG_EOF:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
      return true;
    default:
      return false;
  }
}

extern "C" void OnErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<LibjpegErrors*>(cinfo->err);
  errors->failure = LibjpegFailure::kLibjpeg;
  errors->failure_code = cinfo->err->msg_code;
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

extern "C" void OnEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* errors = reinterpret_cast<LibjpegErrors*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  cinfo->err->num_warnings++;
  if (code == JWRN_JPEG_EOF) errors->saw_eof = true;
  if (IsDamageWarning(code) && errors->stop_on_damage) {
    errors->failure = LibjpegFailure::kDamage;
    errors->failure_code = code;
    (*cinfo->err->format_message)(cinfo, errors->message);
    std::longjmp(errors->jump, 1);
  }
  if (!errors->warned) {
    errors->warned = true;
    (*cinfo->err->format_message)(cinfo, errors->message);
  }
}

extern "C" void OnOutputMessage(j_common_ptr) {}  // libjpeg never prints

// Called while libjpeg absorbs a multi-scan file.
extern "C" void OnProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* progress = reinterpret_cast<LibjpegProgress*>(cinfo->progress);
  if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number > progress->max_scans) {
    LibjpegErrors* errors = progress->errors;
    errors->failure = LibjpegFailure::kTooManyScans;
    std::snprintf(errors->message, sizeof errors->message,
                  "progressive JPEG has more than %d scans", progress->max_scans);
    std::longjmp(errors->jump, 1);
  }
}

// What kind of failure the recorded one is, for DecodeError.
DecodeErrorKind ClassifyFailure(const LibjpegErrors& errors) {
  switch (errors.failure) {
    case LibjpegFailure::kTooManyScans:
      return DecodeErrorKind::kTooManyScans;
    case LibjpegFailure::kDamage:
      return errors.failure_code == JWRN_JPEG_EOF ? DecodeErrorKind::kTruncated
                                                  : DecodeErrorKind::kCorrupt;
    case LibjpegFailure::kLibjpeg:
    case LibjpegFailure::kNone:
      break;
  }
  switch (errors.failure_code) {
    case JERR_NO_SOI:
      return DecodeErrorKind::kNotJpeg;
    case JERR_BAD_PRECISION:
    case JERR_SOF_UNSUPPORTED:
    case JERR_ARITH_NOTIMPL:
    case JERR_NOT_COMPILED:
      return DecodeErrorKind::kUnsupported;
    case JERR_IMAGE_TOO_BIG:
      return DecodeErrorKind::kTooLarge;
    case JERR_INPUT_EMPTY:
    case JERR_INPUT_EOF:
      return DecodeErrorKind::kTruncated;
    default:
      // A header cut short surfaces as some other error after the fake EOI libjpeg
      // inserts at the end of the data.
      return errors.saw_eof ? DecodeErrorKind::kTruncated : DecodeErrorKind::kCorrupt;
  }
}

}  // namespace

void LibjpegErrors::Reset(bool stop_on_damage_warnings) {
  stop_on_damage = stop_on_damage_warnings;
  failure = LibjpegFailure::kNone;
  failure_code = 0;
  saw_eof = false;
  warned = false;
  message[0] = '\0';
  pub.num_warnings = 0;
}

jpeg_error_mgr* InstallErrorHandlers(LibjpegErrors& errors) {
  jpeg_std_error(&errors.pub);
  errors.pub.error_exit = OnErrorExit;
  errors.pub.emit_message = OnEmitMessage;
  errors.pub.output_message = OnOutputMessage;
  errors.Reset(true);
  return &errors.pub;
}

jpeg_progress_mgr* InstallScanLimit(LibjpegProgress& progress, LibjpegErrors& errors,
                                    int max_scans) {
  progress.pub.progress_monitor = OnProgress;
  progress.errors = &errors;
  progress.max_scans = max_scans;
  return &progress.pub;
}

DecodeError FailureOf(const LibjpegErrors& errors, const char* subject, const char* stage) {
  const DecodeErrorKind kind = ClassifyFailure(errors);
  return {kind,
          std::string(ToString(kind)) + " " + subject + " (" + stage + "): " + errors.message};
}

DecodeError TooLarge(std::int64_t width, std::int64_t height, std::int64_t max_pixels) {
  return {DecodeErrorKind::kTooLarge, "JPEG too large: " + std::to_string(width) + "x" +
                                          std::to_string(height) + " is over the limit of " +
                                          std::to_string(max_pixels) + " pixels"};
}

bool GuardedCreate(jpeg_decompress_struct* cinfo, LibjpegErrors* errors) {
  if (setjmp(errors->jump)) return false;
  jpeg_create_decompress(cinfo);
  return true;
}

bool GuardedReadHeader(jpeg_decompress_struct* cinfo, LibjpegErrors* errors,
                       std::span<const std::byte> jpeg, bool save_markers) {
  if (setjmp(errors->jump)) return false;
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(jpeg.data()),
               static_cast<unsigned long>(jpeg.size()));
  if (save_markers) {
    jpeg_save_markers(cinfo, JPEG_COM, 0xFFFF);
    for (int i = 0; i < 16; ++i) jpeg_save_markers(cinfo, JPEG_APP0 + i, 0xFFFF);
  }
  jpeg_read_header(cinfo, TRUE);
  return true;
}

bool GuardedReadCoefficients(jpeg_decompress_struct* cinfo, LibjpegErrors* errors,
                             jvirt_barray_ptr** coefficients) {
  if (setjmp(errors->jump)) return false;
  *coefficients = jpeg_read_coefficients(cinfo);
  return true;
}

ColorSpace ColorSpaceOf(J_COLOR_SPACE space) {
  return space <= JCS_YCCK ? static_cast<ColorSpace>(space) : ColorSpace::kUnknown;
}

Subsampling SubsamplingOf(int components, std::span<const int> h, std::span<const int> v) {
  if (components == 1) return Subsampling::kGray;
  // Only the common layout: full-resolution first component, the others 1x1.
  for (int c = 1; c < std::min(components, 3); ++c) {
    if (h[c] != 1 || v[c] != 1) return Subsampling::kOther;
  }
  const auto* found = std::ranges::find(kLumaSampling, std::pair(h[0], v[0]));
  if (found == std::end(kLumaSampling)) return Subsampling::kOther;
  return static_cast<Subsampling>(found - std::begin(kLumaSampling));
}

const char* NotPlain(const jpeg_decompress_struct& cinfo) {
  for (int c = 0; c < cinfo.num_components; ++c) {
    if (cinfo.comp_info[c].quant_table == nullptr) return "a component without a scan";
    if (!cinfo.progressive_mode || cinfo.coef_bits == nullptr) continue;
    for (int k = 0; k < 10; ++k) {
      if (cinfo.coef_bits[c][k] != 0) return "progressive scans leave coefficients unrefined";
    }
  }
  return nullptr;
}

}  // namespace tilefeed::codecs::detail
