#include "tilefeed/loader/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
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

codecs::CropPlan CenterCropAfterResize(int width, int height, int resize_shorter, int crop_width,
                                       int crop_height, bool dct_scaling) {
  RequireImageSize("CenterCropAfterResize", width, height);
  if (resize_shorter < 1 || crop_width < 1 || crop_height < 1) {
    throw std::invalid_argument(
        "CenterCropAfterResize: resize and crop sizes must be positive, got resize " +
        std::to_string(resize_shorter) + ", crop " + std::to_string(crop_width) + "x" +
        std::to_string(crop_height));
  }
  // torchvision's _compute_resized_output_size: Python's int(new_short * long / short),
  // a correctly rounded division of exact integers, truncated; so is this.
  const std::int64_t shorter = std::min(width, height);
  const std::int64_t longer = std::max(width, height);
  const auto new_long = static_cast<std::int64_t>(static_cast<double>(resize_shorter * longer) /
                                                  static_cast<double>(shorter));
  const std::int64_t new_width = width <= height ? resize_shorter : new_long;
  const std::int64_t new_height = width <= height ? new_long : resize_shorter;
  if (crop_width > new_width || crop_height > new_height) {
    throw std::invalid_argument("CenterCropAfterResize: a " + std::to_string(crop_width) + "x" +
                                std::to_string(crop_height) + " crop does not fit the " +
                                std::to_string(new_width) + "x" + std::to_string(new_height) +
                                " resized image");
  }
  // torchvision's CenterCrop: int(round((size - crop) / 2.0)), in resized pixels.
  const double left = RoundHalfEven(static_cast<double>(new_width - crop_width) / 2.0);
  const double top = RoundHalfEven(static_cast<double>(new_height - crop_height) / 2.0);
  // PIL maps resized pixel i to source [i * s, (i + 1) * s) with s = source / resized.
  const double sx = static_cast<double>(width) / static_cast<double>(new_width);
  const double sy = static_cast<double>(height) / static_cast<double>(new_height);
  codecs::CropPlan plan;
  // (Clamped: (new_width) * sx may round past `width` by an ulp.)
  plan.box = {left * sx, top * sy, std::min((left + crop_width) * sx, double(width)),
              std::min((top + crop_height) * sy, double(height))};
  plan.dct_scaling = dct_scaling;
  // PIL's filter for output i is centred at c = box0 + (i + 1/2) s and reads the pixels
  // [trunc(c - support + 1/2), trunc(c + support + 1/2)), support = max(s, 1). With
  // r = support - s/2 - 1/2, the first output reads from floor(box0 - r) and the last up
  // to, not including, floor(box1 + r + 1), which ceil(box1 + r + 0.01) reaches; the
  // 0.01 also absorbs the rounding of c. The crop is exactly those pixels: the least
  // decoding, with every pixel PIL weighs (a test compares with the whole image decoded
  // and resized). A DCT-scaled decode's pixels are up to max(s, 1) source pixels wide (it
  // scales only while they stay under s): one and a half such pixels more on each side,
  // and half a source pixel for rounding them.
  auto reach = [dct_scaling](double s) {
    const double support = std::max(s, 1.0);
    const double r = support - 0.5 * s - 0.5;
    return (dct_scaling ? r + 0.5 + 1.5 * support : r) + 0.01;
  };
  const double reach_x = reach(sx);
  const double reach_y = reach(sy);
  const auto x0 = static_cast<int>(std::max(0.0, std::floor(plan.box.x0 - reach_x)));
  const auto y0 = static_cast<int>(std::max(0.0, std::floor(plan.box.y0 - reach_y)));
  const auto x1 = static_cast<int>(std::min(double(width), std::ceil(plan.box.x1 + reach_x)));
  const auto y1 = static_cast<int>(std::min(double(height), std::ceil(plan.box.y1 + reach_y)));
  plan.crop = {x0, y0, x1 - x0, y1 - y0};
  return plan;
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
