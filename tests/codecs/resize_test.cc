#include "codecs/resize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tilefeed::codecs {
namespace {

// A tightly packed HWC RGB image. Tests hand the resizer exactly this many bytes, so
// ASan reports any read past the end of a source row.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;

  Image(int w, int h) : width(w), height(h), pixels(static_cast<std::size_t>(w) * h * 3) {}
  ConstPixelView view() const {
    return {pixels.data(), width, height, 3, static_cast<std::ptrdiff_t>(width) * 3};
  }
  std::uint8_t at(int y, int x, int c) const {
    return pixels[(static_cast<std::size_t>(y) * width + x) * 3 + c];
  }
};

Image RandomImage(int width, int height, std::uint32_t seed) {
  Image image(width, height);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& p : image.pixels) p = static_cast<std::uint8_t>(byte(rng));
  return image;
}

// Smooth content with a few hard edges: closer to photographs than noise, and it makes
// a misplaced filter visible even where noise would average out.
Image PatternImage(int width, int height) {
  Image image(width, height);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      std::uint8_t* p = &image.pixels[(static_cast<std::size_t>(y) * width + x) * 3];
      p[0] = static_cast<std::uint8_t>((x * 255) / std::max(width - 1, 1));
      p[1] = static_cast<std::uint8_t>((y * 255) / std::max(height - 1, 1));
      p[2] = ((x / 3 + y / 5) % 2 == 0) ? 230 : 20;
    }
  }
  return image;
}

struct Tap {
  int index;
  double weight;
};

// The filter written straight from its definition, in double precision: for output i,
// center = box0 + (i + 0.5) * box_len / out, and every source pixel j of the image (not
// just of the box) weighs triangle((j + 0.5 - center) / max(scale, 1)), normalized.
std::vector<std::vector<Tap>> ReferenceWeights(int in_size, double box0, double box1,
                                               int out_size) {
  const double scale = (box1 - box0) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  std::vector<std::vector<Tap>> filters(out_size);
  for (int i = 0; i < out_size; ++i) {
    const double center = box0 + (i + 0.5) * scale;
    double total = 0;
    for (int j = 0; j < in_size; ++j) {
      const double d = std::fabs((j + 0.5 - center) / filter_scale);
      if (d < 1.0) {
        filters[i].push_back({j, 1.0 - d});
        total += 1.0 - d;
      }
    }
    for (Tap& tap : filters[i]) tap.weight /= total;
  }
  return filters;
}

// Separable, with no rounding until the end.
Image ReferenceResize(const Image& src, const SourceBox& box, int out_w, int out_h) {
  const auto wx = ReferenceWeights(src.width, box.x0, box.x1, out_w);
  const auto wy = ReferenceWeights(src.height, box.y0, box.y1, out_h);
  std::vector<double> rows(static_cast<std::size_t>(src.height) * out_w * 3, 0.0);
  for (int sy = 0; sy < src.height; ++sy) {
    for (int x = 0; x < out_w; ++x) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (const Tap& tap : wx[x]) sum += tap.weight * src.at(sy, tap.index, c);
        rows[(static_cast<std::size_t>(sy) * out_w + x) * 3 + c] = sum;
      }
    }
  }
  Image out(out_w, out_h);
  for (int y = 0; y < out_h; ++y) {
    for (int i = 0; i < out_w * 3; ++i) {
      double sum = 0;
      for (const Tap& tap : wy[y])
        sum += tap.weight * rows[static_cast<std::size_t>(tap.index) * out_w * 3 + i];
      out.pixels[static_cast<std::size_t>(y) * out_w * 3 + i] =
          static_cast<std::uint8_t>(std::clamp(std::floor(sum + 0.5), 0.0, 255.0));
    }
  }
  return out;
}

Image RunResize(Resizer& resizer, const Image& src, const SourceBox& box, int out_w, int out_h,
                bool flip = false) {
  Image out(out_w, out_h);
  resizer.Resize(src.view(), box, PixelView::Interleaved(out.pixels.data(), out_w, out_h), flip);
  return out;
}

int MaxAbsDiff(const Image& a, const Image& b) {
  int worst = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) {
    worst = std::max(worst, std::abs(int{a.pixels[i]} - int{b.pixels[i]}));
  }
  return worst;
}

std::string Describe(const Image& src, const SourceBox& box, int out_w, int out_h) {
  return std::to_string(src.width) + "x" + std::to_string(src.height) + " box [" +
         std::to_string(box.x0) + "," + std::to_string(box.x1) + ")x[" + std::to_string(box.y0) +
         "," + std::to_string(box.y1) + ") -> " + std::to_string(out_w) + "x" +
         std::to_string(out_h);
}

void ExpectMatchesReference(Resizer& resizer, const Image& src, const SourceBox& box, int out_w,
                            int out_h) {
  const Image got = RunResize(resizer, src, box, out_w, out_h);
  const Image want = ReferenceResize(src, box, out_w, out_h);
  EXPECT_LE(MaxAbsDiff(got, want), 1) << Describe(src, box, out_w, out_h);
}

SourceBox Whole(const Image& image) {
  return {0, 0, static_cast<double>(image.width), static_cast<double>(image.height)};
}

TEST(ResizeTest, DownscaleByIntegerFactorsMatchesReference) {
  Resizer resizer;
  for (int factor = 1; factor <= 8; ++factor) {
    const Image src = RandomImage(9 * factor, 7 * factor, factor);
    ExpectMatchesReference(resizer, src, Whole(src), 9, 7);
    const Image pattern = PatternImage(9 * factor + 1, 7 * factor + 3);
    ExpectMatchesReference(resizer, pattern, Whole(pattern), 9, 7);
  }
}

TEST(ResizeTest, DownscaleByFractionalFactorsMatchesReference) {
  Resizer resizer;
  const Image src = RandomImage(97, 61, 7);
  for (const auto& [w, h] : {std::pair{80, 50}, {33, 47}, {13, 5}, {96, 60}, {49, 31}, {2, 3}}) {
    ExpectMatchesReference(resizer, src, Whole(src), w, h);
  }
}

TEST(ResizeTest, UpscaleMatchesReference) {
  Resizer resizer;
  const Image src = RandomImage(7, 5, 11);
  ExpectMatchesReference(resizer, src, Whole(src), 31, 17);
  ExpectMatchesReference(resizer, src, Whole(src), 8, 40);
  const Image dot = RandomImage(1, 1, 12);
  ExpectMatchesReference(resizer, dot, Whole(dot), 5, 3);
  // Upscale on one axis and downscale on the other.
  const Image wide = RandomImage(40, 6, 13);
  ExpectMatchesReference(resizer, wide, Whole(wide), 9, 23);
}

TEST(ResizeTest, IdentitySizeReturnsTheImageExactly) {
  Resizer resizer;
  for (const auto& [w, h] : {std::pair{1, 1}, {3, 2}, {17, 9}, {64, 48}, {224, 224}}) {
    const Image src = RandomImage(w, h, w * 100 + h);
    const Image out = RunResize(resizer, src, Whole(src), w, h);
    EXPECT_EQ(out.pixels, src.pixels) << w << "x" << h;
  }
}

TEST(ResizeTest, WholePixelCropAtScaleOneIsACopy) {
  Resizer resizer;
  const Image src = RandomImage(40, 30, 5);
  const Image out = RunResize(resizer, src, {5, 7, 25, 19}, 20, 12);
  for (int y = 0; y < 12; ++y) {
    for (int x = 0; x < 20; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(out.at(y, x, c), src.at(y + 7, x + 5, c)) << y << "," << x;
      }
    }
  }
}

TEST(ResizeTest, FractionalBoxesMatchReference) {
  Resizer resizer;
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> out_size(1, 24);
  for (int trial = 0; trial < 150; ++trial) {
    const int w = 1 + static_cast<int>(unit(rng) * 60);
    const int h = 1 + static_cast<int>(unit(rng) * 60);
    const Image src = RandomImage(w, h, trial);
    double x0 = unit(rng) * w, x1 = unit(rng) * w;
    double y0 = unit(rng) * h, y1 = unit(rng) * h;
    if (x0 > x1) std::swap(x0, x1);
    if (y0 > y1) std::swap(y0, y1);
    if (x1 - x0 < 0.05 || y1 - y0 < 0.05) continue;
    ExpectMatchesReference(resizer, src, {x0, y0, x1, y1}, out_size(rng), out_size(rng));
  }
}

// A window of an image that holds every pixel the filter reads resizes a box bit for bit
// as the whole image does, wherever the window starts: a region decode, an indexed pack's
// sub-image and a coefficient record's columns all hand the resizer such a window, with
// the box moved by the window's whole-pixel origin, and their batches must equal the
// folder's. The boxes are eval's (Resize(N) + CenterCrop(O): edges at whole resized
// pixels times source/N, e.g. 12 * 256/80 = 38.4). Measured from the image's column 0,
// a filter centre such as 38.4 + 1.6 rounded to exactly 40 in one frame and not in
// another; weights that fall exactly on a rounding tie then came out one step apart,
// and now and then an output pixel one level off.
TEST(ResizeTest, AWindowResizesABoxExactlyAsTheWholeImage) {
  Resizer resizer;
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> source_size(100, 700);
  std::uniform_int_distribution<int> resized_size(24, 96);
  for (int trial = 0; trial < 200; ++trial) {
    const int width = source_size(rng);
    const int height = source_size(rng);
    const Image src = RandomImage(width, height, trial);
    const int new_w = resized_size(rng);
    const int new_h = resized_size(rng);
    const int out_w = new_w * 7 / 8;
    const int out_h = new_h * 7 / 8;
    const double sx = double(src.width) / new_w;
    const double sy = double(src.height) / new_h;
    const int left = (new_w - out_w) / 2;
    const int top = (new_h - out_h) / 2;
    const SourceBox box{left * sx, top * sy, (left + out_w) * sx, (top + out_h) * sy};
    std::vector<std::uint8_t> whole(static_cast<std::size_t>(out_w) * out_h * 3);
    resizer.Resize(src.view(), box, PixelView::Interleaved(whole.data(), out_w, out_h));

    // Windows from every origin up to the first pixel the filter reads (the first output's
    // centre, box0 + s/2, less the support max(s, 1), rounded half up), one short of it to
    // stay clear of rounding.
    auto first_read = [](double box0, double s) {
      return static_cast<int>(std::floor(box0 + s / 2 - std::max(s, 1.0) + 0.5)) - 1;
    };
    const int last_x = first_read(box.x0, sx);
    const int last_y = first_read(box.y0, sy);
    const int x1 = std::min(src.width, static_cast<int>(std::ceil(box.x1 + sx)) + 2);
    const int y1 = std::min(src.height, static_cast<int>(std::ceil(box.y1 + sy)) + 2);
    for (int wy0 = std::max(0, last_y - 20); wy0 <= std::max(0, last_y); wy0 += 1 + trial % 3) {
      const int wx0 = std::max(0, last_x - (wy0 + trial) % 20);
      const ConstPixelView window{src.pixels.data() + (std::size_t(wy0) * src.width + wx0) * 3,
                                  x1 - wx0, y1 - wy0, 3,
                                  static_cast<std::ptrdiff_t>(src.width) * 3};
      std::vector<std::uint8_t> part(whole.size());
      resizer.Resize(window, SourceBox{box.x0 - wx0, box.y0 - wy0, box.x1 - wx0, box.y1 - wy0},
                     PixelView::Interleaved(part.data(), out_w, out_h));
      ASSERT_EQ(part, whole) << "trial " << trial << ": " << src.width << "x" << src.height
                             << " window from " << wx0 << "," << wy0;
    }
  }
}

TEST(ResizeTest, BoxesTouchingEveryEdgeMatchReference) {
  Resizer resizer;
  const Image src = RandomImage(45, 38, 3);
  const double w = src.width, h = src.height;
  const SourceBox boxes[] = {
      {0, 0, 20.5, 17.25},  // top-left corner
      {24.5, 0, w, 13.75},  // top-right corner
      {0, 20.3, 11.9, h},   // bottom-left corner
      {30.2, 25.6, w, h},   // bottom-right corner
      {0, 0, w, 0.5},       // a sliver of the top row
      {w - 0.5, 0, w, h},   // a sliver of the last column
      {0.25, 0.75, w - 0.25, h - 0.75},
  };
  for (const SourceBox& box : boxes) {
    for (const auto& [ow, oh] : {std::pair{7, 5}, {16, 16}, {45, 38}, {60, 3}}) {
      ExpectMatchesReference(resizer, src, box, ow, oh);
    }
  }
}

TEST(ResizeTest, OnePixelOutputs) {
  Resizer resizer;
  const Image src = RandomImage(23, 19, 9);
  ExpectMatchesReference(resizer, src, Whole(src), 1, 1);
  ExpectMatchesReference(resizer, src, {3.5, 2.25, 4.0, 9.0}, 1, 1);
  ExpectMatchesReference(resizer, src, {22.5, 18.5, 23, 19}, 1, 1);
  ExpectMatchesReference(resizer, src, Whole(src), 1, 19);
  ExpectMatchesReference(resizer, src, Whole(src), 23, 1);
}

TEST(ResizeTest, OddSizesMatchReference) {
  Resizer resizer;
  const Image src = RandomImage(101, 67, 21);
  ExpectMatchesReference(resizer, src, {1.5, 2.5, 100.0, 66.5}, 37, 29);
  ExpectMatchesReference(resizer, src, {0, 0, 101, 67}, 51, 67);
  ExpectMatchesReference(resizer, src, {0, 0, 101, 67}, 101, 33);
}

TEST(ResizeTest, ConstantColourStaysExactlyConstant) {
  Resizer resizer;
  for (const std::uint8_t value : {0, 1, 127, 254, 255}) {
    Image src(53, 41);
    for (std::size_t i = 0; i < src.pixels.size(); i += 3) {
      src.pixels[i] = value;
      src.pixels[i + 1] = static_cast<std::uint8_t>(255 - value);
      src.pixels[i + 2] = 77;
    }
    const SourceBox boxes[] = {Whole(src), {0.3, 1.7, 50.1, 39.9}, {10, 10, 11.5, 12}};
    for (const SourceBox& box : boxes) {
      for (const auto& [ow, oh] : {std::pair{7, 6}, {24, 24}, {53, 41}, {100, 90}, {1, 1}}) {
        const Image out = RunResize(resizer, src, box, ow, oh);
        for (std::size_t i = 0; i < out.pixels.size(); i += 3) {
          ASSERT_EQ(out.pixels[i], value) << Describe(src, box, ow, oh);
          ASSERT_EQ(out.pixels[i + 1], 255 - value) << Describe(src, box, ow, oh);
          ASSERT_EQ(out.pixels[i + 2], 77) << Describe(src, box, ow, oh);
        }
      }
    }
  }
}

TEST(ResizeTest, FlipIsTheMirroredOutputExactly) {
  Resizer resizer;
  const Image src = RandomImage(77, 50, 31);
  const SourceBox boxes[] = {Whole(src), {3.3, 1.1, 70.2, 44.4}, {0, 0, 5.5, 50}};
  for (const SourceBox& box : boxes) {
    for (const auto& [ow, oh] : {std::pair{1, 1}, {2, 5}, {24, 17}, {77, 50}, {150, 20}}) {
      const Image plain = RunResize(resizer, src, box, ow, oh);
      const Image flipped = RunResize(resizer, src, box, ow, oh, /*flip=*/true);
      for (int y = 0; y < oh; ++y) {
        for (int x = 0; x < ow; ++x) {
          for (int c = 0; c < 3; ++c) {
            ASSERT_EQ(flipped.at(y, x, c), plain.at(y, ow - 1 - x, c))
                << Describe(src, box, ow, oh) << " at " << y << "," << x;
          }
        }
      }
    }
  }
}

TEST(ResizeTest, PlanarOutputIsTheTransposedInterleavedOutput) {
  Resizer resizer;
  const Image src = RandomImage(64, 40, 41);
  for (const bool flip : {false, true}) {
    const SourceBox box{2.5, 3.25, 60.0, 39.5};
    const int ow = 29, oh = 23;
    const Image hwc = RunResize(resizer, src, box, ow, oh, flip);
    std::vector<std::uint8_t> chw(static_cast<std::size_t>(ow) * oh * 3);
    resizer.Resize(src.view(), box, PixelView::Planar(chw.data(), ow, oh), flip);
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < oh; ++y) {
        for (int x = 0; x < ow; ++x) {
          ASSERT_EQ(chw[(static_cast<std::size_t>(c) * oh + y) * ow + x], hwc.at(y, x, c))
              << "flip " << flip << " at " << c << "," << y << "," << x;
        }
      }
    }
  }
}

// dst is a window into a larger buffer: rows are further apart than width * 3 and there
// are guard bytes before, after and between the rows. Only the window may change.
TEST(ResizeTest, WritesNothingOutsideDst) {
  constexpr std::uint8_t kGuard = 0xA5;
  Resizer resizer;
  const Image src = RandomImage(50, 40, 51);
  for (const bool flip : {false, true}) {
    for (const auto& [ow, oh] : {std::pair{1, 1}, {5, 3}, {16, 9}, {31, 20}}) {
      const std::ptrdiff_t row_stride = ow * 3 + 7;
      const std::ptrdiff_t offset = 13;
      std::vector<std::uint8_t> buffer(offset + row_stride * oh + 29, kGuard);
      const PixelView dst = PixelView::Interleaved(buffer.data() + offset, ow, oh, 3, row_stride);
      resizer.Resize(src.view(), {1.5, 2.5, 48.0, 37.0}, dst, flip);
      const Image want = RunResize(resizer, src, {1.5, 2.5, 48.0, 37.0}, ow, oh, flip);
      for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(buffer.size()); ++i) {
        const std::ptrdiff_t rel = i - offset;
        const std::ptrdiff_t y = rel >= 0 ? rel / row_stride : -1;
        const std::ptrdiff_t col = rel >= 0 ? rel % row_stride : -1;
        if (y >= 0 && y < oh && col < static_cast<std::int64_t>(ow) * 3) {
          ASSERT_EQ(buffer[i], want.pixels[y * ow * 3 + col]) << "inside dst at " << rel;
        } else {
          ASSERT_EQ(buffer[i], kGuard)
              << "guard byte " << i << " overwritten, " << ow << "x" << oh << " flip " << flip;
        }
      }
    }
  }
}

// The vector kernels write whole groups of pixels where a row has room and finish the
// row pixel by pixel; every output width up to a few groups, at every filter length,
// must match the reference and leave the bytes after the last row alone.
TEST(ResizeTest, EveryOutputWidthAndFilterLength) {
  constexpr std::uint8_t kGuard = 0x5A;
  constexpr std::size_t kTail = 64;
  Resizer resizer;
  for (const int factor : {1, 2, 3, 4, 5, 9}) {
    for (int ow = 1; ow <= 40; ++ow) {
      const int oh = 3;
      const Image src = RandomImage(ow * factor + 1, oh * factor + 2, ow * 16 + factor);
      const SourceBox box{0.5, 0.25, ow * factor + 0.75, oh * factor + 1.5};
      std::vector<std::uint8_t> buffer(static_cast<std::size_t>(ow) * oh * 3 + kTail, kGuard);
      resizer.Resize(src.view(), box, PixelView::Interleaved(buffer.data(), ow, oh));
      Image got(ow, oh);
      std::copy_n(buffer.begin(), got.pixels.size(), got.pixels.begin());
      EXPECT_LE(MaxAbsDiff(got, ReferenceResize(src, box, ow, oh)), 1)
          << Describe(src, box, ow, oh);
      for (std::size_t i = got.pixels.size(); i < buffer.size(); ++i) {
        ASSERT_EQ(buffer[i], kGuard) << Describe(src, box, ow, oh) << " byte " << i;
      }
    }
  }
}

// The kernels the CPU picks (AVX2 on x86-64 machines that have it) against the SSE2 ones,
// bit for bit: the reference tests above allow one level of difference, which would hide a
// kernel's rounding slip. Every output width to 70, upscales and downscales to 9x (every
// filter length the kernels specialise, and the generic one), fractional boxes, flips, and
// planar output.
TEST(ResizeTest, PortableKernelsGiveTheSameBytes) {
  Resizer fast;
  Resizer portable(true);
  for (const double factor : {0.4, 0.9, 1.0, 1.3, 1.5, 1.77, 2.0, 2.6, 3.3, 4.5, 9.0}) {
    for (int ow = 1; ow <= 70; ++ow) {
      const int oh = 5;
      const int sw = static_cast<int>(ow * factor) + 3;
      const int sh = static_cast<int>(oh * factor) + 3;
      const Image src = RandomImage(sw, sh, static_cast<std::uint32_t>(ow * 31 + factor * 100));
      const SourceBox box{0.75, 0.5, sw - 1.25, sh - 0.5};
      for (const bool flip : {false, true}) {
        const Image want = RunResize(portable, src, box, ow, oh, flip);
        const Image got = RunResize(fast, src, box, ow, oh, flip);
        ASSERT_EQ(got.pixels, want.pixels) << Describe(src, box, ow, oh) << " flip " << flip;
        std::vector<std::uint8_t> planar_want(want.pixels.size()), planar_got(want.pixels.size());
        portable.Resize(src.view(), box, PixelView::Planar(planar_want.data(), ow, oh), flip);
        fast.Resize(src.view(), box, PixelView::Planar(planar_got.data(), ow, oh), flip);
        ASSERT_EQ(planar_got, planar_want) << Describe(src, box, ow, oh) << " planar";
      }
    }
  }
}

TEST(ResizeTest, ReadsSourceThroughItsRowStride) {
  Resizer resizer;
  const Image tight = RandomImage(30, 20, 61);
  // The same pixels with 5 junk bytes at the end of every row.
  const std::ptrdiff_t stride = 30 * 3 + 5;
  std::vector<std::uint8_t> padded(static_cast<std::size_t>(stride) * 20, 0xFF);
  for (int y = 0; y < 20; ++y) {
    std::copy_n(&tight.pixels[static_cast<std::size_t>(y) * 90], 90, &padded[y * stride]);
  }
  const ConstPixelView view{padded.data(), 30, 20, 3, stride};
  for (const auto& [ow, oh] : {std::pair{30, 20}, {11, 7}, {45, 31}}) {
    Image out(ow, oh);
    resizer.Resize(view, Whole(tight), PixelView::Interleaved(out.pixels.data(), ow, oh));
    EXPECT_EQ(out.pixels, RunResize(resizer, tight, Whole(tight), ow, oh).pixels);
  }
}

TEST(ResizeTest, ReusedResizerMatchesAFreshOne) {
  Resizer reused;
  std::mt19937 rng(71);
  for (int trial = 0; trial < 20; ++trial) {
    const int w = 5 + static_cast<int>(rng() % 80), h = 5 + static_cast<int>(rng() % 80);
    const Image src = RandomImage(w, h, trial);
    const int ow = 1 + static_cast<int>(rng() % 40), oh = 1 + static_cast<int>(rng() % 40);
    const bool flip = trial % 2 == 1;
    Resizer fresh;
    EXPECT_EQ(RunResize(reused, src, Whole(src), ow, oh, flip).pixels,
              RunResize(fresh, src, Whole(src), ow, oh, flip).pixels);
  }
  Resizer moved = std::move(reused);
  const Image src = RandomImage(20, 20, 1);
  ExpectMatchesReference(moved, src, Whole(src), 9, 9);
}

TEST(ResizeTest, TypicalRandomResizedCropMatchesReference) {
  Resizer resizer;
  const Image src = PatternImage(300, 260);
  ExpectMatchesReference(resizer, src, {17.25, 9.5, 290.75, 251.0}, 56, 56);
}

TEST(CopyPixelsTest, CopiesAndConvertsLayouts) {
  const Image src = RandomImage(13, 7, 81);
  for (const bool flip : {false, true}) {
    Image hwc(13, 7);
    CopyPixels(src.view(), PixelView::Interleaved(hwc.pixels.data(), 13, 7), flip);
    std::vector<std::uint8_t> chw(std::size_t{13} * 7 * 3);
    CopyPixels(src.view(), PixelView::Planar(chw.data(), 13, 7), flip);
    for (int y = 0; y < 7; ++y) {
      for (int x = 0; x < 13; ++x) {
        const int sx = flip ? 12 - x : x;
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(hwc.at(y, x, c), src.at(y, sx, c));
          ASSERT_EQ(chw[(c * 7 + y) * 13 + x], src.at(y, sx, c));
        }
      }
    }
  }
}

TEST(CopyPixelsTest, RespectsStridesAndGuards) {
  const Image src = RandomImage(6, 4, 82);
  const std::ptrdiff_t stride = 6 * 3 + 4;
  std::vector<std::uint8_t> buffer(stride * 4, 0xA5);
  CopyPixels(src.view(), PixelView::Interleaved(buffer.data(), 6, 4, 3, stride));
  for (int y = 0; y < 4; ++y) {
    for (int i = 0; i < stride; ++i) {
      if (i < 18) {
        ASSERT_EQ(buffer[y * stride + i], src.pixels[y * 18 + i]);
      } else {
        ASSERT_EQ(buffer[y * stride + i], 0xA5);
      }
    }
  }
}

}  // namespace
}  // namespace tilefeed::codecs
