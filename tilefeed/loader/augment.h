#pragma once

// Augmentation planning: chooses which source rectangle of an image to show and whether to
// flip it, from the image's size alone (known from the JPEG header before decoding). The
// codec then decodes only that rectangle and resizes it; no pixels are touched here.
//
// The choices follow torchvision.transforms (RandomResizedCrop.get_params, Resize +
// CenterCrop, RandomHorizontalFlip), drawing from a SampleRng so that a sample's plan is a
// pure function of (seed, epoch, sample index). Free functions on plain values; safe to call
// concurrently with distinct SampleRng objects.

#include "tilefeed/codecs/image.h"
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

// The source rectangle that torchvision's Resize(resize_shorter) followed by
// CenterCrop(crop_height, crop_width) shows: the crop scaled by
// min(width, height) / resize_shorter, rounded to whole pixels, clamped to the image and
// centred (offsets rounded like torchvision's). Throws std::invalid_argument on bad arguments.
// REQUIRES: width, height, resize_shorter, crop_width, crop_height >= 1.
codecs::Rect CenterCropAfterResize(int width, int height, int resize_shorter, int crop_width,
                                   int crop_height);

// Whether to flip this sample: true with the given probability. Throws std::invalid_argument
// if probability is outside [0, 1].
// REQUIRES: 0 <= probability <= 1.
bool DrawFlip(SampleRng& rng, double probability = 0.5);

}  // namespace tilefeed::loader
