#include "tilefeed/codecs/image.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>

#include "codecs/crop_check.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::codecs {

const char* ToString(DecodeErrorKind kind) {
  static constexpr const char* kNames[] = {"not a JPEG",      "truncated",      "corrupt",
                                           "too large",       "too many scans", "unsupported",
                                           "invalid argument"};
  const auto i = static_cast<std::size_t>(kind);  // in DecodeErrorKind's order
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

SourceBox ShownBox(const CropPlan& plan) {
  const SourceBox& b = plan.box;
  if (b.x1 > b.x0 && b.y1 > b.y0) return b;
  const Rect& c = plan.crop;
  return {double(c.x), double(c.y), double(c.x) + c.width, double(c.y) + c.height};
}

bool BoxInsideCrop(const CropPlan& plan) {
  const SourceBox& b = plan.box;
  if (!(b.x1 > b.x0 && b.y1 > b.y0)) return true;
  const Rect& c = plan.crop;
  return b.x0 >= c.x && b.y0 >= c.y && b.x1 <= double(c.x) + c.width &&
         b.y1 <= double(c.y) + c.height;
}

int PlanScaleEighths(const CropPlan& plan, int out_width, int out_height, DecodeScaling scaling) {
  if (!plan.dct_scaling) return 8;
  const SourceBox b = ShownBox(plan);
  return ChooseScaleEighths(static_cast<int>(b.x1 - b.x0), static_cast<int>(b.y1 - b.y0), out_width,
                            out_height, scaling);
}

}  // namespace tilefeed::codecs

namespace tilefeed::codecs::detail {

bool CropFits(const Rect& crop, int width, int height, const PixelView& out) {
  // x > width - w rather than x + w > width: the sum may overflow, the difference of two
  // non-negative ints cannot.
  return crop.width > 0 && crop.height > 0 && crop.x >= 0 && crop.y >= 0 &&
         crop.x <= width - crop.width && crop.y <= height - crop.height && out.width > 0 &&
         out.height > 0 && out.channels == 3 && out.data != nullptr;
}

bool PlanFits(const CropPlan& plan, int width, int height, const PixelView& out) {
  return CropFits(plan.crop, width, height, out) && BoxInsideCrop(plan);
}

PlanWindow WindowFor(const CropPlan& plan, int n, double origin_x, double origin_y,
                     double limit_width, double limit_height) {
  const double scale = n / 8.0;
  const Rect& c = plan.crop;
  const double wx0 = c.x * scale - origin_x;
  const double wy0 = c.y * scale - origin_y;
  const double wx1 = std::min((double(c.x) + c.width) * scale - origin_x, limit_width);
  const double wy1 = std::min((double(c.y) + c.height) * scale - origin_y, limit_height);
  PlanWindow w{static_cast<int>(wx0),
               static_cast<int>(wy0),
               static_cast<int>(std::ceil(wx1)),
               static_cast<int>(std::ceil(wy1)),
               {}};
  // The crop's edges are fractional after DCT scaling; so are the box's, always.
  const SourceBox b = ShownBox(plan);
  w.box = {b.x0 * scale - origin_x - w.x0, b.y0 * scale - origin_y - w.y0,
           std::min(b.x1 * scale - origin_x, wx1) - w.x0,
           std::min(b.y1 * scale - origin_y, wy1) - w.y0};
  return w;
}

DecodeError CropDoesNotFit(const Rect& crop, int width, int height, const char* image) {
  return DecodeError(DecodeErrorKind::kInvalidArgument,
                     "crop " + std::to_string(crop.width) + "x" + std::to_string(crop.height) +
                         "+" + std::to_string(crop.x) + "+" + std::to_string(crop.y) +
                         " does not fit the " + std::to_string(width) + "x" +
                         std::to_string(height) + " " + image + " or the output is empty");
}

}  // namespace tilefeed::codecs::detail
