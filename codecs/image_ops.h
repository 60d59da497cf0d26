#pragma once

// Per-sample pixel operations of the augmentation recipes, computing what
// torchvision.transforms.functional computes on a uint8 CHW tensor (torchvision 0.14):
// ColorJitter's four adjustments, RandomGrayscale, RandomErasing's erase, and the ops of
// RandAugment and TrivialAugmentWide (autoaugment.py's _apply_op).
//
// Each function changes one interleaved RGB image in place. The caller passes every
// parameter already drawn: nothing here draws random numbers, so the result is a pure
// function of the pixels and the parameters. Memory an op needs beyond the image (a copy
// for the geometric ops and Sharpness) is the caller's ImageOpScratch, which grows to the
// largest image once; a warmed-up worker does not allocate.
//
// Parity: torchvision's results within one level a value and 0.5/255 on average (ctest
// codecs_image_ops_parity, tests/codecs/test_image_ops.py; measured: equal everywhere).
//
// Thread safety: pure functions; one ImageOpScratch per thread.

#include <array>
#include <cstdint>
#include <numbers>
#include <vector>

#include "tilefeed/codecs/image.h"

namespace tilefeed::codecs {

// Caller-owned working memory, reused between calls.
struct ImageOpScratch {
  std::vector<std::uint8_t> bytes;
};

// One value per channel (RGB): an erase value or the geometric ops' fill (torch rounds a
// float fill half to even).
using Rgb = std::array<std::uint8_t, 3>;

// Every function's image: REQUIRES image.interleaved(), image.channels == 3,
// image.width > 0, image.height > 0.

// F.adjust_brightness: x * factor. REQUIRES factor >= 0.
void AdjustBrightness(const PixelView& image, double factor);
// F.adjust_contrast: blends each value with the mean of the grayscale image.
// REQUIRES factor >= 0.
void AdjustContrast(const PixelView& image, double factor);
// F.adjust_saturation: blends each pixel with its grayscale value. REQUIRES factor >= 0.
void AdjustSaturation(const PixelView& image, double factor);
// F.adjust_hue: rotates the hue by hue_factor turns. REQUIRES -0.5 <= hue_factor <= 0.5.
void AdjustHue(const PixelView& image, double hue_factor);
// F.adjust_sharpness: blends with the image smoothed by torchvision's 3x3 kernel (its
// border rows and columns kept). REQUIRES factor >= 0.
void AdjustSharpness(const PixelView& image, double factor, ImageOpScratch& scratch);
// F.rgb_to_grayscale(num_output_channels=3): each channel becomes the pixel's luma.
void Grayscale(const PixelView& image);
// F.posterize: keeps the top `bits` bits of each value. REQUIRES 0 <= bits <= 8.
void Posterize(const PixelView& image, int bits);
// F.solarize: inverts every value >= threshold.
void Solarize(const PixelView& image, double threshold);
// F.autocontrast: stretches each channel to [0, 255].
void AutoContrast(const PixelView& image);
// F.equalize: equalizes each channel's histogram.
void Equalize(const PixelView& image);
// F.erase with a constant value per channel (RandomErasing's value=v or (r, g, b);
// value="random" is not supported). The float value torchvision assigns to a uint8
// tensor is truncated: pass static_cast<uint8_t>(v).
// REQUIRES: rect lies inside the image.
void Erase(const PixelView& image, const Rect& rect, Rgb value);

// The ops of RandAugment and TrivialAugmentWide, in the order of torchvision's
// augmentation space (both policies list the same 14 ops in this order), so that the
// policy's draw op_index picks PolicyOp(op_index).
enum class PolicyOp {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
};
inline constexpr int kPolicyOps = 14;

// The magnitude torchvision's policy gives `op` at bin `bin` of num_bins (unsigned; the
// policy negates it on its sign draw for the signed ops): RandAugment's table, or
// TrivialAugmentWide's when `wide`, as float32 values (torch.linspace) widened to double.
// height and width are the image's (RandAugment's translations scale with them).
// REQUIRES 0 <= bin < num_bins, num_bins >= 2.
double PolicyMagnitude(PolicyOp op, int bin, int num_bins, bool wide, int height, int width);
// Whether the policy draws a sign for `op` (the geometric and blend ops).
bool PolicyOpSigned(PolicyOp op);

// autoaugment.py's _apply_op(img, op, magnitude, NEAREST, fill): the geometric ops are
// torchvision's affine/rotate with nearest sampling about its centres (ShearX/Y about the
// top-left corner, Rotate and TranslateX/Y about the image centre) and `fill` where the
// source lies outside the image (fill=None is {0, 0, 0}).
void ApplyPolicyOp(const PixelView& image, PolicyOp op, double magnitude, Rgb fill,
                   ImageOpScratch& scratch);

namespace detail {  // image_geometry.cc: ApplyPolicyOp's geometric ops
inline constexpr double kDegToRad = std::numbers::pi / 180.0;  // Python's math.radians
// torchvision's affine grid and grid_sample(mode="nearest", align_corners=False) in float32
// for the inverse matrix `m` (output pixel -> source pixel, about the image centre).
void AffineNearest(const PixelView& image, const double (&m)[6], Rgb fill, ImageOpScratch& scratch);
// By whole pixels (torchvision's grid lands on them): row moves, in place.
void Translate(const PixelView& image, int dx, int dy, Rgb fill);
// _get_inverse_affine_matrix(center, angle, translate=0, scale=1, shear), in degrees.
void InverseAffine(double cx, double cy, double angle, double shear_x, double shear_y,
                   double (&m)[6]);
}  // namespace detail

}  // namespace tilefeed::codecs
