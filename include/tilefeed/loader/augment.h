#pragma once

// Augmentation planning: chooses which source rectangle of an image to show and whether to
// flip it, from the image's size alone (known from the JPEG header before decoding). The
// codec then decodes only that rectangle and resizes it; no pixels are touched here.
//
// The choices follow torchvision.transforms (RandomResizedCrop.get_params, Resize +
// CenterCrop, RandomHorizontalFlip), drawing from a SampleRng so that a sample's plan is a
// pure function of (seed, epoch, sample index). Free functions on plain values; safe to call
// concurrently with distinct SampleRng objects.
//
// The pixel contracts (python/tests/test_torchvision_pixels.py checks both on JPEGs of every
// subsampling, progressive JPEGs and PNGs; bench/torchvision_pixels.py on real photos):
//  * Eval (CenterCropAfterResize, dct_scaling false, the loader's default): a batch row is
//    torchvision's Resize(R) + CenterCrop(S) of the PIL image (antialiased bilinear) to
//    within 2 levels per pixel (the two resizers' fixed-point rounding; 1 on every photo
//    measured), mean |d| under 0.5/255.
//  * Train (RandomResizedCrop): a row is
//    torchvision.transforms.functional.resized_crop(img, y, x, h, w, size, antialias=True)
//    for the rectangle drawn (loader::PlanSample gives it), flipped when drawn, to the same
//    bound unless the crop of a JPEG is at least twice the output on both sides: such a
//    crop is decoded at a DCT scale-down (JpegOptions::scales) and differs by a few levels
//    (figures in docs/design.md).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/loader/sampler.h"

namespace tilefeed::codecs {
struct ImageOpScratch;  // codecs/image_ops.h
}  // namespace tilefeed::codecs

namespace tilefeed::loader {

// Ranges for RandomResizedCrop, with torchvision's defaults.
struct RandomResizedCropParams {
  double scale_min = 0.08;       // smallest crop area, as a fraction of the image area
  double scale_max = 1.0;        // largest crop area, as a fraction of the image area
  double ratio_min = 3.0 / 4.0;  // smallest crop aspect ratio, width / height
  double ratio_max = 4.0 / 3.0;  // largest crop aspect ratio, width / height
};

// A random crop as torchvision's RandomResizedCrop.get_params chooses it: up to 10 attempts
// of an area fraction uniform in [scale_min, scale_max) and an aspect ratio log-uniform in
// [ratio_min, ratio_max), accepted when it fits, placed uniformly; otherwise a central crop
// clamped to the ratio range. The result is non-empty and inside the image. Throws
// std::invalid_argument on bad arguments.
// REQUIRES: width >= 1, height >= 1, 0 < scale_min <= scale_max,
// 0 < ratio_min <= ratio_max, all finite.
codecs::Rect RandomResizedCrop(int width, int height, const RandomResizedCropParams& params,
                               SampleRng& rng);

// torchvision's Resize(resize_shorter) followed by CenterCrop((crop_height, crop_width))
// on a PIL image, as one resample (no pixel is resized twice). Resize scales the shorter
// side to resize_shorter and the longer to int(resize_shorter * long / short) (truncated),
// each axis by its own factor; CenterCrop places the window at
// int(round((resized - crop) / 2)) resized pixels (halves to even). The plan's `box` is that
// window in fractional source pixels, and `crop` exactly the whole source pixels the
// bilinear filter reads around it (the box widened by the filter's reach, clipped to the
// image), so a crop decode's pixels are those of the whole image decoded and its box
// resized, bit for bit, and PIL's up to the last bit of fixed-point rounding. No flip.
// dct_scaling is copied into the plan: false (torchvision's pixels) makes the JPEG
// decoders decode at full size; true lets them scale down by DCT (and widens `crop` for
// the coarser pixels they then resize).
// Throws std::invalid_argument on bad arguments, or when the crop is larger than the
// resized image (torchvision would pad it with zeros; the loader never asks for that).
// REQUIRES: width, height, resize_shorter, crop_width, crop_height >= 1.
codecs::CropPlan CenterCropAfterResize(int width, int height, int resize_shorter, int crop_width,
                                       int crop_height, bool dct_scaling = false);

// Whether to flip this sample: true with the given probability. Throws std::invalid_argument
// if probability is outside [0, 1].
// REQUIRES: 0 <= probability <= 1.
bool DrawFlip(SampleRng& rng, double probability = 0.5);

// ---- The augment spec (LoaderOptions::augment; docs/augment.md) ---------------------------
// An ordered list of torchvision's transforms, written as Python writes them, one text form
// everywhere (--augment, Python's repr, the reader/trainer terms):
//   "RandomResizedCrop(), RandomHorizontalFlip(), RandAugment(2, 9), RandomErasing(p=0.25)"
// Train mode: the list starts with RandomResizedCrop (the crop is planned before the decode),
// optionally RandomHorizontalFlip next, then pixel ops, applied in order to the uint8 crop.

enum class AugmentKind {
  kRandomResizedCrop,     // scale, ratio (size is the loader's image size)
  kRandomHorizontalFlip,  // p
  kColorJitter,           // brightness, contrast, saturation, hue
  kRandAugment,           // num_ops, magnitude, num_magnitude_bins, fill
  kTrivialAugmentWide,    // num_magnitude_bins, fill
  kRandomErasing,         // p, scale, ratio, value
  kRandomGrayscale,       // p
};

// One transform with torchvision's parameters; a kind uses only its own (listed above), the
// others stay 0. Integers (num_ops, magnitude, bins, fill, value) are whole doubles.
struct AugmentOp {
  AugmentKind kind = AugmentKind::kRandomResizedCrop;
  double p = 0;
  double scale_min = 0, scale_max = 0, ratio_min = 0, ratio_max = 0;
  // ColorJitter's factor ranges, torchvision's (min, max): a number x in the text is
  // (max(0, 1 - x), 1 + x), for hue (-x, x); a range of just (1, 1), hue (0, 0), is off.
  double brightness_min = 0, brightness_max = 0, contrast_min = 0, contrast_max = 0;
  double saturation_min = 0, saturation_max = 0, hue_min = 0, hue_max = 0;
  double num_ops = 0, magnitude = 0, num_magnitude_bins = 0;
  double fill = 0;  // RandAugment's and TrivialAugmentWide's fill, RandomErasing's value
  friend bool operator==(const AugmentOp&, const AugmentOp&) = default;
};
using AugmentSpec = std::vector<AugmentOp>;

// The op `kind` with torchvision's defaults.
AugmentOp DefaultOp(AugmentKind kind);

// [RandomResizedCrop(), RandomHorizontalFlip()]: the loader's default.
AugmentSpec DefaultAugment();

// Parses the text form: ops separated by commas, each Name(args) with positional (in
// torchvision's order) or keyword arguments, numbers or (min, max) pairs; optionally in
// [brackets]; "" is no ops. Throws std::invalid_argument: one line naming the op and why.
AugmentSpec ParseAugmentSpec(std::string_view text);

// The canonical text: each op by name with its non-default parameters as keywords
// ("RandomResizedCrop(), RandAugment(magnitude=5)"); ParseAugmentSpec reads it back.
std::string AugmentSpecText(const AugmentSpec& spec);

// nullopt, or why `spec` cannot drive a train-mode loader (its order, a range).
std::optional<std::string> AugmentProblem(const AugmentSpec& spec);

// ---- Drawn pixel ops ---------------------------------------------------------------------
// What a sample's pixel ops drew: torchvision calls on its uint8 crop, in order. kPolicy is
// autoaugment.py's _apply_op(img, name, magnitude, NEAREST, fill) with `policy_op` the index
// in RandAugment's augmentation space (Identity, ShearX, ..., Equalize; codecs::PolicyOp) and
// `value` the signed magnitude; the others are transforms.functional calls: adjust_brightness,
// _contrast, _saturation with factor `value`, adjust_hue with hue_factor `value`,
// rgb_to_grayscale, and erase of `area` (j = x, i = y) with the value `fill`.
enum class PixelOpKind { kPolicy, kBrightness, kContrast, kSaturation, kHue, kGrayscale, kErase };
struct PixelOp {
  PixelOpKind kind = PixelOpKind::kPolicy;
  int policy_op = 0;
  double value = 0;
  int fill = 0;
  codecs::Rect area;
};

// The call's name: the policy op's ("Rotate"), else the function's ("adjust_hue", "erase").
std::string_view PixelOpName(const PixelOp& op);

// The pixel ops of `spec` (its ops after the crop and flip) for a width x height output,
// drawn from `rng` with torchvision's sampling (docs/augment.md), after the crop and flip.
std::vector<PixelOp> DrawPixelOps(const AugmentSpec& spec, int width, int height, SampleRng& rng);

// Applies `ops` in order to the interleaved RGB image `image` (torchvision's uint8 kernels,
// codecs/image_ops.h); `scratch` is the caller's, reused between calls.
void ApplyPixelOps(std::span<const PixelOp> ops, const codecs::PixelView& image,
                   codecs::ImageOpScratch& scratch);

}  // namespace tilefeed::loader
