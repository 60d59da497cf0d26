#pragma once

// The argument check of every codec's crop decode (jpeg.cc, jpeg_coefficients.cc,
// png.cc), so that all three accept the same crops and say the same when they do not.
// Internal: not installed. Defined in tilefeed/codecs/image.cc.

#include "tilefeed/codecs/image.h"

namespace tilefeed::codecs::detail {

// Whether `crop` is a non-empty rectangle inside a width x height image and `out` a
// non-empty three-channel view of some memory. Never overflows, whatever the ints.
bool CropFits(const Rect& crop, int width, int height, const PixelView& out);

// The kInvalidArgument error for a crop that CropFits refused: "crop WxH+X+Y does not
// fit the WxH <image> or the output is empty", `image` being e.g. "image" or "PNG image".
DecodeError CropDoesNotFit(const Rect& crop, int width, int height, const char* image);

}  // namespace tilefeed::codecs::detail
