#include "tilefeed/codecs/image.h"

#include "tilefeed/codecs/detail/crop_check.h"

namespace tilefeed::codecs {

const char* ToString(DecodeErrorKind kind) {
  switch (kind) {
    case DecodeErrorKind::kNotJpeg:
      return "not a JPEG";
    case DecodeErrorKind::kTruncated:
      return "truncated";
    case DecodeErrorKind::kCorrupt:
      return "corrupt";
    case DecodeErrorKind::kTooLarge:
      return "too large";
    case DecodeErrorKind::kTooManyScans:
      return "too many scans";
    case DecodeErrorKind::kUnsupported:
      return "unsupported";
    case DecodeErrorKind::kInvalidArgument:
      return "invalid argument";
  }
  return "unknown";
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

DecodeError CropDoesNotFit(const Rect& crop, int width, int height, const char* image) {
  return DecodeError(DecodeErrorKind::kInvalidArgument,
                     "crop " + std::to_string(crop.width) + "x" + std::to_string(crop.height) +
                         "+" + std::to_string(crop.x) + "+" + std::to_string(crop.y) +
                         " does not fit the " + std::to_string(width) + "x" +
                         std::to_string(height) + " " + image + " or the output is empty");
}

}  // namespace tilefeed::codecs::detail
