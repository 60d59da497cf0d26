#include "codecs/image_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

// Edge cases of the augment ops: 1x1 images, widths that end in every vector tail, row
// strides beyond the pixels, and parameters at their extremes. Parity with torchvision
// over parameter grids is test_image_ops.py's.

namespace tilefeed::codecs {
namespace {

constexpr std::uint8_t kPad = 0x5a;

// An RGB image with `padding` bytes after each row, which no op may touch.
struct Image {
  int width;
  int height;
  std::ptrdiff_t stride;
  std::vector<std::uint8_t> bytes;

  Image(int w, int h, int padding = 5, std::uint32_t seed = 1)
      : width(w),
        height(h),
        stride(std::ptrdiff_t{3} * w + padding),
        bytes(static_cast<std::size_t>(stride) * h, kPad) {
    std::mt19937 rng(seed);
    for (int y = 0; y < h; ++y) {
      for (int i = 0; i < 3 * w; ++i) at(y, i / 3, i % 3) = static_cast<std::uint8_t>(rng());
    }
  }
  PixelView view() { return PixelView::Interleaved(bytes.data(), width, height, 3, stride); }
  std::size_t Index(int y, int x, int c) const {
    return static_cast<std::size_t>(y * stride + std::ptrdiff_t{3} * x + c);
  }
  std::uint8_t& at(int y, int x, int c) { return bytes[Index(y, x, c)]; }
  std::uint8_t at(int y, int x, int c) const { return bytes[Index(y, x, c)]; }
  bool PaddingIntact() const {
    for (int y = 0; y < height; ++y) {
      for (std::ptrdiff_t i = 3 * std::ptrdiff_t{width}; i < stride; ++i) {
        if (bytes[y * stride + i] != kPad) return false;
      }
    }
    return true;
  }
};

// torchvision's _blend of two values in float32, written out again.
std::uint8_t Blend(double ratio, int x, int y) {
  const float v = static_cast<float>(ratio) * static_cast<float>(x) +
                  static_cast<float>(1.0 - ratio) * static_cast<float>(y);
  return static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
}

std::uint8_t Luma(int r, int g, int b) {
  return static_cast<std::uint8_t>(0.2989f * static_cast<float>(r) +
                                   0.587f * static_cast<float>(g) + 0.114f * static_cast<float>(b));
}

TEST(ImageOps, EveryOpRunsOnOnePixel) {
  ImageOpScratch scratch;
  for (int op = 0; op < kPolicyOps; ++op) {
    for (const double magnitude : {-0.99, 0.0, 0.99, 135.0, -30.0}) {
      Image image(1, 1);
      const std::vector<std::uint8_t> before = image.bytes;
      const auto policy_op = static_cast<PolicyOp>(op);
      const double m = policy_op == PolicyOp::kPosterize ? 4 : magnitude;
      ApplyPolicyOp(image.view(), policy_op, std::abs(m), {1, 2, 3}, scratch);
      EXPECT_TRUE(image.PaddingIntact());
      // One pixel is its own centre (rotations keep it), a translation of under a pixel
      // keeps it, and it is flat (AutoContrast and Equalize keep it).
      if (policy_op != PolicyOp::kBrightness && policy_op != PolicyOp::kColor &&
          policy_op != PolicyOp::kContrast && policy_op != PolicyOp::kPosterize &&
          policy_op != PolicyOp::kSolarize && std::abs(m) < 1) {
        EXPECT_EQ(image.bytes, before) << "op " << op << " magnitude " << m;
      }
    }
  }
  Image image(1, 1);
  AdjustHue(image.view(), 0.5);
  Grayscale(image.view());
  EXPECT_EQ(image.at(0, 0, 0), image.at(0, 0, 2));
  Erase(image.view(), {0, 0, 1, 1}, {7, 8, 9});
  EXPECT_EQ(image.at(0, 0, 1), 8);
  EXPECT_TRUE(image.PaddingIntact());
}

// Widths 1..40 end the vector loops at every remainder; each value must be the blend
// written out above, and the padding after each row untouched.
TEST(ImageOps, BlendsAreExactAtEveryTail) {
  for (int width = 1; width <= 40; ++width) {
    for (const double factor : {0.0, 0.37, 1.0, 1.99}) {
      Image image(width, 3, 9, width);
      const Image original = image;
      AdjustSaturation(image.view(), factor);
      for (int x = 0; x < width; ++x) {
        const int gray = Luma(original.at(0, x, 0), original.at(0, x, 1), original.at(0, x, 2));
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(image.at(0, x, c), Blend(factor, original.at(0, x, c), gray))
              << "width " << width << " factor " << factor;
        }
      }
      EXPECT_TRUE(image.PaddingIntact());
    }
  }
}

// The luma kernels do 16 pixels at a time; widths 1..40 and a row stride beyond the
// pixels leave every remainder to the tail, and AutoContrast's min/max reads 48 bytes.
TEST(ImageOps, GrayscaleAndAutoContrastAreExactAtEveryTail) {
  for (int width = 1; width <= 40; ++width) {
    Image image(width, 2, 11, width);
    const Image original = image;
    Grayscale(image.view());
    for (int x = 0; x < width; ++x) {
      const std::uint8_t* p = &original.bytes[original.Index(1, x, 0)];
      for (int c = 0; c < 3; ++c) ASSERT_EQ(image.at(1, x, c), Luma(p[0], p[1], p[2])) << width;
    }
    EXPECT_TRUE(image.PaddingIntact());
    image = original;
    // A channel's extremes in the last pixel, where only the scalar tail sees them.
    image.at(1, width - 1, 2) = 255;
    image.at(1, width - 1, 1) = 0;
    const Image stretched = image;
    AutoContrast(image.view());
    for (int c = 0; c < 3; ++c) {
      int lo = 255;
      int hi = 0;
      for (int y = 0; y < 2; ++y) {
        for (int x = 0; x < width; ++x) {
          lo = std::min<int>(lo, stretched.at(y, x, c));
          hi = std::max<int>(hi, stretched.at(y, x, c));
        }
      }
      // torchvision's (x - min) * (1 / (max - min) * 255) in float32, truncated.
      const float scale = lo == hi ? 1.0f : (1.0f / static_cast<float>(hi - lo)) * 255.0f;
      const float minimum = lo == hi ? 0.0f : static_cast<float>(lo);
      for (int x = 0; x < width; ++x) {
        const float v = (static_cast<float>(stretched.at(1, x, c)) - minimum) * scale;
        ASSERT_EQ(image.at(1, x, c), static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f)));
      }
    }
    EXPECT_TRUE(image.PaddingIntact());
  }
}

TEST(ImageOps, SharpnessKeepsImagesOfTwoPixelsOrLessAndBlendsTheBorder) {
  ImageOpScratch scratch;
  for (const auto& [w, h] : {std::pair{2, 9}, std::pair{9, 2}, std::pair{1, 1}}) {
    Image image(w, h);
    const std::vector<std::uint8_t> before = image.bytes;
    AdjustSharpness(image.view(), 1.99, scratch);
    EXPECT_EQ(image.bytes, before);
  }
  // Factor 1 is the image; the border is blended with itself, which float32 keeps.
  Image image(17, 5);
  const std::vector<std::uint8_t> before = image.bytes;
  AdjustSharpness(image.view(), 1.0, scratch);
  EXPECT_EQ(image.bytes, before);
  // Factor 0 is the smoothed image: a flat image stays flat.
  Image flat(7, 6);
  for (int y = 0; y < 6; ++y) {
    for (int x = 0; x < 7; ++x) flat.at(y, x, 0) = flat.at(y, x, 1) = flat.at(y, x, 2) = 77;
  }
  const std::vector<std::uint8_t> flat_before = flat.bytes;
  AdjustSharpness(flat.view(), 0.0, scratch);
  EXPECT_EQ(flat.bytes, flat_before);
}

// The smoothing runs 16 values at a time inside the one-pixel border; widths 3..40 leave
// every remainder. Each value must be the blend with the 3x3 average rounded (half to
// even; sum / 13 never lies on a half) written out here.
TEST(ImageOps, SharpnessIsExactAtEveryTail) {
  ImageOpScratch scratch;
  for (int width = 3; width <= 40; ++width) {
    Image image(width, 4, 9, width);
    const Image original = image;
    AdjustSharpness(image.view(), 1.7, scratch);
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < width; ++x) {
        for (int c = 0; c < 3; ++c) {
          int smooth = original.at(y, x, c);
          if (y > 0 && y < 3 && x > 0 && x < width - 1) {
            int sum = 4 * smooth;
            for (int dy = -1; dy <= 1; ++dy) {
              for (int dx = -1; dx <= 1; ++dx) sum += original.at(y + dy, x + dx, c);
            }
            smooth = static_cast<int>(std::nearbyint(sum / 13.0));
          }
          ASSERT_EQ(image.at(y, x, c), Blend(1.7, original.at(y, x, c), smooth))
              << "width " << width << " at " << y << ", " << x;
        }
      }
    }
    EXPECT_TRUE(image.PaddingIntact());
  }
}

TEST(ImageOps, ExtremeParameters) {
  ImageOpScratch scratch;
  Image image(13, 4);
  const Image original = image;
  auto each = [&](auto expect) {
    for (int y = 0; y < image.height; ++y) {
      for (int x = 0; x < image.width; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(image.at(y, x, c), expect(original.at(y, x, c)));
        }
      }
    }
    EXPECT_TRUE(image.PaddingIntact());
    image = original;
  };
  AdjustBrightness(image.view(), 0.0);
  each([](int) { return 0; });
  AdjustBrightness(image.view(), 1e9);
  each([](int x) { return x == 0 ? 0 : 255; });
  // A factor beyond float32 is inf there: every blend is NaN, which torchvision writes as 0
  // (torch 1.13 on x86) and C++ may not cast at all.
  AdjustBrightness(image.view(), 1e39);
  each([](int) { return 0; });
  AdjustSaturation(image.view(), 1e39);
  each([](int) { return 0; });
  Posterize(image.view(), 0);
  each([](int) { return 0; });
  Posterize(image.view(), 8);
  each([](int x) { return x; });
  Solarize(image.view(), 0.0);
  each([](int x) { return 255 - x; });
  Solarize(image.view(), 255.5);
  each([](int x) { return x; });
  // Translations by the width or more leave only the fill.
  ApplyPolicyOp(image.view(), PolicyOp::kTranslateX, -13.9, {4, 4, 4}, scratch);
  each([](int) { return 4; });
  ApplyPolicyOp(image.view(), PolicyOp::kTranslateY, 4.0, {4, 4, 4}, scratch);
  each([](int) { return 4; });
  // Contrast 0 is the truncated mean luma everywhere.
  AdjustContrast(image.view(), 0.0);
  const std::uint8_t mean = image.at(0, 0, 0);
  each([&](int) { return mean; });
  Erase(image.view(), {0, 0, 0, 0}, {1, 2, 3});
  each([](int x) { return x; });
}

TEST(ImageOps, RotateByAHalfTurnMirrorsBothAxes) {
  ImageOpScratch scratch;
  // Widths 17 and 40 end the 8-pixel vector loop with a remainder; 2400 x 2340 x 3 bytes
  // pass 2^24, where the offsets leave the float32 vector path.
  for (const auto& [w, h] : {std::pair{8, 6}, std::pair{7, 5}, std::pair{1, 4}, std::pair{17, 3},
                             std::pair{40, 9}, std::pair{2400, 2340}}) {
    Image image(w, h);
    const Image original = image;
    ApplyPolicyOp(image.view(), PolicyOp::kRotate, 180.0, {0, 0, 0}, scratch);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(image.at(y, x, c), original.at(h - 1 - y, w - 1 - x, c));
        }
      }
    }
    EXPECT_TRUE(image.PaddingIntact());
  }
}

TEST(ImageOps, PolicyMagnitudesAtTheEnds) {
  EXPECT_EQ(PolicyMagnitude(PolicyOp::kRotate, 30, 31, true, 224, 224), 135.0);
  EXPECT_EQ(PolicyMagnitude(PolicyOp::kRotate, 0, 31, false, 224, 224), 0.0);
  EXPECT_EQ(PolicyMagnitude(PolicyOp::kSolarize, 0, 31, false, 224, 224), 255.0);
  EXPECT_EQ(PolicyMagnitude(PolicyOp::kPosterize, 30, 31, false, 224, 224), 4.0);
  EXPECT_EQ(PolicyMagnitude(PolicyOp::kPosterize, 30, 31, true, 224, 224), 2.0);
  EXPECT_FALSE(PolicyOpSigned(PolicyOp::kSolarize));
  EXPECT_TRUE(PolicyOpSigned(PolicyOp::kShearY));
}

}  // namespace
}  // namespace tilefeed::codecs
