#include "tilefeed/codecs/jpeg.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codecs/resize.h"
#include "tests/support/jpeg_maker.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::codecs {
namespace {

using testing::DecodeScaledWithLibjpeg;
using testing::MakeJpeg;
using testing::MakeJpegSampled;
using testing::Psnr;
using testing::ScaledImage;

using Encoding = testing::NamedEncoding;

std::vector<Encoding> AllEncodings() { return testing::CommonEncodings(92); }

std::vector<std::uint8_t> FullDecode(JpegDecoder& decoder, std::span<const std::byte> jpeg,
                                     const ImageInfo& info) {
  std::vector<std::uint8_t> pixels(std::size_t(info.width) * info.height * 3);
  decoder.DecodeFull(jpeg, PixelView::Interleaved(pixels.data(), info.width, info.height));
  return pixels;
}

// "Full decode, crop, resize" (torchvision's order: the resize sees only the crop): the
// result crop-before-decode must reproduce.
std::vector<std::uint8_t> Reference(const std::vector<std::uint8_t>& full, const ImageInfo& info,
                                    const CropPlan& plan, int out_w, int out_h) {
  std::vector<std::uint8_t> out(std::size_t(out_w) * out_h * 3);
  Resizer resizer;
  const Rect& c = plan.crop;
  const ConstPixelView cropped{full.data() + (std::size_t(c.y) * info.width + c.x) * 3, c.width,
                               c.height, 3, static_cast<std::ptrdiff_t>(info.width) * 3};
  resizer.Resize(cropped, SourceBox{0, 0, double(c.width), double(c.height)},
                 PixelView::Interleaved(out.data(), out_w, out_h), plan.flip);
  return out;
}

// The crop decode's result computed another way: the image decoded whole by libjpeg at
// the same scale, then the crop's window of it resized exactly as DecodeInto resizes
// its region (the box in scaled pixels, the window its whole pixels).
std::vector<std::uint8_t> ScaledReference(const ScaledImage& scaled, const CropPlan& plan, int n,
                                          int out_w, int out_h) {
  const double s = n / 8.0;
  const Rect& c = plan.crop;
  const double bx0 = c.x * s;
  const double by0 = c.y * s;
  const double bx1 = std::min((c.x + c.width) * s, double(scaled.width));
  const double by1 = std::min((c.y + c.height) * s, double(scaled.height));
  const int ix0 = static_cast<int>(bx0);
  const int iy0 = static_cast<int>(by0);
  const int ix1 = static_cast<int>(std::ceil(bx1));
  const int iy1 = static_cast<int>(std::ceil(by1));
  const ConstPixelView window{scaled.pixels.data() + (std::size_t(iy0) * scaled.width + ix0) * 3,
                              ix1 - ix0, iy1 - iy0, 3,
                              static_cast<std::ptrdiff_t>(scaled.width) * 3};
  std::vector<std::uint8_t> out(std::size_t(out_w) * out_h * 3);
  Resizer resizer;
  resizer.Resize(window, SourceBox{bx0 - ix0, by0 - iy0, bx1 - ix0, by1 - iy0},
                 PixelView::Interleaved(out.data(), out_w, out_h), plan.flip);
  return out;
}

// Allocates blocks of many sizes, fills them with `pattern` and frees them, so that the
// memory the next decode allocates holds other bytes each time: a decode that reads
// memory it never wrote then gives other pixels from call to call.
void DirtyTheHeap(std::uint8_t pattern) {
  std::vector<volatile std::uint8_t*> blocks;
  for (std::size_t size = 24; size <= (std::size_t{1} << 17); size = size * 3 / 2) {
    auto* block = static_cast<volatile std::uint8_t*>(std::malloc(size));
    if (block == nullptr) continue;
    for (std::size_t i = 0; i < size; ++i) block[i] = static_cast<std::uint8_t>(pattern + i);
    blocks.push_back(block);
  }
  for (volatile std::uint8_t* block : blocks) std::free(const_cast<std::uint8_t*>(block));
}

// Random crops, plus crops that touch each edge and each corner.
std::vector<Rect> CropsFor(int w, int h, std::mt19937& rng) {
  std::vector<Rect> crops = {
      {0, 0, w, h},
      {0, 0, std::max(1, w / 3), std::max(1, h / 3)},
      {w - std::max(1, w / 3), h - std::max(1, h / 3), std::max(1, w / 3), std::max(1, h / 3)},
      {0, h / 4, std::max(1, w / 2), std::max(1, h / 2)},
      {w / 2, 0, w - w / 2, std::max(1, h / 5)},
      {w - 1, h - 1, 1, 1}};
  for (int i = 0; i < 12; ++i) {
    const int cw = std::uniform_int_distribution<int>(1, w)(rng);
    const int ch = std::uniform_int_distribution<int>(1, h)(rng);
    crops.push_back({std::uniform_int_distribution<int>(0, w - cw)(rng),
                     std::uniform_int_distribution<int>(0, h - ch)(rng), cw, ch});
  }
  return crops;
}

TEST(JpegProbe, ReadsHeaderFields) {
  for (const Encoding& e : AllEncodings()) {
    SCOPED_TRACE(e.name);
    const auto jpeg = MakeJpeg(333, 257, e.options, 7, e.channels);
    JpegDecoder decoder;
    const ImageInfo info = decoder.ReadInfo(jpeg);
    EXPECT_EQ(info.width, 333);
    EXPECT_EQ(info.height, 257);
    EXPECT_EQ(info.components, e.channels);
    EXPECT_EQ(info.progressive, e.options.progressive);
    EXPECT_EQ(info.arithmetic, e.options.arithmetic);
    if (e.channels == 1) {
      EXPECT_EQ(info.color_space, ColorSpace::kGrayscale);
      EXPECT_EQ(info.subsampling, Subsampling::kGray);
    } else if (e.channels == 3 && e.options.jpeg_color_space == ColorSpace::kYCbCr) {
      EXPECT_EQ(info.color_space, ColorSpace::kYCbCr);
      EXPECT_EQ(info.subsampling, e.options.subsampling);
    } else {
      EXPECT_EQ(info.color_space, e.options.jpeg_color_space);
    }
    EXPECT_EQ(info.restart_interval > 0,
              e.options.restart_interval > 0 || e.options.restart_rows > 0);
  }
}

TEST(JpegProbe, SubsamplingGivesMcuSize) {
  EncodeOptions o;
  o.subsampling = Subsampling::k420;
  JpegDecoder decoder;
  ImageInfo info = decoder.ReadInfo(MakeJpeg(40, 30, o));
  EXPECT_EQ(info.mcu_width, 16);
  EXPECT_EQ(info.mcu_height, 16);
  o.subsampling = Subsampling::k422;
  info = decoder.ReadInfo(MakeJpeg(40, 30, o));
  EXPECT_EQ(info.mcu_width, 16);
  EXPECT_EQ(info.mcu_height, 8);
}

TEST(JpegScale, ChoosesLargestScaleDownKeepingTheCropAtLeastTheOutput) {
  EXPECT_EQ(ChooseScaleEighths(1000, 1000, 224, 224, DecodeScaling::kExact), 2);
  EXPECT_EQ(ChooseScaleEighths(1792, 1792, 224, 224, DecodeScaling::kExact), 1);
  EXPECT_EQ(ChooseScaleEighths(448, 448, 224, 224, DecodeScaling::kExact), 4);
  EXPECT_EQ(ChooseScaleEighths(447, 448, 224, 224, DecodeScaling::kExact), 8);
  EXPECT_EQ(ChooseScaleEighths(896, 896, 224, 224, DecodeScaling::kExact), 2);
  EXPECT_EQ(ChooseScaleEighths(895, 896, 224, 224, DecodeScaling::kExact), 4);
  EXPECT_EQ(ChooseScaleEighths(100, 100, 224, 224, DecodeScaling::kExact), 8);
  // kFast adds 3/8 and never uses 5/8 to 7/8 (slower than a full-size decode).
  EXPECT_EQ(ChooseScaleEighths(300, 300, 224, 224, DecodeScaling::kFast), 8);
  EXPECT_EQ(ChooseScaleEighths(256, 256, 224, 224, DecodeScaling::kFast), 8);
  EXPECT_EQ(ChooseScaleEighths(598, 598, 224, 224, DecodeScaling::kFast), 3);
  EXPECT_EQ(ChooseScaleEighths(598, 598, 224, 224, DecodeScaling::kExact), 4);
  EXPECT_EQ(ChooseScaleEighths(597, 598, 224, 224, DecodeScaling::kFast), 4);
  EXPECT_EQ(ChooseScaleEighths(1000, 1000, 224, 224, DecodeScaling::kFast), 2);
  // Both sides must fit: a wide crop is limited by its height.
  EXPECT_EQ(ChooseScaleEighths(2000, 450, 224, 224, DecodeScaling::kExact), 4);
}

// The heart of the codec: for every encoding, many crops and several output sizes,
// crop-before-decode matches full decode -> crop -> resize.
TEST(JpegCrop, MatchesFullDecodeCropResize) {
  std::mt19937 rng(42);
  for (const DecodeScaling scaling : {DecodeScaling::kExact, DecodeScaling::kFast}) {
    JpegOptions options;
    options.decode_scaling = scaling;
    JpegDecoder decoder(options);
    for (const Encoding& e : AllEncodings()) {
      for (auto [w, h] : {std::pair{333, 257}, std::pair{640, 480}, std::pair{97, 601}}) {
        const auto jpeg = MakeJpeg(w, h, e.options, w + h, e.channels);
        const ImageInfo info = decoder.ReadInfo(jpeg);
        const auto full = FullDecode(decoder, jpeg, info);
        for (const Rect& crop : CropsFor(w, h, rng)) {
          for (auto [ow, oh] : {std::pair{224, 224}, std::pair{64, 48}}) {
            SCOPED_TRACE(std::string(e.name) + " " + std::to_string(w) + "x" + std::to_string(h) +
                         " crop " + std::to_string(crop.x) + "," + std::to_string(crop.y) + " " +
                         std::to_string(crop.width) + "x" + std::to_string(crop.height) + " -> " +
                         std::to_string(ow) + "x" + std::to_string(oh));
            const CropPlan plan{crop, (crop.x & 1) != 0};
            std::vector<std::uint8_t> out(std::size_t(ow) * oh * 3);
            const DecodeReport report =
                decoder.DecodeInto(jpeg, plan, PixelView::Interleaved(out.data(), ow, oh));
            EXPECT_FALSE(report.warning) << report.message;
            const auto ref = Reference(full, info, plan, ow, oh);
            const double psnr = Psnr(out.data(), ref.data(), out.size());
            EXPECT_GE(psnr, 35.0) << "scale " << report.scale_eighths << "/8";
            // At full scale the crop decode yields the very same pixels.
            if (report.scale_eighths == 8) {
              EXPECT_TRUE(out == ref) << "psnr " << psnr;
            }
          }
        }
      }
    }
  }
}

// Crops of 4x2 (4:1:0) and 2x4 files at 1/2 scale read memory libjpeg never
// wrote (libjpeg-turbo 2.1.5's jpeg_crop_scanline sizes such components' rows from their
// sampling factors alone, while part of their upsampling is done by DCT scaling), so up
// to a third of a crop was garbage and the same crop gave other pixels on every run.
// Twenty runs, fresh decoders and one reused, each after the heap was dirtied
// differently, must all give the pixels of a whole decode at that scale.
TEST(JpegCrop, Sampling4x2And2x4CropsAreTheFullDecodesPixelsRunAfterRun) {
  for (auto [h_samp, v_samp] : {std::pair{4, 2}, std::pair{2, 4}}) {
    SCOPED_TRACE(std::to_string(h_samp) + "x" + std::to_string(v_samp));
    const auto jpeg = MakeJpegSampled(400, 300, h_samp, v_samp, 11);
    // Off both left and right edges, so the decode crops columns; 180x140 -> 64x48
    // decodes at 1/2 (files with a 4x sampling factor never go below 1/2).
    const CropPlan plan{Rect{77, 51, 180, 140}, false};
    constexpr int kOutW = 64, kOutH = 48;
    JpegDecoder reused;
    std::vector<std::uint8_t> first;
    for (int run = 0; run < 20; ++run) {
      SCOPED_TRACE("run " + std::to_string(run));
      DirtyTheHeap(static_cast<std::uint8_t>(run * 37 + 1));
      JpegDecoder fresh;
      JpegDecoder& decoder = run % 2 == 0 ? fresh : reused;
      std::vector<std::uint8_t> out(std::size_t(kOutW) * kOutH * 3);
      const DecodeReport report =
          decoder.DecodeInto(jpeg, plan, PixelView::Interleaved(out.data(), kOutW, kOutH));
      ASSERT_EQ(report.scale_eighths, 4);
      if (run == 0) {
        first = out;
        const ScaledImage scaled = DecodeScaledWithLibjpeg(jpeg, report.scale_eighths);
        const auto ref = ScaledReference(scaled, plan, report.scale_eighths, kOutW, kOutH);
        EXPECT_TRUE(out == ref) << "psnr against the whole decode "
                                << Psnr(out.data(), ref.data(), out.size());
      }
      EXPECT_TRUE(out == first) << "psnr against run 0 "
                                << Psnr(out.data(), first.data(), out.size());
    }
  }
}

// Every sampling the codec tests cover, plus 4x2, 2x4 and 1x4 luma sampling: each crop
// decodes to the same bytes with a reused decoder, a fresh one and the reused one again,
// the heap dirtied differently before each; and, where libjpeg alone can make the
// reference (not CMYK), to the pixels of a whole decode at the same scale.
TEST(JpegCrop, EverySamplingDecodesTheSameWithFreshAndReusedDecoders) {
  struct Case {
    std::string name;
    std::vector<std::byte> jpeg;
    bool cmyk;
  };
  std::vector<Case> cases;
  for (const Encoding& e : AllEncodings()) {
    cases.push_back({e.name, MakeJpeg(203, 157, e.options, 9, e.channels), e.channels == 4});
  }
  for (auto [h, v] : {std::pair{4, 2}, std::pair{2, 4}, std::pair{1, 4}}) {
    cases.push_back({std::to_string(h) + "x" + std::to_string(v) + "-sampled",
                     MakeJpegSampled(203, 157, h, v, 9), false});
  }
  std::mt19937 rng(27);
  JpegDecoder reused;
  for (const Case& c : cases) {
    const ImageInfo info = reused.ReadInfo(c.jpeg);
    for (const Rect& crop : CropsFor(info.width, info.height, rng)) {
      for (auto [ow, oh] : {std::pair{40, 30}, std::pair{16, 16}}) {
        SCOPED_TRACE(c.name + " crop " + std::to_string(crop.x) + "," + std::to_string(crop.y) +
                     " " + std::to_string(crop.width) + "x" + std::to_string(crop.height) + " -> " +
                     std::to_string(ow) + "x" + std::to_string(oh));
        const CropPlan plan{crop, (crop.y & 1) != 0};
        const std::size_t bytes = std::size_t(ow) * oh * 3;
        std::vector<std::uint8_t> a(bytes), b(bytes), again(bytes);
        DirtyTheHeap(0x11);
        const DecodeReport report =
            reused.DecodeInto(c.jpeg, plan, PixelView::Interleaved(a.data(), ow, oh));
        DirtyTheHeap(0xA5);
        JpegDecoder fresh;
        fresh.DecodeInto(c.jpeg, plan, PixelView::Interleaved(b.data(), ow, oh));
        DirtyTheHeap(0x5A);
        reused.DecodeInto(c.jpeg, plan, PixelView::Interleaved(again.data(), ow, oh));
        EXPECT_TRUE(a == b) << "fresh decoder differs, psnr " << Psnr(a.data(), b.data(), bytes);
        EXPECT_TRUE(a == again) << "second decode differs, psnr "
                                << Psnr(a.data(), again.data(), bytes);
        if (c.cmyk) continue;
        const ScaledImage scaled = DecodeScaledWithLibjpeg(c.jpeg, report.scale_eighths);
        const auto ref = ScaledReference(scaled, plan, report.scale_eighths, ow, oh);
        EXPECT_TRUE(a == ref) << "scale " << report.scale_eighths
                              << "/8, psnr against the whole decode "
                              << Psnr(a.data(), ref.data(), bytes);
      }
    }
  }
}

TEST(JpegCrop, UsesDctScalingAndDecodesOnlyTheCropRows) {
  EncodeOptions o;
  const auto jpeg = MakeJpeg(1600, 1200, o);
  JpegDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{224} * 224 * 3);
  const DecodeReport report = decoder.DecodeInto(jpeg, CropPlan{{400, 300, 900, 900}},
                                                 PixelView::Interleaved(out.data(), 224, 224));
  const DecodeReport middle = decoder.DecodeInto(jpeg, CropPlan{{400, 100, 900, 900}},
                                                 PixelView::Interleaved(out.data(), 224, 224));
  // Rows 25 .. 250 at 1/4, plus one chroma row (2 rows at 4:2:0) of margin above for the
  // chroma upsampler; the margin below is never read: nothing below row 250.
  EXPECT_EQ(middle.decoded.y, 23);
  EXPECT_EQ(middle.decoded.height, 227);
  EXPECT_EQ(report.scale_eighths, 2);  // 900 * 2/8 = 225 >= 224
  // Scaled by 1/4 the crop is rows 75 .. 300 (the bottom edge); with one chroma row of
  // margin above for the chroma upsampler, rows 73 .. 300 are decoded.
  EXPECT_EQ(report.decoded.y, 73);
  EXPECT_EQ(report.decoded.height, 227);
  EXPECT_LE(report.decoded.x, 100);
  EXPECT_GE(report.decoded.x + report.decoded.width, 325);
  EXPECT_LT(report.decoded.width, 400);  // columns outside the crop's iMCUs are skipped
}

TEST(JpegCrop, DataBelowTheCropIsNeverRead) {
  // Cut a baseline file in half: a crop in the top third still decodes cleanly, even
  // under the strict policy, because decoding stops at the crop's last row.
  EncodeOptions o;
  auto jpeg = MakeJpeg(512, 512, o, 3);
  jpeg.resize(jpeg.size() / 2);
  JpegDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{64} * 64 * 3);
  const DecodeReport report = decoder.DecodeInto(jpeg, CropPlan{{100, 0, 200, 150}},
                                                 PixelView::Interleaved(out.data(), 64, 64));
  EXPECT_FALSE(report.warning);
  // The whole image, by contrast, is truncated.
  try {
    decoder.DecodeInto(jpeg, CropPlan{{0, 0, 512, 512}},
                       PixelView::Interleaved(out.data(), 64, 64));
    FAIL() << "expected a truncation error";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.kind(), DecodeErrorKind::kTruncated) << e.what();
  }
}

TEST(JpegCrop, FlipMirrorsExactly) {
  const auto jpeg = MakeJpeg(300, 200, EncodeOptions{});
  JpegDecoder decoder;
  std::vector<std::uint8_t> a(std::size_t{50} * 40 * 3), b(std::size_t{50} * 40 * 3);
  const Rect crop{20, 10, 150, 120};
  decoder.DecodeInto(jpeg, {crop, false}, PixelView::Interleaved(a.data(), 50, 40));
  decoder.DecodeInto(jpeg, {crop, true}, PixelView::Interleaved(b.data(), 50, 40));
  for (int y = 0; y < 40; ++y) {
    for (int x = 0; x < 50; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(a[(y * 50 + x) * 3 + c], b[(y * 50 + 49 - x) * 3 + c]);
      }
    }
  }
}

TEST(JpegCrop, PlannerSeesTheHeaderAndGivesTheSamePixelsAsTwoSteps) {
  const auto jpeg = MakeJpeg(301, 203, EncodeOptions{}, 5);
  JpegDecoder decoder;
  std::vector<std::uint8_t> two_steps(std::size_t{64} * 48 * 3), planned(std::size_t{64} * 48 * 3);
  const ImageInfo info = decoder.ReadInfo(jpeg);
  const CropPlan plan{Rect{info.width / 4, info.height / 3, info.width / 2, info.height / 2}, true};
  const DecodeReport expected =
      decoder.DecodeInto(jpeg, plan, PixelView::Interleaved(two_steps.data(), 64, 48));
  int calls = 0;
  const DecodeReport report = decoder.DecodeInto(
      jpeg,
      [&](const ImageInfo& seen) {
        ++calls;
        EXPECT_EQ(seen.width, 301);
        EXPECT_EQ(seen.height, 203);
        return CropPlan{Rect{seen.width / 4, seen.height / 3, seen.width / 2, seen.height / 2},
                        true};
      },
      PixelView::Interleaved(planned.data(), 64, 48));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(report.scale_eighths, expected.scale_eighths);
  EXPECT_EQ(report.decoded, expected.decoded);
  EXPECT_EQ(planned, two_steps);
}

TEST(JpegCrop, PlannerExceptionLeavesTheDecoderUsable) {
  const auto jpeg = MakeJpeg(120, 90, EncodeOptions{}, 6);
  JpegDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{32} * 32 * 3), again(std::size_t{32} * 32 * 3);
  const PixelView view = PixelView::Interleaved(out.data(), 32, 32);
  EXPECT_THROW(
      decoder.DecodeInto(
          jpeg, [](const ImageInfo&) -> CropPlan { throw std::runtime_error("no plan"); }, view),
      std::runtime_error);
  const CropPlan plan{Rect{10, 10, 80, 60}, false};
  decoder.DecodeInto(jpeg, plan, view);
  JpegDecoder fresh;
  fresh.DecodeInto(jpeg, plan, PixelView::Interleaved(again.data(), 32, 32));
  EXPECT_EQ(out, again);
}

TEST(JpegCrop, WritesThroughStridesAndNothingElse) {
  const auto jpeg = MakeJpeg(300, 200, EncodeOptions{});
  JpegDecoder decoder;
  const int w = 32, h = 24, stride = 200;
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(w) * h * 3);
  std::vector<std::uint8_t> padded(static_cast<std::size_t>(stride) * (h + 2), 0xAB);
  std::vector<std::uint8_t> planar(static_cast<std::size_t>(w) * h * 3);
  const CropPlan plan{{10, 10, 200, 150}};
  decoder.DecodeInto(jpeg, plan, PixelView::Interleaved(packed.data(), w, h));
  decoder.DecodeInto(jpeg, plan, PixelView::Interleaved(padded.data() + stride, w, h, 3, stride));
  decoder.DecodeInto(jpeg, plan, PixelView::Planar(planar.data(), w, h));
  for (int y = 0; y < h + 2; ++y) {
    for (int x = 0; x < stride; ++x) {
      const bool inside = y >= 1 && y <= h && x < w * 3;
      if (inside) {
        ASSERT_EQ(padded[y * stride + x], packed[(y - 1) * w * 3 + x]);
      } else {
        ASSERT_EQ(padded[y * stride + x], 0xAB) << "wrote outside the view at " << y << "," << x;
      }
    }
  }
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < w * h; ++i) ASSERT_EQ(planar[c * w * h + i], packed[i * 3 + c]);
  }
}

TEST(JpegCrop, RejectsCropsOutsideTheImage) {
  const auto jpeg = MakeJpeg(100, 80, EncodeOptions{});
  JpegDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{16} * 16 * 3);
  const auto view = PixelView::Interleaved(out.data(), 16, 16);
  for (const Rect& bad : {Rect{0, 0, 0, 10}, Rect{-1, 0, 10, 10}, Rect{95, 0, 10, 10},
                          Rect{0, 75, 10, 10}, Rect{0, 0, 101, 80}}) {
    try {
      decoder.DecodeInto(jpeg, {bad}, view);
      FAIL() << "accepted a bad crop";
    } catch (const DecodeError& e) {
      EXPECT_EQ(e.kind(), DecodeErrorKind::kInvalidArgument);
    }
  }
  // The decoder is still usable afterwards.
  EXPECT_NO_THROW(decoder.DecodeInto(jpeg, {Rect{0, 0, 100, 80}}, view));
}

// --- Broken input. Each case must throw a DecodeError whose kind and text say what
// happened; none may crash (these also run under ASan+UBSan in CI).

DecodeError DecodeExpectingError(JpegDecoder& decoder, std::span<const std::byte> bytes) {
  std::vector<std::uint8_t> out(std::size_t{32} * 32 * 3);
  try {
    const ImageInfo info = decoder.ReadInfo(bytes);
    decoder.DecodeInto(bytes, {Rect{0, 0, info.width, info.height}},
                       PixelView::Interleaved(out.data(), 32, 32));
  } catch (const DecodeError& e) {
    return e;
  }
  ADD_FAILURE() << "decoded without error";
  return DecodeError(DecodeErrorKind::kCorrupt, "none");
}

TEST(JpegBadInput, OtherFormatsAreNamed) {
  JpegDecoder decoder;
  struct Case {
    std::vector<std::byte> bytes;
    const char* says;
  };
  std::vector<std::byte> garbage(1000);
  std::mt19937 rng(1);
  for (auto& b : garbage) b = std::byte(rng() | 1);
  garbage[0] = std::byte{0x01};
  const std::vector<Case> cases = {{{}, "empty"},
                                   {testing::MakePngBytes(), "PNG"},
                                   {testing::MakeGifBytes(), "GIF"},
                                   {testing::MakeBmpBytes(), "BMP"},
                                   {testing::MakeTextBytes(), "text"},
                                   {garbage, "not a JPEG"}};
  for (const Case& c : cases) {
    const DecodeError e = DecodeExpectingError(decoder, c.bytes);
    EXPECT_EQ(e.kind(), DecodeErrorKind::kNotJpeg) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
  }
}

TEST(JpegBadInput, TruncationAtAnyOffsetIsAnError) {
  for (const bool progressive : {false, true}) {
    EncodeOptions o;
    o.progressive = progressive;
    const auto jpeg = MakeJpeg(200, 150, o, 5);
    JpegDecoder decoder;
    for (std::size_t cut = 0; cut + 2 < jpeg.size(); cut += 1 + cut / 16) {
      SCOPED_TRACE(cut);
      const DecodeError e = DecodeExpectingError(decoder, std::span(jpeg).first(cut));
      EXPECT_TRUE(e.kind() == DecodeErrorKind::kTruncated ||
                  e.kind() == DecodeErrorKind::kCorrupt || e.kind() == DecodeErrorKind::kNotJpeg)
          << e.what();
    }
  }
}

TEST(JpegBadInput, TruncatedFileIsAcceptedWithWarningWhenAskedTo) {
  auto jpeg = MakeJpeg(200, 150, EncodeOptions{}, 5);
  jpeg.resize(jpeg.size() * 2 / 3);
  JpegOptions lenient;
  lenient.corrupt_data = CorruptDataPolicy::kAccept;
  JpegDecoder decoder(lenient);
  std::vector<std::uint8_t> out(std::size_t{32} * 32 * 3);
  const DecodeReport report =
      decoder.DecodeInto(jpeg, {Rect{0, 0, 200, 150}}, PixelView::Interleaved(out.data(), 32, 32));
  EXPECT_TRUE(report.warning);
  EXPECT_NE(report.message.find("Premature end"), std::string::npos) << report.message;
}

// Offset of the first byte after the SOS header, where entropy-coded data starts.
std::size_t ScanDataOffset(const std::vector<std::byte>& jpeg) {
  for (std::size_t i = 2; i + 3 < jpeg.size(); ++i) {
    if (jpeg[i] == std::byte{0xFF} && jpeg[i + 1] == std::byte{0xDA}) {
      const std::size_t len = (std::size_t(jpeg[i + 2]) << 8) | std::size_t(jpeg[i + 3]);
      return i + 2 + len;
    }
  }
  return 0;
}

TEST(JpegBadInput, CorruptEntropyDataNeverCrashes) {
  const auto original = MakeJpeg(256, 192, EncodeOptions{}, 9);
  const std::size_t start = ScanDataOffset(original);
  ASSERT_GT(start, 0u);
  JpegOptions lenient;
  lenient.corrupt_data = CorruptDataPolicy::kAccept;
  JpegDecoder strict, tolerant(lenient);
  std::mt19937 rng(3);
  std::vector<std::uint8_t> out(std::size_t{64} * 64 * 3);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    auto jpeg = original;
    for (int k = 0; k < 1 + trial % 8; ++k) {
      const std::size_t at = start + rng() % (jpeg.size() - start - 2);
      jpeg[at] = std::byte(rng());
    }
    for (JpegDecoder* d : {&strict, &tolerant}) {
      try {
        d->DecodeInto(jpeg, {Rect{0, 0, 256, 192}}, PixelView::Interleaved(out.data(), 64, 64));
      } catch (const DecodeError& e) {
        ++errors;
        EXPECT_GT(std::strlen(e.what()), 10u);
      }
    }
  }
  EXPECT_GT(errors, 0);  // some corruptions must be caught
}

// Rewrites the SOF0 marker's frame header in place.
void PatchSof(std::vector<std::byte>& jpeg, int precision, int width, int height,
              int marker = 0xC0) {
  for (std::size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == std::byte{0xFF} &&
        (jpeg[i + 1] == std::byte{0xC0} || jpeg[i + 1] == std::byte{0xC2})) {
      jpeg[i + 1] = std::byte(marker);
      jpeg[i + 4] = std::byte(precision);
      jpeg[i + 5] = std::byte(height >> 8);
      jpeg[i + 6] = std::byte(height & 0xFF);
      jpeg[i + 7] = std::byte(width >> 8);
      jpeg[i + 8] = std::byte(width & 0xFF);
      return;
    }
  }
  FAIL() << "no SOF marker";
}

TEST(JpegBadInput, HugeDeclaredSizeIsRefusedBeforeDecoding) {
  auto jpeg = MakeJpeg(64, 64, EncodeOptions{});
  PatchSof(jpeg, 8, 65000, 65000);
  JpegDecoder decoder;
  const DecodeError e = DecodeExpectingError(decoder, jpeg);
  EXPECT_EQ(e.kind(), DecodeErrorKind::kTooLarge) << e.what();
  EXPECT_NE(std::string(e.what()).find("65000x65000"), std::string::npos) << e.what();
}

TEST(JpegBadInput, TwelveBitAndLosslessAreUnsupported) {
  JpegDecoder decoder;
  auto twelve = MakeJpeg(64, 64, EncodeOptions{});
  PatchSof(twelve, 12, 64, 64);
  EXPECT_EQ(DecodeExpectingError(decoder, twelve).kind(), DecodeErrorKind::kUnsupported);
  auto lossless = MakeJpeg(64, 64, EncodeOptions{});
  PatchSof(lossless, 8, 64, 64, 0xC3);
  EXPECT_EQ(DecodeExpectingError(decoder, lossless).kind(), DecodeErrorKind::kUnsupported);
}

TEST(JpegBadInput, AbsurdScanCountIsBounded) {
  // A progressive file whose last scan is repeated hundreds of times: libjpeg would
  // decode every one of them; the scan limit stops it.
  EncodeOptions o;
  o.progressive = true;
  const auto jpeg = MakeJpeg(64, 64, o);
  std::size_t last_sos = 0;
  for (std::size_t i = 2; i + 1 < jpeg.size(); ++i) {
    if (jpeg[i] == std::byte{0xFF} && jpeg[i + 1] == std::byte{0xDA}) last_sos = i;
  }
  ASSERT_GT(last_sos, 0u);
  const std::vector<std::byte> scan(jpeg.begin() + static_cast<std::ptrdiff_t>(last_sos),
                                    jpeg.end() - 2);  // up to EOI
  std::vector<std::byte> hostile(jpeg.begin(), jpeg.end() - 2);
  for (int i = 0; i < 300; ++i) hostile.insert(hostile.end(), scan.begin(), scan.end());
  hostile.push_back(std::byte{0xFF});
  hostile.push_back(std::byte{0xD9});
  // The strict policy already stops at the first bogus-progression warning; the lenient
  // one would go on, and the scan limit stops it.
  JpegDecoder strict;
  EXPECT_EQ(DecodeExpectingError(strict, hostile).kind(), DecodeErrorKind::kCorrupt);
  JpegOptions lenient;
  lenient.corrupt_data = CorruptDataPolicy::kAccept;
  JpegDecoder decoder(lenient);
  const DecodeError e = DecodeExpectingError(decoder, hostile);
  EXPECT_EQ(e.kind(), DecodeErrorKind::kTooManyScans) << e.what();
}

TEST(JpegBadInput, DecoderRecoversAfterEveryKindOfError) {
  JpegDecoder decoder;
  const auto good = MakeJpeg(120, 90, EncodeOptions{});
  auto truncated = good;
  truncated.resize(good.size() / 3);
  std::vector<std::uint8_t> out(std::size_t{24} * 24 * 3), again(std::size_t{24} * 24 * 3);
  const auto view = PixelView::Interleaved(out.data(), 24, 24);
  decoder.DecodeInto(good, {Rect{0, 0, 120, 90}}, view);
  for (const auto& bad : {testing::MakePngBytes(), truncated, std::vector<std::byte>{}}) {
    EXPECT_THROW(decoder.DecodeInto(bad, {Rect{0, 0, 120, 90}}, view), DecodeError);
    decoder.DecodeInto(good, {Rect{0, 0, 120, 90}}, PixelView::Interleaved(again.data(), 24, 24));
    EXPECT_EQ(out, again);
  }
}

TEST(JpegFull, MatchesCropOfWholeImageAtFullScale) {
  // DecodeFull (TurboJPEG) and DecodeInto at 8/8 without resize are the same decoder.
  for (const Encoding& e : AllEncodings()) {
    SCOPED_TRACE(e.name);
    const auto jpeg = MakeJpeg(77, 45, e.options, 11, e.channels);
    JpegDecoder decoder;
    const ImageInfo info = decoder.ReadInfo(jpeg);
    const auto full = FullDecode(decoder, jpeg, info);
    std::vector<std::uint8_t> same(full.size());
    const DecodeReport report =
        decoder.DecodeInto(jpeg, {Rect{0, 0, 77, 45}}, PixelView::Interleaved(same.data(), 77, 45));
    EXPECT_EQ(report.scale_eighths, 8);
    EXPECT_EQ(same, full);
  }
}

TEST(JpegFull, EntropyDecodeAcceptsGoodAndRejectsBadData) {
  JpegDecoder decoder;
  auto jpeg = MakeJpeg(200, 100, EncodeOptions{});
  EXPECT_NO_THROW(decoder.EntropyDecode(jpeg));
  jpeg.resize(jpeg.size() / 2);
  EXPECT_THROW(decoder.EntropyDecode(jpeg), DecodeError);
}

}  // namespace
}  // namespace tilefeed::codecs
