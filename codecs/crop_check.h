#pragma once

// The argument check of every codec's crop decode (jpeg.cc, jpeg_coefficients.cc,
// png.cc), so that all three accept the same crops and say the same when they do not.
// Internal: not installed. Defined in codecs/image.cc.

#include "tilefeed/codecs/image.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::codecs::detail {

// Whether `crop` is a non-empty rectangle inside a width x height image and `out` a
// non-empty three-channel view of some memory. Never overflows, whatever the ints.
bool CropFits(const Rect& crop, int width, int height, const PixelView& out);

// CropFits for plan.crop, and plan.box (when set) inside plan.crop.
bool PlanFits(const CropPlan& plan, int width, int height, const PixelView& out);

// Where a plan's resize reads, at DCT scale n/8, in decoded pixels whose (0, 0) is scaled
// pixel (origin_x, origin_y) and of which at most limit_width x limit_height exist: the
// whole pixels [x0, x1) x [y0, y1) the filter may read (plan.crop's), and the shown box
// relative to (x0, y0). Every codec resizes through this, so all give the same pixels.
struct PlanWindow {
  int x0, y0, x1, y1;
  SourceBox box;
};
PlanWindow WindowFor(const CropPlan& plan, int n, double origin_x, double origin_y,
                     double limit_width, double limit_height);

// The kInvalidArgument error for a crop that CropFits refused: "crop WxH+X+Y does not
// fit the WxH <image> or the output is empty", `image` being e.g. "image" or "PNG image".
DecodeError CropDoesNotFit(const Rect& crop, int width, int height, const char* image);

}  // namespace tilefeed::codecs::detail
