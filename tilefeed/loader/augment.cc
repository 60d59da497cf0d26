#include "tilefeed/loader/augment.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tilefeed::loader {
namespace {

// Python's round(): halves go to even. std::nearbyint does the same in the default
// rounding mode, which is what torchvision's int(round(...)) gives; std::lround would not.
double RoundHalfEven(double x) { return std::nearbyint(x); }

void RequireImageSize(const char* function, int width, int height) {
  if (width < 1 || height < 1) {
    throw std::invalid_argument(std::string(function) + ": image size must be positive, got " +
                                std::to_string(width) + "x" + std::to_string(height));
  }
}

void RequireRange(const char* function, const char* name, double min, double max) {
  if (!std::isfinite(min) || !std::isfinite(max) || min <= 0 || min > max) {
    throw std::invalid_argument(std::string(function) + ": " + name +
                                " range must satisfy 0 < min <= max, got [" + std::to_string(min) +
                                ", " + std::to_string(max) + "]");
  }
}

// Rounds a positive length to whole pixels in [1, limit].
int ClampLength(double length, int limit) {
  return static_cast<int>(std::clamp(RoundHalfEven(length), 1.0, static_cast<double>(limit)));
}

}  // namespace

codecs::Rect RandomResizedCrop(int width, int height, const RandomResizedCropParams& params,
                               SampleRng& rng) {
  RequireImageSize("RandomResizedCrop", width, height);
  RequireRange("RandomResizedCrop", "scale", params.scale_min, params.scale_max);
  RequireRange("RandomResizedCrop", "ratio", params.ratio_min, params.ratio_max);

  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_ratio_min = std::log(params.ratio_min);
  const double log_ratio_max = std::log(params.ratio_max);
  // Draw order (area, ratio, then y before x) mirrors torchvision, so the two consume
  // their streams in the same pattern.
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area =
        area * (params.scale_min + (params.scale_max - params.scale_min) * rng.Uniform());
    const double aspect_ratio =
        std::exp(log_ratio_min + (log_ratio_max - log_ratio_min) * rng.Uniform());
    // Compared as doubles: a huge scale_max may not fit in an int.
    const double w = RoundHalfEven(std::sqrt(target_area * aspect_ratio));
    const double h = RoundHalfEven(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int crop_width = static_cast<int>(w);
      const int crop_height = static_cast<int>(h);
      const auto y = static_cast<int>(rng.UniformInt(0, height - crop_height));
      const auto x = static_cast<int>(rng.UniformInt(0, width - crop_width));
      return {x, y, crop_width, crop_height};
    }
  }

  // Fallback: the largest central crop whose aspect ratio is inside the range. Clamping to
  // at least one pixel only matters for extreme ratio ranges on tiny images.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int crop_width = width;
  int crop_height = height;
  if (in_ratio < params.ratio_min) {
    crop_height = ClampLength(width / params.ratio_min, height);
  } else if (in_ratio > params.ratio_max) {
    crop_width = ClampLength(height * params.ratio_max, width);
  }
  return {(width - crop_width) / 2, (height - crop_height) / 2, crop_width, crop_height};
}

codecs::Rect CenterCropAfterResize(int width, int height, int resize_shorter, int crop_width,
                                   int crop_height) {
  RequireImageSize("CenterCropAfterResize", width, height);
  if (resize_shorter < 1 || crop_width < 1 || crop_height < 1) {
    throw std::invalid_argument(
        "CenterCropAfterResize: resize and crop sizes must be positive, got resize " +
        std::to_string(resize_shorter) + ", crop " + std::to_string(crop_width) + "x" +
        std::to_string(crop_height));
  }
  // One scale for both axes: the resize keeps the aspect ratio, so a crop_width x
  // crop_height window of the resized image is this many source pixels on each axis.
  const double scale = static_cast<double>(std::min(width, height)) / resize_shorter;
  const int source_width = ClampLength(crop_width * scale, width);
  const int source_height = ClampLength(crop_height * scale, height);
  // torchvision's CenterCrop places the window at int(round((size - crop) / 2)).
  const auto x = static_cast<int>(RoundHalfEven((width - source_width) / 2.0));
  const auto y = static_cast<int>(RoundHalfEven((height - source_height) / 2.0));
  return {x, y, source_width, source_height};
}

bool DrawFlip(SampleRng& rng, double probability) {
  if (!(probability >= 0.0 && probability <= 1.0)) {
    throw std::invalid_argument("DrawFlip: probability must be in [0, 1], got " +
                                std::to_string(probability));
  }
  // Uniform() < 1 always, so probability 1 always flips and 0 never does.
  return rng.Uniform() < probability;
}

}  // namespace tilefeed::loader
