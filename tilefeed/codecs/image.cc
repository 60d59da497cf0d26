#include "tilefeed/codecs/image.h"

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
