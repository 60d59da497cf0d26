// JPEG decoding over libjpeg-turbo (the transcoder for random access is jpeg_index.cc).
//
// libjpeg's errors longjmp to the setjmp of a small "guarded" function (codecs/
// libjpeg_errors.h); all C++ objects (scratch vectors, strings, exceptions) live in the
// callers, which turn a failed guarded call into a DecodeError after aborting the
// decompressor. Corrupt-data warnings end the decode at once under CorruptDataPolicy::kFail
// (they are also the usual way a hostile file makes libjpeg loop for long), and are
// recorded under kAccept.

#include "tilefeed/codecs/jpeg.h"

#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <string_view>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "codecs/crop_check.h"
#include "codecs/libjpeg_errors.h"
#include "codecs/png.h"
#include "codecs/resize.h"
#include "codecs/row_stream.h"

namespace tilefeed::codecs {
namespace {

using ErrorManager = detail::LibjpegErrors;

// Rows a region decode may run ahead of the resize that reads them: enough that decode
// and resize alternate in runs of rows (their times are summed per run), few enough that
// the ring stays in L1.
constexpr std::size_t kRingAhead = 16;

// The guarded functions. Only trivially destructible locals below this line's callers'
// setjmp (see the file comment). Each returns false when libjpeg jumped out.

// Inputs and outputs of one region decode, plain data so it may cross a longjmp.
struct RegionJob {
  JDIMENSION x;      // in: first scaled column wanted; out: first column decoded
  JDIMENSION width;  // in: columns wanted; out: columns decoded (iMCU-aligned)
  JDIMENSION y;      // first scaled row wanted
};

// The part of a started region that the resize reads, in region pixels: rows
// [first_row, end_row), from column first_column on.
struct ResizeWindow {
  int first_column;
  int first_row;
  int end_row;
};

// Whether jpeg_crop_scanline leaves every component's rows whole. libjpeg-turbo before
// 3.0 (fixed upstream by commit 3a536273; docs/reliability.md) sets a cropped component's
// downsampled_width from its sampling factors alone, so when DCT scaling does part of its
// upsampling and real upsampling the rest (the chroma of 4x2 and 2x4 files at 1/2 or 1/4),
// the colour converter reads memory nothing wrote; a component DCT scaling brings to full
// size is not upsampled (4:2:0 at 1/2 crops safely). Called after jpeg_start_decompress.
bool CropScanlineIsSafe(const jpeg_decompress_struct& cinfo) {
  const int min_size = cinfo.min_DCT_scaled_size;
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& component = cinfo.comp_info[c];
    const int size = component.DCT_scaled_size;
    const bool full_size = component.h_samp_factor * size == cinfo.max_h_samp_factor * min_size &&
                           component.v_samp_factor * size == cinfo.max_v_samp_factor * min_size;
    if (size != min_size && !full_size) return false;
  }
  return true;
}

// Starts the decode of a region: its columns (all of them where cropping columns is not
// safe, see CropScanlineIsSafe), and the rows above it skipped.
bool GuardedStartRegion(jpeg_decompress_struct* cinfo, ErrorManager* errors, RegionJob* job) {
  if (setjmp(errors->jump)) return false;
  jpeg_start_decompress(cinfo);
  if (job->width < cinfo->output_width) {
    if (CropScanlineIsSafe(*cinfo)) {
      jpeg_crop_scanline(cinfo, &job->x, &job->width);
    } else {
      job->x = 0;
      job->width = cinfo->output_width;
    }
  }
  if (job->y > 0) jpeg_skip_scanlines(cinfo, job->y);
  return true;
}

// The region's rows, streamed through the resizer by detail::StreamRows, whose frames
// hold only trivially destructible objects, so libjpeg may longjmp out of
// detail::ReadScanlines.
using detail::ScanlineSource;

bool GuardedStreamRows(jpeg_decompress_struct* cinfo, ErrorManager* errors, ScanlineSource* source,
                       detail::RowStream* job) {
  if (setjmp(errors->jump)) return false;
  detail::StreamRows(job, &detail::ReadScanlines, source);
  // The rows below the last one the resize reads are never decoded.
  if (job->rows_written == job->out_rows) jpeg_abort_decompress(cinfo);
  return true;
}

struct TjDeleter {
  void operator()(void* handle) const noexcept { tjDestroy(handle); }
};

bool IsCmyk(J_COLOR_SPACE space) { return space == JCS_CMYK || space == JCS_YCCK; }

}  // namespace

// The names, in each enum's order; a value past the end is "unknown" or "other".
const char* ToString(ColorSpace space) {
  static constexpr const char* kNames[] = {"unknown", "grayscale", "RGB", "YCbCr", "CMYK", "YCCK"};
  const auto i = static_cast<std::size_t>(space);
  return i < std::size(kNames) ? kNames[i] : kNames[0];
}

const char* ToString(Subsampling subsampling) {
  static constexpr const char* kNames[] = {"4:4:4", "4:2:2", "4:2:0", "4:4:0",
                                           "4:1:1", "4:4:1", "gray",  "other"};
  return kNames[std::min(static_cast<std::size_t>(subsampling), std::size(kNames) - 1)];
}

const char* SniffNonJpeg(std::span<const std::byte> bytes) {
  const std::string_view head(reinterpret_cast<const char*>(bytes.data()),
                              std::min<std::size_t>(bytes.size(), 512));
  auto at = [&](std::size_t offset, std::string_view magic) {
    return head.size() >= offset + magic.size() && head.substr(offset, magic.size()) == magic;
  };
  using namespace std::string_view_literals;
  if (head.empty()) return "empty file";
  if (at(0, "\xFF\xD8"sv)) return nullptr;
  if (HasDamagedPngSignature(bytes)) {
    return "PNG with a damaged signature (its first 8 bytes should be 89 50 4E 47 0D 0A 1A 0A)";
  }
  if (at(0, "\x89PNG"sv)) return "PNG image";
  if (at(0, "GIF87a"sv) || at(0, "GIF89a"sv)) return "GIF image";
  if (at(0, "BM"sv)) return "BMP image";
  if (at(0, "RIFF"sv) && at(8, "WEBP"sv)) return "WebP image";
  if (at(0, "II*\0"sv) || at(0, "MM\0*"sv)) return "TIFF image";
  if (at(4, "ftyp"sv)) return "HEIF/AVIF/MP4 container";
  if (at(0, "\xFF\x0A"sv) || at(0, "\0\0\0\x0CJXL "sv)) return "JPEG XL image";
  if (at(0, "%PDF"sv)) return "PDF document";
  if (at(0, "<!DOCTYPE"sv) || at(0, "<html"sv) || at(0, "<?xml"sv)) return "HTML/XML document";
  const bool text = std::all_of(head.begin(), head.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c != 0x7F);
  });
  if (text) return "text, not an image";
  return "unknown data, not a JPEG (no SOI marker)";
}

int ChooseScaleEighths(int crop_width, int crop_height, int out_width, int out_height,
                       DecodeScaling scaling) {
  // The crop scaled by n/8 must still cover the output on both sides, so the final
  // resize only ever shrinks (or keeps) the decoded pixels.
  auto fits = [&](int n) {
    return std::int64_t{crop_width} * n >= std::int64_t{out_width} * 8 &&
           std::int64_t{crop_height} * n >= std::int64_t{out_height} * 8;
  };
  // kFast leaves out 5/8, 6/8 and 7/8: libjpeg-turbo 2.1 has no SIMD IDCT for them (nor
  // for the 10x10 to 14x14 chroma IDCTs it uses there), and on 4:2:0 photos they cost 1.2-2.6x
  // a full-size decode per source pixel (coefficient store and JPEG files alike; bench/
  // RESULTS.md), so the smallest scale among 1/8, 1/4, 3/8, 1/2 and full is the fastest.
  for (int n : {1, 2, 3, 4}) {
    if (fits(n) && (n != 3 || scaling == DecodeScaling::kFast)) return n;
  }
  return 8;
}

ScaledRegion CropRegion(const Rect& crop, int n, std::int64_t margin_x, std::int64_t margin_y,
                        std::int64_t scaled_width, std::int64_t scaled_height) {
  return {std::max<std::int64_t>(std::int64_t{crop.x} * n / 8 - margin_x, 0),
          std::max<std::int64_t>(std::int64_t{crop.y} * n / 8 - margin_y, 0),
          std::min((std::int64_t{crop.x + crop.width} * n + 7) / 8 + margin_x, scaled_width),
          std::min((std::int64_t{crop.y + crop.height} * n + 7) / 8 + margin_y, scaled_height)};
}

struct JpegDecoder::Impl {
  JpegOptions options;
  jpeg_decompress_struct cinfo{};
  ErrorManager errors{};
  detail::LibjpegProgress progress{};
  std::unique_ptr<void, TjDeleter> turbo;
  detail::RowRing ring;  // the region decode's rows; DecodeFull's scratch
  Resizer resizer;

  explicit Impl(const JpegOptions& opts) : options(opts) {
    cinfo.err = detail::InstallErrorHandlers(errors);
    if (!detail::GuardedCreate(&cinfo, &errors)) {
      throw std::runtime_error(std::string("libjpeg: cannot create a decompressor: ") +
                               errors.message);
    }
    cinfo.progress = detail::InstallScanLimit(progress, errors, options.max_scans);
  }
  ~Impl() { jpeg_destroy_decompress(&cinfo); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void ResetErrors() { errors.Reset(options.corrupt_data == CorruptDataPolicy::kFail); }

  // Turns the failure recorded by a guarded call into a DecodeError, after putting the
  // decompressor back in its idle state so that the next image can use it.
  [[noreturn]] void Fail(const char* stage) {
    jpeg_abort_decompress(&cinfo);
    throw detail::FailureOf(errors, "JPEG", stage);
  }

  ImageInfo ReadHeader(std::span<const std::byte> jpeg) {
    if (const char* what = SniffNonJpeg(jpeg)) {
      throw DecodeError(DecodeErrorKind::kNotJpeg, std::string("not a JPEG: ") + what);
    }
    ResetErrors();
    if (!detail::GuardedReadHeader(&cinfo, &errors, jpeg)) Fail("header");
    ImageInfo info;
    info.width = static_cast<int>(cinfo.image_width);
    info.height = static_cast<int>(cinfo.image_height);
    info.components = cinfo.num_components;
    info.color_space = detail::ColorSpaceOf(cinfo.jpeg_color_space);
    int h[3] = {}, v[3] = {};
    for (int c = 0; c < std::min(cinfo.num_components, 3); ++c) {
      h[c] = cinfo.comp_info[c].h_samp_factor;
      v[c] = cinfo.comp_info[c].v_samp_factor;
    }
    info.subsampling = detail::SubsamplingOf(cinfo.num_components, h, v);
    info.progressive = cinfo.progressive_mode != 0;
    info.arithmetic = cinfo.arith_code != 0;
    info.restart_interval = static_cast<int>(cinfo.restart_interval);
    info.mcu_width = cinfo.max_h_samp_factor * DCTSIZE;
    info.mcu_height = cinfo.max_v_samp_factor * DCTSIZE;
    const std::int64_t pixels = std::int64_t{info.width} * info.height;
    if (pixels > options.max_pixels) {
      jpeg_abort_decompress(&cinfo);
      throw detail::TooLarge(info.width, info.height, options.max_pixels);
    }
    return info;
  }

  // Decodes plan.crop of the image whose header ReadHeader has just read.
  DecodeReport DecodeRegion(const ImageInfo& info, const CropPlan& plan, const PixelView& out) {
    const Rect& crop = plan.crop;
    if (!detail::PlanFits(plan, info.width, info.height, out)) {
      jpeg_abort_decompress(&cinfo);
      throw detail::CropDoesNotFit(crop, info.width, info.height, "image");
    }
    const int n = SetScaledOutput(plan, out);

    // The crop in scaled pixels, widened to whole pixels and then by one chroma sample on
    // every side: libjpeg's fancy (triangle) chroma upsampling treats the edges of a
    // cropped or skipped-to region as image edges, so without the margin the crop's
    // border pixels of subsampled files would differ from a full decode. With it they are
    // bit-identical (jpeg_test checks), at the cost of a few rows and columns.
    const ScaledRegion region =
        CropRegion(crop, n, cinfo.max_h_samp_factor, cinfo.max_v_samp_factor,
                   static_cast<std::int64_t>(cinfo.output_width),
                   static_cast<std::int64_t>(cinfo.output_height));

    // The region's columns, then the rows above it skipped; jpeg_crop_scanline widens the
    // columns to whole iMCUs.
    RegionJob job{static_cast<JDIMENSION>(region.x0),
                  static_cast<JDIMENSION>(region.x1 - region.x0),
                  static_cast<JDIMENSION>(region.y0)};
    if (!GuardedStartRegion(&cinfo, &errors, &job)) Fail("data");

    const auto region_rows = static_cast<std::size_t>(region.y1 - region.y0);
    const ResizeWindow window = StartResize(plan, n, job, region.y0, region_rows, out);
    const detail::RowStream stream = StreamRegion(job, region_rows, window, out);

    DecodeReport report = Report();
    report.resize_seconds = static_cast<double>(stream.resize_ns) * 1e-9;
    report.scale_eighths = n;
    report.decoded = Rect{static_cast<int>(job.x), static_cast<int>(region.y0),
                          static_cast<int>(job.width), static_cast<int>(stream.rows_read)};
    return report;
  }

  // Sets the decompressor's output (colour space, DCT scale, DCT and upsampling methods)
  // for a decode of `plan` into `out`; returns the scale in eighths.
  int SetScaledOutput(const CropPlan& plan, const PixelView& out) {
    int n = PlanScaleEighths(plan, out.width, out.height, options.decode_scaling);
    // 4:1:1 / 4:4:1 chroma is box-upsampled 4x; scaled below 1/2 as well it loses too much
    // colour (under 35 dB against a full decode), so those rare files decode at 1/2 or 8/8.
    if (cinfo.max_h_samp_factor >= 4 || cinfo.max_v_samp_factor >= 4) n = n <= 4 ? 4 : 8;
    cinfo.out_color_space = IsCmyk(cinfo.jpeg_color_space) ? JCS_CMYK : JCS_RGB;
    cinfo.scale_num = static_cast<unsigned>(n);
    cinfo.scale_denom = 8;
    cinfo.dct_method = options.fast_dct ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = options.fast_upsample ? FALSE : TRUE;
    jpeg_calc_output_dimensions(&cinfo);
    return n;
  }

  // Starts the resize of the plan's box, in pixels of the started region (scale n/8; its
  // first row is scaled row `first_row`), into `out`. The resize sees only the pixels the
  // crop touches, so its filter stops at the crop's edges (detail::WindowFor); at 8/8 this
  // is exactly "full decode, crop, resize".
  ResizeWindow StartResize(const CropPlan& plan, int n, const RegionJob& job,
                           std::int64_t first_row, std::size_t region_rows, const PixelView& out) {
    const detail::PlanWindow w = detail::WindowFor(plan, n, job.x, static_cast<double>(first_row),
                                                   job.width, static_cast<double>(region_rows));
    resizer.Start(w.x1 - w.x0, w.y1 - w.y0, w.box, out, plan.flip);
    return ResizeWindow{w.x0, w.y0, w.y1};
  }

  // Streams the started region's rows through the started resize into `out`; returns the
  // stream with its counts. Throws DecodeError when the data ends before the last row the
  // resize reads.
  detail::RowStream StreamRegion(const RegionJob& job, std::size_t region_rows,
                                 const ResizeWindow& window, const PixelView& out) {
    // The decoded rows stream through a small ring into the resize, which runs as soon as
    // the rows an output row needs are there: the region is never whole in memory, and
    // the rows the resize reads are still in cache. Ring rows are as wide as the scaled
    // image (any iMCU widening fits); the vectors only grow, so steady state does not
    // allocate.
    const bool cmyk = IsCmyk(cinfo.jpeg_color_space);
    const int components = cmyk ? 4 : 3;
    const auto row_bytes = static_cast<std::size_t>(cinfo.output_width) * components;
    const auto ring_rows =
        std::min(static_cast<std::size_t>(resizer.MaxRows()) + kRingAhead, region_rows);
    ring.Prepare(row_bytes, ring_rows, resizer.MaxRows());
    ScanlineSource source{&cinfo, cmyk ? static_cast<int>(job.width) : 0,
                          cinfo.saw_Adobe_marker != 0};
    detail::RowStream stream{
        &resizer, ring.rows.data(), ring_rows, static_cast<std::size_t>(window.first_row),
        // The margin rows below the crop matter to no pixel it reads.
        static_cast<std::size_t>(window.end_row), out.height, ring.row_pointers.data(),
        // Ring rows hold column job.x at byte 0; the resize's column 0
        // is window.first_column.
        static_cast<std::size_t>(window.first_column) * 3};
    if (!GuardedStreamRows(&cinfo, &errors, &source, &stream)) Fail("data");
    if (stream.rows_written != out.height) {
      jpeg_abort_decompress(&cinfo);
      throw DecodeError(DecodeErrorKind::kTruncated, "truncated JPEG (data): decoded " +
                                                         std::to_string(stream.rows_read) + " of " +
                                                         std::to_string(window.end_row) + " rows");
    }
    return stream;
  }

  DecodeReport Report() const {
    DecodeReport report;
    if (errors.warned) {
      report.warning = true;
      report.message = errors.message;
    }
    return report;
  }
};

JpegDecoder::JpegDecoder(const JpegOptions& options) : impl_(std::make_unique<Impl>(options)) {}
JpegDecoder::~JpegDecoder() = default;
JpegDecoder::JpegDecoder(JpegDecoder&&) noexcept = default;
JpegDecoder& JpegDecoder::operator=(JpegDecoder&&) noexcept = default;

const JpegOptions& JpegDecoder::options() const { return impl_->options; }

ImageInfo JpegDecoder::ReadInfo(std::span<const std::byte> jpeg) {
  ImageInfo info = impl_->ReadHeader(jpeg);
  jpeg_abort_decompress(&impl_->cinfo);
  return info;
}

DecodeReport JpegDecoder::DecodeInto(std::span<const std::byte> jpeg, const CropPlan& plan,
                                     const PixelView& out) {
  const ImageInfo info = impl_->ReadHeader(jpeg);
  return impl_->DecodeRegion(info, plan, out);
}

DecodeReport JpegDecoder::DecodeInto(std::span<const std::byte> jpeg, const CropPlanner& planner,
                                     const PixelView& out) {
  const ImageInfo info = impl_->ReadHeader(jpeg);
  CropPlan plan;
  try {
    plan = planner(info);
  } catch (...) {
    jpeg_abort_decompress(&impl_->cinfo);
    throw;
  }
  return impl_->DecodeRegion(info, plan, out);
}

void JpegDecoder::EntropyDecode(std::span<const std::byte> jpeg) {
  Impl& s = *impl_;
  s.ReadHeader(jpeg);
  jvirt_barray_ptr* coefficients = nullptr;
  if (!detail::GuardedReadCoefficients(&s.cinfo, &s.errors, &coefficients)) s.Fail("data");
  jpeg_abort_decompress(&s.cinfo);
}

DecodeReport JpegDecoder::DecodeFull(std::span<const std::byte> jpeg, const PixelView& out) {
  Impl& s = *impl_;
  const ImageInfo info = s.ReadHeader(jpeg);
  const bool cmyk = IsCmyk(s.cinfo.jpeg_color_space);
  const bool adobe = s.cinfo.saw_Adobe_marker != 0;
  const bool had_warning = s.errors.warned;
  jpeg_abort_decompress(&s.cinfo);
  if (out.width != info.width || out.height != info.height || out.channels != 3 ||
      out.data == nullptr) {
    throw DecodeError(DecodeErrorKind::kInvalidArgument,
                      "output is " + std::to_string(out.width) + "x" + std::to_string(out.height) +
                          ", image is " + std::to_string(info.width) + "x" +
                          std::to_string(info.height));
  }
  if (!s.turbo) {
    s.turbo.reset(tjInitDecompress());
    if (!s.turbo) throw std::runtime_error(std::string("TurboJPEG: ") + tjGetErrorStr2(nullptr));
  }
  int flags = TJFLAG_NOREALLOC | TJFLAG_LIMITSCANS;
  if (s.options.fast_dct) flags |= TJFLAG_FASTDCT;
  if (s.options.fast_upsample) flags |= TJFLAG_FASTUPSAMPLE;
  if (s.options.corrupt_data == CorruptDataPolicy::kFail) flags |= TJFLAG_STOPONWARNING;

  // TurboJPEG writes packed rows; decode straight into `out` when it is packed RGB,
  // otherwise through scratch (CMYK, planar or padded destinations).
  const bool direct = !cmyk && out.interleaved();
  unsigned char* target = out.data;
  int pitch = static_cast<int>(out.row_stride);
  const int pixel_format = cmyk ? TJPF_CMYK : TJPF_RGB;
  if (!direct) {
    pitch = info.width * tjPixelSize[pixel_format];
    const std::size_t need = static_cast<std::size_t>(pitch) * info.height;
    if (s.ring.scratch.size() < need) s.ring.scratch.resize(need);
    target = s.ring.scratch.data();
  }
  const int rc = tjDecompress2(s.turbo.get(), reinterpret_cast<const unsigned char*>(jpeg.data()),
                               static_cast<unsigned long>(jpeg.size()), target, info.width, pitch,
                               info.height, pixel_format, flags);
  DecodeReport report;
  report.warning = had_warning;
  if (rc != 0) {
    const bool warning = tjGetErrorCode(s.turbo.get()) == TJERR_WARNING;
    const std::string message = tjGetErrorStr2(s.turbo.get());
    if (!warning || s.options.corrupt_data == CorruptDataPolicy::kFail) {
      const bool eof = message.find("Premature end") != std::string::npos;
      throw DecodeError(eof ? DecodeErrorKind::kTruncated : DecodeErrorKind::kCorrupt,
                        std::string(eof ? "truncated" : "corrupt") + " JPEG (data): " + message);
    }
    report.warning = true;
    report.message = message;
  }
  if (!direct) {
    for (int y = 0; y < info.height; ++y) {
      std::uint8_t* row = s.ring.scratch.data() + static_cast<std::size_t>(y) * pitch;
      if (cmyk) detail::CmykRowToRgb(row, info.width, adobe);
    }
    CopyPixels(ConstPixelView{s.ring.scratch.data(), info.width, info.height, 3, pitch}, out);
  }
  report.decoded = Rect{0, 0, info.width, info.height};
  return report;
}

}  // namespace tilefeed::codecs
