#pragma once

// Resampling and mirroring kernels for uint8 RGB images.
//
// Resizer resamples a fractional source box to an exact output size with the same
// filter torchvision applies to PIL images for RandomResizedCrop and Resize: PIL's
// antialiased bilinear ("triangle") filter, whose support widens with the downscale
// factor so that shrinking averages every covered pixel instead of sampling a few.
// It is separable and fixed-point; the weights and the intermediate buffer are kept
// between calls, so a warmed-up Resizer does not allocate.
//
// Thread safety: a Resizer is used by one thread at a time (one per decode worker).
// The free functions are stateless.

#include <cstdint>
#include <memory>

#include "tilefeed/codecs/image.h"

namespace tilefeed::codecs {

class Resizer {
 public:
  Resizer();
  // portable_kernels: the SSE2 kernels even where the CPU has the AVX2 ones. The same
  // output; for tests (CoefficientDecoder passes its own portable_kernels on).
  explicit Resizer(bool portable_kernels);
  ~Resizer();
  Resizer(Resizer&&) noexcept;
  Resizer& operator=(Resizer&&) noexcept;

  // Resamples `box` of `src` to dst.width x dst.height and writes it into `dst`,
  // mirrored left-right when `flip` is set. Writes every pixel of dst and nothing else.
  // The result depends only on where the box lies on the pixel grid: a window of a larger
  // image, starting at a whole pixel and holding every pixel the filter reads, with the
  // box moved by the window's origin, gives exactly the larger image's result.
  // REQUIRES: src.channels == dst.channels == 3; 0 <= box.x0 < box.x1 <= src.width and
  // 0 <= box.y0 < box.y1 <= src.height; dst.width, dst.height > 0; src and dst do not
  // overlap.
  void Resize(const ConstPixelView& src, const SourceBox& box, const PixelView& dst,
              bool flip = false);

  // The same resize for a source whose rows arrive one after another (a JPEG decoder's
  // scanlines), so that no whole source image has to be kept: Start() sets up the
  // filters for a src_width x src_height source; then, for each output row y in order,
  // ResizeRow(y, rows) writes row y of dst from the source rows [FirstRow(y), EndRow(y)),
  // rows[k] being row FirstRow(y) + k (each pointing at column 0). FirstRow and EndRow
  // never decrease with y, so a ring of MaxRows() + n rows lets the source run n rows
  // ahead. The output is identical to Resize()'s.
  // REQUIRES: as Resize, with src_width x src_height for src; ResizeRow after Start.
  void Start(int src_width, int src_height, const SourceBox& box, const PixelView& dst,
             bool flip = false);
  int FirstRow(int y) const;
  int EndRow(int y) const;
  int MaxRows() const;
  void ResizeRow(int y, const std::uint8_t* const* rows);

 private:
  struct Scratch;
  std::unique_ptr<Scratch> scratch_;
  bool portable_kernels_ = false;
};

// Copies `src` (same size as dst) into `dst`, mirrored left-right when `flip` is set.
// Converts between layouts (HWC <-> CHW) as the two views describe.
// REQUIRES: src.width == dst.width, src.height == dst.height, src.channels == dst.channels.
void CopyPixels(const ConstPixelView& src, const PixelView& dst, bool flip = false);

}  // namespace tilefeed::codecs
