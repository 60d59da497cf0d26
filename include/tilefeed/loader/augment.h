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

#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/loader/sampler.h"

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

}  // namespace tilefeed::loader
