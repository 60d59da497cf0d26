#pragma once

// Geometry and error types shared by every codec: rectangles in source pixels,
// strided views of caller-owned pixel memory, and the one exception type that codecs
// throw. Plain values; no ownership, no threads.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tilefeed::codecs {

// An axis-aligned rectangle in whole source pixels.
struct Rect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;

  friend bool operator==(const Rect&, const Rect&) = default;
};

// A source rectangle in fractional pixel coordinates: [x0, x1) x [y0, y1), where pixel
// (x, y) covers [x, x+1) x [y, y+1). Fractional edges keep crops exact after DCT scaling.
struct SourceBox {
  double x0 = 0;
  double y0 = 0;
  double x1 = 0;
  double y1 = 0;
};

// A mutable view of caller-owned uint8 pixels. Element (row y, column x, channel c) lives
// at data[y * row_stride + x * pixel_stride + c * channel_stride], so the same view type
// describes an interleaved HWC batch slot and a planar CHW one. The view does not own the
// memory; it is valid as long as the caller's buffer is.
struct PixelView {
  std::uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 3;
  std::ptrdiff_t row_stride = 0;
  std::ptrdiff_t pixel_stride = 3;
  std::ptrdiff_t channel_stride = 1;

  // Interleaved (HWC) pixels; row_stride defaults to width * channels.
  static PixelView Interleaved(std::uint8_t* data, int width, int height, int channels = 3,
                               std::ptrdiff_t row_stride = 0) {
    return {data,
            width,
            height,
            channels,
            row_stride != 0 ? row_stride : std::ptrdiff_t{width} * channels,
            channels,
            1};
  }
  // Planar (CHW) pixels: each channel is a width x height plane, planes back to back.
  static PixelView Planar(std::uint8_t* data, int width, int height, int channels = 3) {
    return {data, width, height, channels, width, 1, std::ptrdiff_t{width} * height};
  }
  bool interleaved() const { return pixel_stride == channels && channel_stride == 1; }
  std::uint8_t* at(int y, int x) const { return data + y * row_stride + x * pixel_stride; }
};

// A read-only interleaved view (decoder scratch, a decoded raw tensor).
struct ConstPixelView {
  const std::uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 3;
  std::ptrdiff_t row_stride = 0;
};

// Why a decode failed; lets callers and tests tell the classes apart without parsing text.
enum class DecodeErrorKind {
  kNotJpeg,          // the bytes are some other format (PNG, GIF, text, empty, ...)
  kTruncated,        // the data ends before the image does
  kCorrupt,          // malformed markers or entropy-coded data
  kTooLarge,         // declared size beyond the configured pixel limit
  kTooManyScans,     // progressive file with more scans than the configured bound
  kUnsupported,      // valid JPEG the decoder does not handle (12-bit, lossless, ...)
  kInvalidArgument,  // crop or output size that does not fit the image
};

const char* ToString(DecodeErrorKind kind);

// A decode failure. what() is a one-line reason (with the C library's own message where
// there is one); the loader prefixes the file path or record id.
class DecodeError : public std::runtime_error {
 public:
  DecodeError(DecodeErrorKind kind, const std::string& reason)
      : std::runtime_error(reason), kind_(kind) {}
  DecodeErrorKind kind() const { return kind_; }

 private:
  DecodeErrorKind kind_;
};

}  // namespace tilefeed::codecs
