#include "tilefeed/loader/augment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "codecs/resize.h"
#include "tests/support/jpeg_maker.h"
#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/codecs/jpeg_encoder.h"
#include "tilefeed/loader/sampler.h"

namespace tilefeed::loader {
namespace {

using codecs::Rect;

bool Inside(const Rect& rect, int width, int height) {
  return rect.width >= 1 && rect.height >= 1 && rect.x >= 0 && rect.y >= 0 &&
         rect.x + rect.width <= width && rect.y + rect.height <= height;
}

TEST(RandomResizedCrop, AlwaysInsideAndNonEmpty) {
  SampleRng sizes(123, 0, 0);
  const RandomResizedCropParams params;
  for (int trial = 0; trial < 20'000; ++trial) {
    // Mostly random sizes, plus the extremes the header promises to handle.
    int width = static_cast<int>(sizes.UniformInt(1, 5000));
    int height = static_cast<int>(sizes.UniformInt(1, 5000));
    switch (trial % 5) {
      case 0:
        width = 1, height = 1;
        break;
      case 1:
        height = static_cast<int>(sizes.UniformInt(1, 20));
        break;  // e.g. 5000x20
      case 2:
        width = static_cast<int>(sizes.UniformInt(1, 20));
        break;
      default:
        break;
    }
    SampleRng rng(static_cast<std::uint64_t>(trial), 1, 2);
    const Rect rect = RandomResizedCrop(width, height, params, rng);
    ASSERT_TRUE(Inside(rect, width, height)) << width << "x" << height << " -> " << rect.x << ","
                                             << rect.y << " " << rect.width << "x" << rect.height;
  }
}

TEST(RandomResizedCrop, AreaAndAspectWithinRangesOn500x375) {
  constexpr int kWidth = 500;
  constexpr int kHeight = 375;
  const RandomResizedCropParams params;
  int fallbacks = 0;
  double min_fraction = 1;
  double max_fraction = 0;
  for (std::uint64_t sample = 0; sample < 20'000; ++sample) {
    SampleRng rng(9, 0, sample);
    const Rect rect = RandomResizedCrop(kWidth, kHeight, params, rng);
    ASSERT_TRUE(Inside(rect, kWidth, kHeight));
    const bool is_fallback = rect.width == kWidth && rect.height == kHeight;
    if (is_fallback) {
      ++fallbacks;
      continue;
    }
    const double fraction =
        static_cast<double>(rect.width) * rect.height / (static_cast<double>(kWidth) * kHeight);
    const double aspect = static_cast<double>(rect.width) / rect.height;
    // Rounding to whole pixels moves area and aspect slightly past the drawn values.
    EXPECT_GE(fraction, 0.08 * 0.97);
    EXPECT_LE(fraction, 1.0);
    EXPECT_GE(aspect, 0.75 * 0.97);
    EXPECT_LE(aspect, 4.0 / 3.0 * 1.03);
    min_fraction = std::min(min_fraction, fraction);
    max_fraction = std::max(max_fraction, fraction);
  }
  // The draws must actually span the range, and fallbacks must stay rare on this shape.
  EXPECT_LT(min_fraction, 0.1);
  EXPECT_GT(max_fraction, 0.9);
  EXPECT_LT(fallbacks, 200);
}

TEST(RandomResizedCrop, PlacementCoversTheImage) {
  // With scale fixed small, x and y must reach both ends of their ranges.
  const RandomResizedCropParams params{0.01, 0.01, 1.0, 1.0};
  int min_x = 1000, max_x = -1, min_y = 1000, max_y = -1;
  for (std::uint64_t sample = 0; sample < 5000; ++sample) {
    SampleRng rng(1, 2, sample);
    const Rect rect = RandomResizedCrop(100, 100, params, rng);
    ASSERT_EQ(rect.width, 10);
    ASSERT_EQ(rect.height, 10);
    min_x = std::min(min_x, rect.x), max_x = std::max(max_x, rect.x);
    min_y = std::min(min_y, rect.y), max_y = std::max(max_y, rect.y);
  }
  EXPECT_EQ(min_x, 0);
  EXPECT_EQ(max_x, 90);
  EXPECT_EQ(min_y, 0);
  EXPECT_EQ(max_y, 90);
}

TEST(RandomResizedCrop, FallbackIsCentralCropClampedToRatio) {
  // A scale above 1 never fits, so every call falls back.
  const RandomResizedCropParams never_fits{2.0, 3.0, 3.0 / 4.0, 4.0 / 3.0};
  SampleRng rng(0, 0, 0);
  // Too wide (ratio 4 > 4/3): full height, width = round(100 * 4/3) = 133, centred.
  EXPECT_EQ(RandomResizedCrop(400, 100, never_fits, rng), (Rect{133, 0, 133, 100}));
  // Too tall (ratio 1/4 < 3/4): full width, height = round(100 / 0.75) = 133, centred.
  EXPECT_EQ(RandomResizedCrop(100, 400, never_fits, rng), (Rect{0, 133, 100, 133}));
  // Inside the range: the whole image.
  EXPECT_EQ(RandomResizedCrop(120, 100, never_fits, rng), (Rect{0, 0, 120, 100}));
}

TEST(RandomResizedCrop, DeterministicForTheSameStream) {
  const RandomResizedCropParams params;
  for (std::uint64_t sample = 0; sample < 100; ++sample) {
    SampleRng a(5, 6, sample);
    SampleRng b(5, 6, sample);
    ASSERT_EQ(RandomResizedCrop(640, 480, params, a), RandomResizedCrop(640, 480, params, b));
  }
  SampleRng c(5, 6, 0);
  SampleRng d(5, 7, 0);
  int differing = 0;
  for (int i = 0; i < 10; ++i) {
    differing += RandomResizedCrop(640, 480, params, c) != RandomResizedCrop(640, 480, params, d);
  }
  EXPECT_GT(differing, 5);
}

TEST(RandomResizedCrop, RejectsBadArguments) {
  SampleRng rng(0, 0, 0);
  const RandomResizedCropParams ok;
  EXPECT_THROW(RandomResizedCrop(0, 10, ok, rng), std::invalid_argument);
  EXPECT_THROW(RandomResizedCrop(10, -1, ok, rng), std::invalid_argument);
  EXPECT_THROW(RandomResizedCrop(10, 10, {0.5, 0.4, 0.75, 1.33}, rng), std::invalid_argument);
  EXPECT_THROW(RandomResizedCrop(10, 10, {0.0, 1.0, 0.75, 1.33}, rng), std::invalid_argument);
  EXPECT_THROW(RandomResizedCrop(10, 10, {0.1, 1.0, 1.5, 1.33}, rng), std::invalid_argument);
  EXPECT_THROW(RandomResizedCrop(10, 10, {0.1, 1.0, -1.0, 1.33}, rng), std::invalid_argument);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(RandomResizedCrop(10, 10, {0.1, nan, 0.75, 1.33}, rng), std::invalid_argument);
}

void ExpectBox(const codecs::SourceBox& box, double x0, double y0, double x1, double y1) {
  EXPECT_NEAR(box.x0, x0, 1e-9);
  EXPECT_NEAR(box.y0, y0, 1e-9);
  EXPECT_NEAR(box.x1, x1, 1e-9);
  EXPECT_NEAR(box.y1, y1, 1e-9);
}

TEST(AugmentCenterCrop, ImageNetEvalOn500x375) {
  // Resize(256) makes 500x375 int(256 * 500 / 375) = 341 x 256 (each axis its own factor);
  // CenterCrop(224) starts at round((341 - 224) / 2) = round(58.5) = 58 (halves to even, as
  // Python's round) and round(16) = 16 resized pixels. In source pixels that is
  // [58, 282) * 500 / 341 by [16, 240) * 375 / 256: a fractional box, not whole pixels.
  const codecs::CropPlan plan = CenterCropAfterResize(500, 375, 256, 224, 224);
  ExpectBox(plan.box, 58 * 500.0 / 341, 16 * 375.0 / 256, 282 * 500.0 / 341, 240 * 375.0 / 256);
  // PIL's filter (support s = 1.46) reads s - s / 2 - 1/2 = 0.23 pixels beyond the box on
  // each side, rounded out to whole pixels: [84, 414) by [23, 352).
  EXPECT_EQ(plan.crop, (Rect{84, 23, 330, 329}));
  EXPECT_FALSE(plan.flip);
  EXPECT_FALSE(plan.dct_scaling);
  // Portrait: the same numbers with the axes swapped.
  const codecs::CropPlan portrait = CenterCropAfterResize(375, 500, 256, 224, 224);
  ExpectBox(portrait.box, 16 * 375.0 / 256, 58 * 500.0 / 341, 240 * 375.0 / 256, 282 * 500.0 / 341);
  EXPECT_EQ(portrait.crop, (Rect{23, 84, 329, 330}));
  EXPECT_TRUE(CenterCropAfterResize(500, 375, 256, 224, 224, true).dct_scaling);
}

TEST(AugmentCenterCrop, IdentityTinyAndTooLarge) {
  // Resize to its own size and crop all of it: the whole image.
  const codecs::CropPlan whole = CenterCropAfterResize(300, 200, 200, 300, 200);
  ExpectBox(whole.box, 0, 0, 300, 200);
  EXPECT_EQ(whole.crop, (Rect{0, 0, 300, 200}));
  // A 1x1 image resized to 256x256: the crop's 224 pixels are 7/8 of the one pixel.
  const codecs::CropPlan tiny = CenterCropAfterResize(1, 1, 256, 224, 224);
  ExpectBox(tiny.box, 16 / 256.0, 16 / 256.0, 240 / 256.0, 240 / 256.0);
  EXPECT_EQ(tiny.crop, (Rect{0, 0, 1, 1}));
  // A crop larger than the resized image (torchvision would pad) is refused.
  EXPECT_THROW(CenterCropAfterResize(100, 50, 50, 500, 500), std::invalid_argument);
  SampleRng sizes(3, 3, 3);
  for (int i = 0; i < 5000; ++i) {
    const int width = static_cast<int>(sizes.UniformInt(1, 5000));
    const int height = static_cast<int>(sizes.UniformInt(1, 5000));
    for (const bool dct : {false, true}) {
      const codecs::CropPlan plan = CenterCropAfterResize(width, height, 256, 224, 224, dct);
      ASSERT_TRUE(Inside(plan.crop, width, height)) << width << "x" << height;
      ASSERT_TRUE(codecs::BoxInsideCrop(plan)) << width << "x" << height;
      ASSERT_LT(plan.box.x0, plan.box.x1);
      ASSERT_LT(plan.box.y0, plan.box.y1);
    }
  }
}

// Eval's contract at the pixel: the crop decode of an exact plan is the whole image
// decoded, then its box resized (PIL's Resize of the fractional box, which reads pixels
// just outside the box), byte for byte. Sizes from below the resize (upscaling) to 4x it,
// in every common sampling, put the box's edges everywhere against the iMCU grid and the
// filter's reach: a crop one pixel short of what the filter reads fails here.
TEST(AugmentCenterCrop, ExactPlanIsTheWholeDecodeResizedByteForByte) {
  codecs::JpegDecoder decoder;
  SampleRng sizes(11, 11, 11);
  const codecs::Subsampling samplings[] = {codecs::Subsampling::k420, codecs::Subsampling::k444,
                                           codecs::Subsampling::k422, codecs::Subsampling::k440};
  constexpr int kOut = 56;
  for (int i = 0; i < 200; ++i) {
    const int width = static_cast<int>(sizes.UniformInt(40, 260));
    const int height = static_cast<int>(sizes.UniformInt(40, 260));
    codecs::EncodeOptions options;
    options.subsampling = samplings[i % 4];
    const std::vector<std::byte> jpeg = testing::MakeJpeg(width, height, options, i + 1);
    const codecs::CropPlan plan = CenterCropAfterResize(width, height, 64, kOut, kOut);
    ASSERT_FALSE(plan.dct_scaling);
    std::vector<std::uint8_t> out(std::size_t{kOut} * kOut * 3);
    decoder.DecodeInto(jpeg, plan, codecs::PixelView::Interleaved(out.data(), kOut, kOut));

    std::vector<std::uint8_t> whole(std::size_t(width) * height * 3);
    decoder.DecodeFull(jpeg, codecs::PixelView::Interleaved(whole.data(), width, height));
    std::vector<std::uint8_t> expected(out.size());
    codecs::Resizer resizer;
    resizer.Resize(codecs::ConstPixelView{whole.data(), width, height, 3,
                                          static_cast<std::ptrdiff_t>(width) * 3},
                   plan.box, codecs::PixelView::Interleaved(expected.data(), kOut, kOut));
    ASSERT_EQ(out, expected) << width << "x" << height << " sampling " << i % 4;
  }
}

TEST(AugmentCenterCrop, RejectsBadArguments) {
  EXPECT_THROW(CenterCropAfterResize(0, 10, 256, 224, 224), std::invalid_argument);
  EXPECT_THROW(CenterCropAfterResize(10, 10, 0, 224, 224), std::invalid_argument);
  EXPECT_THROW(CenterCropAfterResize(10, 10, 256, 0, 224), std::invalid_argument);
  EXPECT_THROW(CenterCropAfterResize(10, 10, 256, 224, -1), std::invalid_argument);
}

TEST(AugmentFlip, FrequencyFollowsProbability) {
  int flips = 0;
  for (std::uint64_t sample = 0; sample < 100'000; ++sample) {
    SampleRng rng(4, 4, sample);
    flips += DrawFlip(rng);
  }
  EXPECT_NEAR(flips / 100'000.0, 0.5, 0.01);
  SampleRng rng(4, 4, 4);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(DrawFlip(rng, 1.0));
    ASSERT_FALSE(DrawFlip(rng, 0.0));
  }
  EXPECT_THROW(DrawFlip(rng, -0.1), std::invalid_argument);
  EXPECT_THROW(DrawFlip(rng, 1.5), std::invalid_argument);
  EXPECT_THROW(DrawFlip(rng, std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
}

// ---- The augment spec -------------------------------------------------------------------------

// One text form: positional or keyword arguments, pairs, brackets and spacing all read to the
// same spec, whose canonical text names only the non-default parameters and reads back.
TEST(AugmentSpec, ParsesTorchvisionsSpellingsAndPrintsOneText) {
  const AugmentSpec spec = ParseAugmentSpec(
      "[RandomResizedCrop(scale=(0.08, 1.0)), RandomHorizontalFlip(0.5), ColorJitter(0.4, "
      "0.4, 0.4), RandAugment(2, 9), TrivialAugmentWide(fill=128), RandomErasing(0.25, "
      "value=3), RandomGrayscale()]");
  ASSERT_EQ(spec.size(), 7u);
  EXPECT_EQ(spec[2].kind, AugmentKind::kColorJitter);
  EXPECT_EQ(spec[2].saturation_min, 1 - 0.4);  // torchvision's (max(0, 1 - x), 1 + x)
  EXPECT_EQ(spec[2].saturation_max, 1 + 0.4);
  EXPECT_EQ(spec[2].hue_min, 0);
  EXPECT_EQ(spec[2].hue_max, 0);
  EXPECT_EQ(spec[3].num_ops, 2);
  EXPECT_EQ(spec[5].p, 0.25);
  EXPECT_EQ(spec[5].scale_max, 0.33);
  const std::string text = AugmentSpecText(spec);
  EXPECT_EQ(text,
            "RandomResizedCrop(), RandomHorizontalFlip(), ColorJitter(brightness=(0.6, 1.4), "
            "contrast=(0.6, 1.4), saturation=(0.6, 1.4)), RandAugment(), "
            "TrivialAugmentWide(fill=128), RandomErasing(p=0.25, value=3), RandomGrayscale()");
  EXPECT_EQ(ParseAugmentSpec(text), spec);
  EXPECT_EQ(ParseAugmentSpec(AugmentSpecText(DefaultAugment())), DefaultAugment());
  EXPECT_EQ(AugmentSpecText(DefaultAugment()), "RandomResizedCrop(), RandomHorizontalFlip()");
  EXPECT_EQ(AugmentProblem(spec), std::nullopt);
  // No ops prints "" and reads back (augment_fuzz found "[]" printed as a text it refused);
  // AugmentProblem says why a loader cannot run it.
  EXPECT_EQ(ParseAugmentSpec(AugmentSpecText({})), AugmentSpec{});
  EXPECT_EQ(ParseAugmentSpec("[ ]"), AugmentSpec{});
}

// ColorJitter takes torchvision's (min, max) ranges as well as a number: a number x is
// (max(0, 1 - x), 1 + x), hue's (-x, x); a range of just the center (1, or hue's 0) is off.
TEST(AugmentSpec, ColorJitterTakesRangesAndNumbers) {
  const AugmentOp op =
      ParseAugmentSpec("ColorJitter(brightness=(0.5, 1.5), contrast=1.5, hue=(-0.1, 0.2))")[0];
  EXPECT_EQ(op.brightness_min, 0.5);
  EXPECT_EQ(op.brightness_max, 1.5);
  EXPECT_EQ(op.contrast_min, 0);  // 1 - 1.5, clipped at 0
  EXPECT_EQ(op.contrast_max, 2.5);
  EXPECT_EQ(op.hue_min, -0.1);
  EXPECT_EQ(op.hue_max, 0.2);
  EXPECT_EQ(AugmentSpecText({op}),
            "ColorJitter(brightness=(0.5, 1.5), contrast=(0, 2.5), hue=(-0.1, 0.2))");
  EXPECT_EQ(ParseAugmentSpec("ColorJitter(brightness=(1, 1), hue=0)"),
            ParseAugmentSpec("ColorJitter()"));
  SampleRng rng(3, 0, 7);
  const std::vector<PixelOp> ops =
      DrawPixelOps(ParseAugmentSpec("RandomResizedCrop(), "
                                    "ColorJitter(brightness=(1.2, 1.2))"),
                   224, 224, rng);
  ASSERT_EQ(ops.size(), 1u);  // a range that is not just the center is on, even a point
  EXPECT_EQ(ops[0].value, 1.2);
}

std::string Refusal(const std::string& text) {
  try {
    (void)ParseAugmentSpec(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(AugmentSpec, ABadSpecIsOneLineNamingWhatAndWhy) {
  EXPECT_EQ(Refusal("RandomResizedCrop(), Rotate(3)"),
            "augment: unknown op 'Rotate' (the ops: RandomResizedCrop, RandomHorizontalFlip, "
            "ColorJitter, RandAugment, TrivialAugmentWide, RandomErasing, RandomGrayscale) at "
            "column 22 of 'RandomResizedCrop(), Rotate(3)'");
  EXPECT_EQ(Refusal("RandomErasing(1.5)"),
            "augment: RandomErasing p must be between 0 and 1, got 1.5 at column 19 of "
            "'RandomErasing(1.5)'");
  EXPECT_EQ(Refusal("RandAugment(2, 31)"),
            "augment: RandAugment magnitude must be below num_magnitude_bins (31), got 31 at "
            "column 19 of 'RandAugment(2, 31)'");
  EXPECT_EQ(Refusal("RandAugment(2.5)"),
            "augment: RandAugment num_ops must be a whole number, got 2.5 at column 17 of "
            "'RandAugment(2.5)'");
  EXPECT_EQ(Refusal("ColorJitter(hue=0.6)"),
            "augment: ColorJitter hue must be between 0 and 0.5, got 0.6 at column 20 of "
            "'ColorJitter(hue=0.6)'");
  EXPECT_EQ(Refusal("ColorJitter(hue=(-0.6, 0.1))"),
            "augment: ColorJitter hue must be between -0.5 and 0.5, got -0.6 at column 29 of "
            "'ColorJitter(hue=(-0.6, 0.1))'");
  EXPECT_EQ(Refusal("ColorJitter(brightness=(1.5, 0.5))"),
            "augment: ColorJitter brightness=(min, max) needs min <= max, got (1.5, 0.5) at "
            "column 35 of 'ColorJitter(brightness=(1.5, 0.5))'");
  EXPECT_NE(Refusal("ColorJitter(brightness=-0.1)"), "");
  EXPECT_EQ(Refusal("RandomErasing(value='random')"),
            "augment: RandomErasing value takes one uint8 level (the erase runs on the uint8 "
            "crop, before any normalisation); \"random\" and per-channel values are not "
            "supported at column 21 of 'RandomErasing(value='random')'");
  EXPECT_NE(Refusal("RandomErasing(value=(124, 116, 104))").find("per-channel"), std::string::npos);
  EXPECT_EQ(Refusal("RandomGrayscale(q=1)"),
            "augment: RandomGrayscale has no parameter 'q' (it takes p) at column 17 of "
            "'RandomGrayscale(q=1)'");
  EXPECT_EQ(Refusal("RandomResizedCrop(scale=0.5)"),
            "augment: expected '(' at column 25 of "
            "'RandomResizedCrop(scale=0.5)'");
  EXPECT_EQ(Refusal("RandomResizedCrop(scale=(0.5, 0.1))"),
            "augment: RandomResizedCrop scale=(min, max) needs min <= max, got (0.5, 0.1) at "
            "column 36 of 'RandomResizedCrop(scale=(0.5, 0.1))'");
  EXPECT_NE(Refusal("RandomGrayscale(0.1, 0.2)"), "");
  EXPECT_NE(Refusal("RandomGrayscale(p=0.1, p=0.2)"), "");
  EXPECT_EQ(AugmentProblem({}),
            "augment must start with RandomResizedCrop (train mode draws the "
            "crop before the decode), got ''");
  EXPECT_NE(Refusal("RandomGrayscale(nan)"), "");
  // from_chars reads "inf": a range that passes every bound but cannot be drawn from.
  EXPECT_EQ(Refusal("RandomResizedCrop(scale=(0.5, inf))"),
            "augment: RandomResizedCrop scale must be finite, got inf at column 36 of "
            "'RandomResizedCrop(scale=(0.5, inf))'");
  EXPECT_NE(Refusal("ColorJitter(saturation=inf)").find("must be finite"), std::string::npos);
  EXPECT_NE(Refusal("RandomGrayscale() RandomGrayscale()"), "");
  // The order train mode needs: the crop first, the flip right after it.
  EXPECT_EQ(AugmentProblem(ParseAugmentSpec("RandomErasing()")),
            "augment must start with RandomResizedCrop (train mode draws the crop before the "
            "decode), got 'RandomErasing()'");
  EXPECT_EQ(AugmentProblem(ParseAugmentSpec("RandomResizedCrop(), RandomErasing(), "
                                            "RandomHorizontalFlip()")),
            "augment: RandomHorizontalFlip can only come right after RandomResizedCrop, got "
            "'RandomResizedCrop(), RandomErasing(), RandomHorizontalFlip()'");
}

// torchvision's ratio may be any positive range; a box far larger than the image is a try
// that does not fit (compared as doubles, never cast to int first).
TEST(AugmentDraws, AnErasingBoxTooLargeForAnIntIsATryThatDoesNotFit) {
  const AugmentSpec spec =
      ParseAugmentSpec("RandomResizedCrop(), RandomErasing(p=1, ratio=(1e-300, 1e300))");
  int erased = 0;
  for (std::uint64_t sample = 0; sample < 2000; ++sample) {
    SampleRng rng(1, 0, sample);
    for (const PixelOp& op : DrawPixelOps(spec, 224, 160, rng)) {
      ASSERT_EQ(op.kind, PixelOpKind::kErase);
      ASSERT_TRUE(Inside(op.area, 224, 160));
      ++erased;
    }
  }
  EXPECT_GT(erased, 0);  // a ratio near 1 still fits now and then
}

// Draws: a pure function of the sample's stream, with torchvision's frequencies.
TEST(AugmentDraws, FollowTorchvisionsSampling) {
  const AugmentSpec spec = ParseAugmentSpec(
      "RandomResizedCrop(), ColorJitter(0.4, 0.3, 0.2, 0.1), RandAugment(3, 9), "
      "RandomErasing(0.25), RandomGrayscale(0.5)");
  int erased = 0;
  int grayed = 0;
  int policy_ops = 0;
  constexpr int kSamples = 20000;
  for (std::uint64_t sample = 0; sample < kSamples; ++sample) {
    SampleRng rng(1, 2, sample);
    const std::vector<PixelOp> ops = DrawPixelOps(spec, 224, 160, rng);
    SampleRng again(1, 2, sample);
    const std::vector<PixelOp> same = DrawPixelOps(spec, 224, 160, again);
    ASSERT_EQ(ops.size(), same.size());
    ASSERT_GE(ops.size(), 4u);
    int jitter[4] = {};
    for (std::size_t i = 0; i < 4; ++i) {  // the four adjustments, each once, in some order
      ASSERT_NE(ops[i].kind, PixelOpKind::kPolicy);
      ++jitter[static_cast<int>(ops[i].kind) - 1];
      const double v = ops[i].value;
      switch (ops[i].kind) {
        case PixelOpKind::kBrightness:
          ASSERT_TRUE(v >= 0.6 && v <= 1.4) << v;
          break;
        case PixelOpKind::kContrast:
          ASSERT_TRUE(v >= 0.7 && v <= 1.3) << v;
          break;
        case PixelOpKind::kSaturation:
          ASSERT_TRUE(v >= 0.8 && v <= 1.2) << v;
          break;
        default:
          ASSERT_TRUE(v >= -0.1 && v <= 0.1) << v;
      }
    }
    EXPECT_EQ(jitter[0] + jitter[1] + jitter[2] + jitter[3], 4);
    for (std::size_t i = 4; i < ops.size(); ++i) {
      ASSERT_EQ(ops[i].value, same[i].value);
      if (ops[i].kind == PixelOpKind::kPolicy) ++policy_ops;
      if (ops[i].kind == PixelOpKind::kGrayscale) ++grayed;
      if (ops[i].kind == PixelOpKind::kErase) {
        ++erased;
        const Rect& a = ops[i].area;
        ASSERT_TRUE(Inside(a, 224, 160));
        ASSERT_LT(a.width, 224);
        ASSERT_LT(a.height, 160);
      }
    }
  }
  EXPECT_NEAR(erased / double(kSamples), 0.25, 0.015);
  EXPECT_NEAR(grayed / double(kSamples), 0.5, 0.015);
  // 3 ops of 14, Identity (1 of 14) leaves none.
  EXPECT_NEAR(policy_ops / double(kSamples), 3.0 * 13 / 14, 0.03);
}

}  // namespace
}  // namespace tilefeed::loader
