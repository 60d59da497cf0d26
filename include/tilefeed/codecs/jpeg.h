#pragma once

// JPEG decoding for training input: a header probe, and crop-before-decode.
//
// The API has two steps, like TurboJPEG's: ReadInfo(bytes) reads the header alone;
// DecodeInto(bytes, plan, out) decodes only what a crop needs and writes the resized
// RGB result into caller memory (a batch slot). DecodeInto decodes the crop's MCU rows
// and columns at the largest DCT scale-down that keeps the crop at least as large as the
// output, never decodes the rows below the crop, and resizes with one antialiased
// bilinear filter (see codecs/resize.h) as the rows come out of the decoder, through a
// ring of a few rows: the decoded region is never whole in memory. Grayscale, CMYK/YCCK
// and progressive files all come out as RGB.
//
// Every failure is a DecodeError carrying the reason; libjpeg never prints, exits or
// leaks. Hostile headers are refused before any allocation (pixel limit) and
// progressive files with too many scans are stopped (scan limit).
//
// Thread safety: a JpegDecoder holds libjpeg and TurboJPEG handles and scratch memory;
// use one per thread. Distinct decoders may run concurrently.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "tilefeed/codecs/image.h"

namespace tilefeed::codecs {

enum class ColorSpace { kUnknown, kGrayscale, kRgb, kYCbCr, kCmyk, kYcck };
enum class Subsampling { k444, k422, k420, k440, k411, k441, kGray, kOther };

const char* ToString(ColorSpace space);
const char* ToString(Subsampling subsampling);

// What the header says, read without decoding any pixel data.
struct ImageInfo {
  int width = 0;
  int height = 0;
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  ColorSpace color_space = ColorSpace::kUnknown;
  Subsampling subsampling = Subsampling::kOther;
  bool progressive = false;
  bool arithmetic = false;   // arithmetic rather than Huffman entropy coding
  int restart_interval = 0;  // MCUs per restart interval; 0 when there are no markers
  int mcu_width = 0;         // MCU size in pixels (8 or 16)
  int mcu_height = 0;
};

// How far a decode may scale inside the IDCT (libjpeg-turbo's scaled IDCT, n/8), where
// the plan allows it (CropPlan::dct_scaling): the smallest allowed n/8 that keeps the crop
// at least the output size on both sides. kExact: 1/8, 1/4 and 1/2 (the loader's default
// pixels; its eval plans do not scale). kFast: 3/8 too, and the loader's eval plans scale,
// so the decode's cost falls with the output size; the pixels move further from
// torchvision's (docs/design.md states how far). 5/8 to 7/8 cost more than a full-size
// decode in libjpeg-turbo 2.1 (no SIMD IDCT), so neither setting uses them.
enum class DecodeScaling { kExact, kFast };

// What to do with libjpeg's corrupt-data warnings (premature end of data, bad Huffman
// code, missing marker): the pixels past the damage are grey or garbage. Harmless
// warnings (extraneous bytes, unknown JFIF version) are always accepted.
enum class CorruptDataPolicy {
  kFail,    // throw DecodeError(kTruncated or kCorrupt)
  kAccept,  // keep the decoded pixels; DecodeReport::warning says what happened
};

struct JpegOptions {
  // Largest width * height accepted, checked from the header before any allocation.
  std::int64_t max_pixels = std::int64_t{1} << 26;  // 64 MP, e.g. 8192 x 8192
  // Largest number of scans in a progressive file (libjpeg-turbo's own tools use 500).
  int max_scans = 100;
  CorruptDataPolicy corrupt_data = CorruptDataPolicy::kFail;
  DecodeScaling decode_scaling = DecodeScaling::kExact;
  // libjpeg's fast integer IDCT instead of the accurate one (PIL's default is accurate).
  bool fast_dct = false;
  // Nearest-neighbour chroma upsampling instead of libjpeg's "fancy" triangle filter.
  bool fast_upsample = false;
};

// One crop-before-decode request: the crop in source pixels, the output written to
// `out` (whose width and height are the output size), and an optional left-right flip.
//
// Two resize contracts share this struct. With `box` left empty, the output shows `crop`
// and the filter stops at the crop's edges: torchvision's crop-then-resize
// (RandomResizedCrop, resized_crop). With `box` set, the output shows that fractional
// source box and the filter reads the crop's pixels around it as far as its support
// reaches, as PIL resizing the whole image does: Resize + CenterCrop (torchvision's eval),
// with `crop` the box widened by the filter's reach (loader/augment.h).
struct CropPlan {
  CropPlan() = default;
  // The crop-then-resize plan (no box), as most callers write it: CropPlan{rect, flip}.
  CropPlan(const Rect& crop_rect, bool flip_output = false)  // NOLINT: implicit by design
      : crop(crop_rect), flip(flip_output) {}

  Rect crop;          // the source pixels the decode covers and the resize may read
  bool flip = false;  // mirror the output left-right
  SourceBox box;      // the fractional box shown, inside `crop`; empty: `crop` itself
  // Whether DecodeInto may decode at a DCT scale-down (JpegOptions::decode_scaling); false
  // decodes at full size, so the pixels are those of a full decode resized (torchvision's).
  bool dct_scaling = true;
};

// The box a plan shows: plan.box, or plan.crop when plan.box is empty.
SourceBox ShownBox(const CropPlan& plan);

// Whether plan.box is empty or lies inside plan.crop.
bool BoxInsideCrop(const CropPlan& plan);

// The DCT scale DecodeInto uses for a plan: 8 when !plan.dct_scaling, else
// ChooseScaleEighths for the shown box's whole-pixel size.
int PlanScaleEighths(const CropPlan& plan, int out_width, int out_height, DecodeScaling scaling);

// What DecodeInto did, for metrics and tests.
struct DecodeReport {
  int scale_eighths = 8;      // the DCT scale used, in eighths (8 = full size)
  Rect decoded;               // the region actually decoded, in scaled pixels
  double resize_seconds = 0;  // time spent in the final resize (DecodeInto only)
  bool warning = false;       // libjpeg warned (accepted per policy); `message` says what
  std::string message;        // empty unless warning; short-string sized in practice
};

// The DCT scale DecodeInto uses: the smallest numerator n (in eighths: 1, 2, 4 or 8, and 3
// under kFast) for which the crop scaled by n/8 is still at least out_width x out_height.
int ChooseScaleEighths(int crop_width, int crop_height, int out_width, int out_height,
                       DecodeScaling scaling);

// The pixels [x0, x1) x [y0, y1) of the image scaled by n/8 (scaled_width x scaled_height)
// that a crop decode needs: the crop in scaled pixels, widened to whole pixels and then by
// margin_x / margin_y (one chroma sample, so that libjpeg's fancy upsampling at the
// region's edges matches a full decode), clipped to the image.
struct ScaledRegion {
  std::int64_t x0, y0, x1, y1;
};
ScaledRegion CropRegion(const Rect& crop, int n, std::int64_t margin_x, std::int64_t margin_y,
                        std::int64_t scaled_width, std::int64_t scaled_height);

class JpegDecoder {
 public:
  explicit JpegDecoder(const JpegOptions& options = {});
  ~JpegDecoder();
  JpegDecoder(JpegDecoder&&) noexcept;
  JpegDecoder& operator=(JpegDecoder&&) noexcept;

  const JpegOptions& options() const;

  // Reads the header. Throws DecodeError (kNotJpeg names the format it found instead).
  ImageInfo ReadInfo(std::span<const std::byte> jpeg);

  // Decodes plan.crop of the image, resized to out.width x out.height, into `out`.
  // REQUIRES: out.channels == 3; the crop lies inside the image and is non-empty
  // (otherwise DecodeError kInvalidArgument).
  DecodeReport DecodeInto(std::span<const std::byte> jpeg, const CropPlan& plan,
                          const PixelView& out);

  // The same, with the plan drawn from the header this call reads (the crop depends on
  // the image size): one header parse instead of ReadInfo's and DecodeInto's two. An
  // exception from `planner` propagates and leaves the decoder ready for the next image.
  using CropPlanner = std::function<CropPlan(const ImageInfo&)>;
  DecodeReport DecodeInto(std::span<const std::byte> jpeg, const CropPlanner& planner,
                          const PixelView& out);

  // Decodes the whole image at full size into `out` with TurboJPEG's one-call decoder
  // (the reference a crop decode is compared against). REQUIRES: out is width x height.
  DecodeReport DecodeFull(std::span<const std::byte> jpeg, const PixelView& out);

  // Entropy-decodes the whole image to DCT coefficients and stops there: no IDCT,
  // upsampling or colour conversion. Its time is the part of a decode that no crop or
  // DCT scaling can skip (codec_bench reports it). Throws DecodeError like DecodeInto.
  void EntropyDecode(std::span<const std::byte> jpeg);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Names the format of bytes that are not a JPEG ("PNG image", "empty file", "text", ...),
// or returns nullptr when they start like a JPEG.
const char* SniffNonJpeg(std::span<const std::byte> bytes);

}  // namespace tilefeed::codecs
