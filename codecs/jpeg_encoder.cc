#include "tilefeed/codecs/jpeg_encoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <string>
#include <tuple>
#include <utility>

#include "codecs/libjpeg_errors.h"
// clang-format off
#include <jerror.h>  // after jpeglib.h (libjpeg_errors.h): it needs its configuration macros
// clang-format on

namespace tilefeed::codecs {
namespace {

// Everything the libjpeg region needs, decided and validated beforehand in C++ so that
// the region itself only makes C calls.
struct CompressParams {
  const std::uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 0;
  std::ptrdiff_t row_stride = 0;
  J_COLOR_SPACE in_color_space = JCS_UNKNOWN;
  J_COLOR_SPACE jpeg_color_space = JCS_UNKNOWN;
  int h_samp = 1;  // luma (and YCCK's K) sampling factors; chroma stays 1x1
  int v_samp = 1;
  EncodeOptions options;  // quality, progressive, Huffman, arithmetic and restarts from here
};

// libjpeg's errors longjmp back to the one frame that called setjmp, with libjpeg's text in
// `message` (codecs/libjpeg_errors.h); nothing is printed.
using ErrorManager = detail::LibjpegErrors;

// A destination manager appending straight into the caller's vector, so the encoded
// bytes are written once (jpeg_mem_dest would malloc a buffer we would then copy).
// The vector lives outside the setjmp frame, so a longjmp leaks nothing.
struct VectorDestination {
  jpeg_destination_mgr pub;
  std::vector<std::byte>* out;
};

void InitDestination(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  dest->pub.next_output_byte = reinterpret_cast<JOCTET*>(dest->out->data());
  dest->pub.free_in_buffer = dest->out->size();
}

// libjpeg calls this when the buffer is full (free_in_buffer is not to be trusted here:
// the whole buffer counts as written).
boolean EmptyOutputBuffer(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  const std::size_t used = dest->out->size();
  bool grown = true;
  // No C++ exception may unwind through libjpeg's C frames: turn bad_alloc into a
  // libjpeg error, raised after the catch block has ended.
  try {
    dest->out->resize(used * 2);
  } catch (const std::bad_alloc&) {
    grown = false;
  }
  if (!grown) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  dest->pub.next_output_byte = reinterpret_cast<JOCTET*>(dest->out->data() + used);
  dest->pub.free_in_buffer = dest->out->size() - used;
  return TRUE;
}

void TermDestination(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  // Shrinking never allocates, so this cannot throw.
  dest->out->resize(dest->out->size() - dest->pub.free_in_buffer);
}

// Runs the whole compression. Every local here is trivially destructible, because
// libjpeg's error_exit longjmps back into this frame. Returns false with err->message
// set on failure; `out` then holds garbage the caller discards.
bool Compress(const CompressParams& p, std::vector<std::byte>* out, ErrorManager* err) {
  jpeg_compress_struct cinfo;
  VectorDestination dest;
  cinfo.err = detail::InstallErrorHandlers(*err);
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);

  dest.pub.init_destination = InitDestination;
  dest.pub.empty_output_buffer = EmptyOutputBuffer;
  dest.pub.term_destination = TermDestination;
  dest.out = out;
  cinfo.dest = &dest.pub;

  cinfo.image_width = static_cast<JDIMENSION>(p.width);
  cinfo.image_height = static_cast<JDIMENSION>(p.height);
  cinfo.input_components = p.channels;
  cinfo.in_color_space = p.in_color_space;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, p.jpeg_color_space);
  jpeg_set_quality(&cinfo, p.options.quality, TRUE);
  // jpeg_set_colorspace chose libjpeg's default factors; override the luma-chroma ones.
  if (p.jpeg_color_space == JCS_YCbCr || p.jpeg_color_space == JCS_YCCK) {
    for (int c = 0; c < cinfo.num_components; ++c) {
      const bool full = c == 0 || c == 3;  // Y, and YCCK's K
      cinfo.comp_info[c].h_samp_factor = full ? p.h_samp : 1;
      cinfo.comp_info[c].v_samp_factor = full ? p.v_samp : 1;
    }
  }
  if (p.options.progressive) jpeg_simple_progression(&cinfo);
  cinfo.optimize_coding = p.options.optimize_huffman && !p.options.arithmetic ? TRUE : FALSE;
  cinfo.arith_code = p.options.arithmetic ? TRUE : FALSE;
  cinfo.restart_interval = static_cast<unsigned int>(p.options.restart_interval);
  cinfo.restart_in_rows = p.options.restart_rows;

  jpeg_start_compress(&cinfo, TRUE);
  constexpr int kRowsPerCall = 16;
  JSAMPROW rows[kRowsPerCall];
  while (cinfo.next_scanline < cinfo.image_height) {
    const int first = static_cast<int>(cinfo.next_scanline);
    const int count = std::min(kRowsPerCall, p.height - first);
    for (int i = 0; i < count; ++i) {
      // libjpeg's row type is non-const but the compressor only reads input rows.
      rows[i] = const_cast<JSAMPROW>(p.data + (first + i) * p.row_stride);
    }
    jpeg_write_scanlines(&cinfo, rows, static_cast<JDIMENSION>(count));
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

std::pair<int, int> SamplingFactors(Subsampling subsampling) {
  const auto s = static_cast<std::size_t>(subsampling);
  if (s < std::size(detail::kLumaSampling)) return detail::kLumaSampling[s];
  throw EncodeError(std::string("EncodeJpeg: cannot encode subsampling ") + ToString(subsampling));
}

CompressParams Validate(const ConstPixelView& pixels, const EncodeOptions& options) {
  CompressParams p;
  if (pixels.data == nullptr || pixels.width <= 0 || pixels.height <= 0) {
    throw EncodeError("EncodeJpeg: empty input image");
  }
  // JPEG stores dimensions in 16 bits; libjpeg's own limit is JPEG_MAX_DIMENSION.
  if (pixels.width > JPEG_MAX_DIMENSION || pixels.height > JPEG_MAX_DIMENSION) {
    throw EncodeError("EncodeJpeg: image larger than " + std::to_string(JPEG_MAX_DIMENSION) +
                      " pixels on a side");
  }
  if (options.quality < 1 || options.quality > 100) {
    throw EncodeError("EncodeJpeg: quality " + std::to_string(options.quality) + " outside 1..100");
  }
  if (options.restart_interval < 0 || options.restart_interval > 65535 ||
      options.restart_rows < 0 || options.restart_rows > 65535) {
    throw EncodeError("EncodeJpeg: restart interval outside 0..65535");
  }
  if (options.restart_interval != 0 && options.restart_rows != 0) {
    throw EncodeError("EncodeJpeg: set restart_interval or restart_rows, not both");
  }
  p.data = pixels.data;
  p.width = pixels.width;
  p.height = pixels.height;
  p.channels = pixels.channels;
  const std::ptrdiff_t packed = std::ptrdiff_t{pixels.width} * pixels.channels;
  p.row_stride = pixels.row_stride != 0 ? pixels.row_stride : packed;
  if (p.row_stride < packed) throw EncodeError("EncodeJpeg: row_stride shorter than a row");

  const ColorSpace space = options.jpeg_color_space;
  switch (pixels.channels) {
    case 1:
      p.in_color_space = p.jpeg_color_space = JCS_GRAYSCALE;
      break;
    case 3:
      p.in_color_space = JCS_RGB;
      p.jpeg_color_space = static_cast<J_COLOR_SPACE>(space);  // libjpeg_errors.h
      if (space != ColorSpace::kYCbCr && space != ColorSpace::kRgb &&
          space != ColorSpace::kGrayscale) {
        throw EncodeError(std::string("EncodeJpeg: RGB input cannot be written as ") +
                          ToString(space));
      }
      break;
    case 4:
      p.in_color_space = JCS_CMYK;
      p.jpeg_color_space = static_cast<J_COLOR_SPACE>(space);
      if (space != ColorSpace::kCmyk && space != ColorSpace::kYcck) {
        throw EncodeError(std::string("EncodeJpeg: CMYK input cannot be written as ") +
                          ToString(space) + " (use kCmyk or kYcck)");
      }
      break;
    default:
      throw EncodeError("EncodeJpeg: " + std::to_string(pixels.channels) +
                        " channels (want 1, 3 or 4)");
  }
  if (p.jpeg_color_space == JCS_YCbCr || p.jpeg_color_space == JCS_YCCK) {
    std::tie(p.h_samp, p.v_samp) = SamplingFactors(options.subsampling);
  }
#ifndef C_ARITH_CODING_SUPPORTED
  if (options.arithmetic) {
    throw EncodeError("EncodeJpeg: this libjpeg was built without arithmetic encoding");
  }
#endif
  p.options = options;
  return p;
}

}  // namespace

std::vector<std::byte> EncodeJpeg(const ConstPixelView& pixels, const EncodeOptions& options) {
  const CompressParams params = Validate(pixels, options);
  // A first guess of the file size (about 2 bits per sample plus headers) so a typical
  // image needs one or two doublings at most.
  std::vector<std::byte> out(std::size_t{4096} + static_cast<std::size_t>(params.width) *
                                                     static_cast<std::size_t>(params.height) *
                                                     static_cast<std::size_t>(params.channels) / 4);
  ErrorManager err;
  if (!Compress(params, &out, &err)) {
    throw EncodeError(std::string("EncodeJpeg: libjpeg: ") + err.message);
  }
  return out;
}

}  // namespace tilefeed::codecs
