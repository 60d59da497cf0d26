#include "codecs/image_ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// torchvision computes these ops in float32 on the uint8 values and truncates to uint8.
// Where an op maps each value through a function of that value alone (brightness,
// contrast, posterize, solarize, autocontrast, equalize) the float32 expression is
// evaluated once per level into a table, so the table op is exact. A blend of two images
// (saturation, sharpness) and the luma (grayscale, saturation) depend on two or three
// values; no integer form reproduces float32's rounding where the result lies on a whole
// level (x == y in a blend is common), so they evaluate torchvision's float32 expression,
// in its order, four or eight values at a time. The file is built with
// -ffp-contract=off: a fused multiply-add would round differently from torch.

namespace tilefeed::codecs {
namespace {

using Lut = std::array<std::uint8_t, 256>;

// Every row of `image`, as (row pointer, bytes in the row).
template <typename Fn>
void ForEachRow(const PixelView& image, Fn fn) {
  assert(image.interleaved() && image.channels == 3 && image.width > 0 && image.height > 0);
  const std::size_t bytes = std::size_t{3} * image.width;
  for (int y = 0; y < image.height; ++y) fn(image.data + y * image.row_stride, bytes);
}

void ApplyLuts(const PixelView& image, const Lut& r, const Lut& g, const Lut& b) {
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; i += 3) {
      p[i] = r[p[i]];
      p[i + 1] = g[p[i + 1]];
      p[i + 2] = b[p[i + 2]];
    }
  });
}

void ApplyLut(const PixelView& image, const Lut& lut) { ApplyLuts(image, lut, lut, lut); }

// _blend: (ratio * x + (1 - ratio) * y).clamp(0, 255).to(uint8), in float32. `ratio` and
// `other` are the float32 values torch makes of the Python floats.
inline std::uint8_t BlendValue(float ratio, float other, float x, float y) {
  const float v = ratio * x + other * y;
  return static_cast<std::uint8_t>(v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v));
}

struct BlendRatio {
  float ratio;
  float other;
  explicit BlendRatio(double r)
      : ratio(static_cast<float>(r)), other(static_cast<float>(1.0 - r)) {}
};

// A table of BlendValue(x, y) over x for a constant y.
Lut BlendLut(const BlendRatio& b, float y) {
  Lut lut;
  for (int x = 0; x < 256; ++x) lut[x] = BlendValue(b.ratio, b.other, static_cast<float>(x), y);
  return lut;
}

// x[i] = _blend(x[i], y[i]) for n values.
void BlendRow(std::uint8_t* x, const std::uint8_t* y, std::size_t n, const BlendRatio& b) {
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128 ratio = _mm_set1_ps(b.ratio);
  const __m128 other = _mm_set1_ps(b.other);
  const __m128 top = _mm_set1_ps(255.0f);
  const __m128i zero = _mm_setzero_si128();
  // Sixteen values: widened to four float vectors, blended, clamped, truncated, packed.
  for (; i + 16 <= n; i += 16) {
    const __m128i xv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m128i yv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i));
    const __m128i x16[2] = {_mm_unpacklo_epi8(xv, zero), _mm_unpackhi_epi8(xv, zero)};
    const __m128i y16[2] = {_mm_unpacklo_epi8(yv, zero), _mm_unpackhi_epi8(yv, zero)};
    __m128i out32[4];
    for (int k = 0; k < 4; ++k) {
      const __m128i xk =
          k % 2 == 0 ? _mm_unpacklo_epi16(x16[k / 2], zero) : _mm_unpackhi_epi16(x16[k / 2], zero);
      const __m128i yk =
          k % 2 == 0 ? _mm_unpacklo_epi16(y16[k / 2], zero) : _mm_unpackhi_epi16(y16[k / 2], zero);
      const __m128 v = _mm_add_ps(_mm_mul_ps(ratio, _mm_cvtepi32_ps(xk)),
                                  _mm_mul_ps(other, _mm_cvtepi32_ps(yk)));
      out32[k] = _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(v, _mm_setzero_ps()), top));
    }
    const __m128i out =
        _mm_packus_epi16(_mm_packs_epi32(out32[0], out32[1]), _mm_packs_epi32(out32[2], out32[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(x + i), out);
  }
#endif
  for (; i < n; ++i) {
    x[i] = BlendValue(b.ratio, b.other, static_cast<float>(x[i]), static_cast<float>(y[i]));
  }
}

// rgb_to_grayscale: (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8), in float32.
inline std::uint8_t Luma(const std::uint8_t* p) {
  const float v = 0.2989f * static_cast<float>(p[0]) + 0.587f * static_cast<float>(p[1]) +
                  0.114f * static_cast<float>(p[2]);
  return static_cast<std::uint8_t>(v);
}

// Pixels per chunk of the ops that build a second row on the stack.
constexpr std::size_t kChunkPixels = 256;

// The ShearX/ShearY/TranslateX/TranslateY/Rotate ops: torchvision's affine grid and
// grid_sample(mode="nearest", align_corners=False) in float32, for the inverse matrix
// `m` (output pixel -> source pixel, about the image centre) computed in double.
void AffineNearest(const PixelView& image, const double (&m)[6], Rgb fill,
                   ImageOpScratch& scratch) {
  const int w = image.width;
  const int h = image.height;
  const std::size_t row_bytes = std::size_t{3} * w;
  scratch.bytes.resize(row_bytes * h);
  const std::uint8_t* src = scratch.bytes.data();
  ForEachRow(image, [&, y = 0](std::uint8_t* p, std::size_t bytes) mutable {
    std::memcpy(scratch.bytes.data() + row_bytes * y++, p, bytes);
  });
  // _gen_affine_grid: theta in float32, divided by the half sizes, applied to the pixel
  // centres (x + 0.5 - w / 2). grid_sample then maps back with (g + 1) * size / 2 - 0.5
  // and rounds half to even.
  const float half_w = 0.5f * static_cast<float>(w);
  const float half_h = 0.5f * static_cast<float>(h);
  const float r00 = static_cast<float>(m[0]) / half_w;
  const float r10 = static_cast<float>(m[1]) / half_w;
  const float r20 = static_cast<float>(m[2]) / half_w;
  const float r01 = static_cast<float>(m[3]) / half_h;
  const float r11 = static_cast<float>(m[4]) / half_h;
  const float r21 = static_cast<float>(m[5]) / half_h;
  const float fw = static_cast<float>(w);
  const float fh = static_cast<float>(h);
  for (int y = 0; y < h; ++y) {
    const auto by = static_cast<float>(y + 0.5 - 0.5 * h);
    const float y_r10 = by * r10;
    const float y_r11 = by * r11;
    std::uint8_t* out = image.data + y * image.row_stride;
    for (int x = 0; x < w; ++x) {
      const auto bx = static_cast<float>(x + 0.5 - 0.5 * w);
      const float gx = (bx * r00 + y_r10) + r20;
      const float gy = (bx * r01 + y_r11) + r21;
      const float sx = std::nearbyint((gx + 1.0f) * half_w - 0.5f);
      const float sy = std::nearbyint((gy + 1.0f) * half_h - 0.5f);
      const std::uint8_t* from = fill.data();
      if (sx >= 0.0f && sx < fw && sy >= 0.0f && sy < fh) {
        from = src + row_bytes * static_cast<std::size_t>(sy) + 3 * static_cast<std::size_t>(sx);
      }
      std::memcpy(out + std::ptrdiff_t{3} * x, from, 3);
    }
  }
}

// _get_inverse_affine_matrix(center, angle, translate, scale=1, shear) in degrees, with
// Python's math.radians and math.degrees, operation for operation.
constexpr double kDegToRad = std::numbers::pi / 180.0;

void InverseAffine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                   double shear_y, double (&m)[6]) {
  const double rot = angle * kDegToRad;
  const double sx = shear_x * kDegToRad;
  const double sy = shear_y * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  m[0] = d;
  m[1] = -b;
  m[2] = 0.0;
  m[3] = -c;
  m[4] = a;
  m[5] = 0.0;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
}

// torch.linspace(start, end, steps)[index] in float32, as ATen's AVX2 kernel (Debian's
// torch on x86-64) computes it: the first 16 * (steps / 16) values in vectors of 8, each a
// fused start + step * i (or end - step * (steps - 1 - i) from the halfway point) plus
// k * step unfused; the rest one at a time, fused. The values differ from the exact ones
// by an ulp at most, but int() of a translation sees that (16.0 against 15.999999).
float Linspace(double start, double end, int steps, int index) {
  const auto s = static_cast<float>(start);
  const auto e = static_cast<float>(end);
  const float step = (e - s) / static_cast<float>(steps - 1);
  const auto value = [&](int i) {
    return i < steps / 2 ? std::fma(step, static_cast<float>(i), s)
                         : std::fma(-step, static_cast<float>(steps - 1 - i), e);
  };
  if (index >= steps / 16 * 16) return value(index);
  const int k = index % 8;
  return value(index - k) + static_cast<float>(k) * step;
}

}  // namespace

void AdjustBrightness(const PixelView& image, double factor) {
  assert(factor >= 0);
  ApplyLut(image, BlendLut(BlendRatio(factor), 0.0f));
}

void AdjustContrast(const PixelView& image, double factor) {
  assert(factor >= 0);
  // torch.mean of the float32 luma: the sum of whole numbers is exact here, then one
  // float32 division.
  std::uint64_t sum = 0;
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; i += 3) sum += Luma(p + i);
  });
  const float mean = static_cast<float>(sum) /
                     static_cast<float>(static_cast<std::int64_t>(image.width) * image.height);
  ApplyLut(image, BlendLut(BlendRatio(factor), mean));
}

void AdjustSaturation(const PixelView& image, double factor) {
  assert(factor >= 0);
  const BlendRatio ratio(factor);
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    std::uint8_t gray[3 * kChunkPixels];
    for (std::size_t start = 0; start < bytes; start += 3 * kChunkPixels) {
      const std::size_t n = std::min(bytes - start, 3 * kChunkPixels);
      for (std::size_t i = 0; i < n; i += 3) std::memset(gray + i, Luma(p + start + i), 3);
      BlendRow(p + start, gray, n, ratio);
    }
  });
}

void AdjustHue(const PixelView& image, double hue_factor) {
  assert(-0.5 <= hue_factor && hue_factor <= 0.5);
  const auto shift = static_cast<float>(hue_factor);
  // _rgb2hsv, the hue shift and _hsv2rgb of functional_tensor.py, in float32 and in its
  // order of operations.
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; i += 3) {
      const float r = static_cast<float>(p[i]) / 255.0f;
      const float g = static_cast<float>(p[i + 1]) / 255.0f;
      const float b = static_cast<float>(p[i + 2]) / 255.0f;
      const float maxc = std::max({r, g, b});
      const float minc = std::min({r, g, b});
      const bool eqc = maxc == minc;
      const float cr = maxc - minc;
      const float s = cr / (eqc ? 1.0f : maxc);
      const float divisor = eqc ? 1.0f : cr;
      const float rc = (maxc - r) / divisor;
      const float gc = (maxc - g) / divisor;
      const float bc = (maxc - b) / divisor;
      float h;
      if (maxc == r) {
        h = bc - gc;
      } else if (maxc == g) {
        h = 2.0f + rc - bc;
      } else {
        h = 4.0f + gc - rc;
      }
      h = std::fmod(h / 6.0f + 1.0f, 1.0f);
      h = h + shift;
      h = std::fmod(h, 1.0f);  // torch.remainder(h, 1.0)
      if (h < 0.0f) h += 1.0f;
      const float v = maxc;
      const float i6 = std::floor(h * 6.0f);
      const float f = h * 6.0f - i6;
      const int sector = static_cast<int>(i6) % 6;
      const float pp = std::clamp(v * (1.0f - s), 0.0f, 1.0f);
      const float q = std::clamp(v * (1.0f - s * f), 0.0f, 1.0f);
      const float t = std::clamp(v * (1.0f - s * (1.0f - f)), 0.0f, 1.0f);
      const float rgb[6][3] = {{v, t, pp}, {q, v, pp}, {pp, v, t},
                               {pp, q, v}, {t, pp, v}, {v, pp, q}};
      for (int c = 0; c < 3; ++c) p[i + c] = static_cast<std::uint8_t>(rgb[sector][c] * 255.0f);
    }
  });
}

void AdjustSharpness(const PixelView& image, double factor, ImageOpScratch& scratch) {
  assert(factor >= 0);
  const int w = image.width;
  const int h = image.height;
  if (w <= 2 || h <= 2) return;  // torchvision returns such images unchanged
  const BlendRatio ratio(factor);
  const std::size_t row_bytes = std::size_t{3} * w;
  scratch.bytes.resize(row_bytes * h);
  std::uint8_t* copy = scratch.bytes.data();
  for (int y = 0; y < h; ++y) std::memcpy(copy + row_bytes * y, image.at(y, 0), row_bytes);
  // The smoothed image is conv2d with [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, rounded to
  // uint8, inside a border of the image itself. sum / 13 is never within 1/26 of a half,
  // so rounding (2 * sum + 13) / 26 down is the float32 result rounded.
  std::uint8_t smooth[3 * kChunkPixels];
  for (int y = 0; y < h; ++y) {
    std::uint8_t* out = image.at(y, 0);
    const std::uint8_t* mid = copy + row_bytes * y;
    for (std::size_t start = 0; start < row_bytes; start += 3 * kChunkPixels) {
      const std::size_t n = std::min(row_bytes - start, 3 * kChunkPixels);
      std::memcpy(smooth, mid + start, n);
      if (y > 0 && y < h - 1) {
        for (std::size_t i = std::max<std::size_t>(start, 3);
             i < std::min(start + n, row_bytes - 3); ++i) {
          int sum = 4 * mid[i];
          for (const std::uint8_t* row : {mid - row_bytes, mid, mid + row_bytes}) {
            sum += row[i - 3] + row[i] + row[i + 3];
          }
          smooth[i - start] = static_cast<std::uint8_t>((2 * sum + 13) / 26);
        }
      }
      BlendRow(out + start, smooth, n, ratio);
    }
  }
}

void Grayscale(const PixelView& image) {
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; i += 3) std::memset(p + i, Luma(p + i), 3);
  });
}

void Posterize(const PixelView& image, int bits) {
  assert(0 <= bits && bits <= 8);
  const int mask = -(1 << (8 - bits));
  Lut lut;
  for (int x = 0; x < 256; ++x) lut[x] = static_cast<std::uint8_t>(x & mask);
  ApplyLut(image, lut);
}

void Solarize(const PixelView& image, double threshold) {
  // uint8 >= a Python float compares in float32.
  const auto t = static_cast<float>(threshold);
  Lut lut;
  for (int x = 0; x < 256; ++x) {
    lut[x] = static_cast<std::uint8_t>(static_cast<float>(x) >= t ? 255 - x : x);
  }
  ApplyLut(image, lut);
}

void AutoContrast(const PixelView& image) {
  std::array<std::uint8_t, 3> lo = {255, 255, 255};
  std::array<std::uint8_t, 3> hi = {0, 0, 0};
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; i += 3) {
      for (int c = 0; c < 3; ++c) {
        lo[c] = std::min(lo[c], p[i + c]);
        hi[c] = std::max(hi[c], p[i + c]);
      }
    }
  });
  std::array<Lut, 3> luts;
  for (int c = 0; c < 3; ++c) {
    // A flat channel has an infinite scale, which torchvision replaces by min 0, scale 1.
    const bool flat = lo[c] == hi[c];
    const float minimum = flat ? 0.0f : static_cast<float>(lo[c]);
    const float scale = flat ? 1.0f : 255.0f / static_cast<float>(hi[c] - lo[c]);
    for (int x = 0; x < 256; ++x) {
      const float v = (static_cast<float>(x) - minimum) * scale;
      luts[c][x] = static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
    }
  }
  ApplyLuts(image, luts[0], luts[1], luts[2]);
}

void Equalize(const PixelView& image) {
  std::array<std::array<std::int64_t, 256>, 3> hist{};
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; i += 3) {
      ++hist[0][p[i]];
      ++hist[1][p[i + 1]];
      ++hist[2][p[i + 2]];
    }
  });
  const std::int64_t total = std::int64_t{image.width} * image.height;
  std::array<Lut, 3> luts;
  for (int c = 0; c < 3; ++c) {
    // _scale_channel: step is the count of every nonzero bin but the last, over 255.
    int last = 255;
    while (hist[c][last] == 0) --last;
    const std::int64_t step = (total - hist[c][last]) / 255;
    std::int64_t cumulative = 0;
    for (int x = 0; x < 256; ++x) {
      if (step == 0) {
        luts[c][x] = static_cast<std::uint8_t>(x);
        continue;
      }
      luts[c][x] =
          static_cast<std::uint8_t>(std::min<std::int64_t>((cumulative + step / 2) / step, 255));
      cumulative += hist[c][x];
    }
  }
  ApplyLuts(image, luts[0], luts[1], luts[2]);
}

void Erase(const PixelView& image, const Rect& rect, Rgb value) {
  assert(image.interleaved() && image.channels == 3);
  assert(rect.x >= 0 && rect.y >= 0 && rect.width >= 0 && rect.height >= 0 &&
         rect.x + rect.width <= image.width && rect.y + rect.height <= image.height);
  for (int y = rect.y; y < rect.y + rect.height; ++y) {
    std::uint8_t* p = image.at(y, rect.x);
    for (int x = 0; x < rect.width; ++x) std::memcpy(p + std::ptrdiff_t{3} * x, value.data(), 3);
  }
}

double PolicyMagnitude(PolicyOp op, int bin, int num_bins, bool wide, int height, int width) {
  assert(0 <= bin && bin < num_bins && num_bins >= 2);
  switch (op) {
    case PolicyOp::kShearX:
    case PolicyOp::kShearY:
      return Linspace(0.0, wide ? 0.99 : 0.3, num_bins, bin);
    case PolicyOp::kTranslateX:
      return Linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * width, num_bins, bin);
    case PolicyOp::kTranslateY:
      return Linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * height, num_bins, bin);
    case PolicyOp::kRotate:
      return Linspace(0.0, wide ? 135.0 : 30.0, num_bins, bin);
    case PolicyOp::kBrightness:
    case PolicyOp::kColor:
    case PolicyOp::kContrast:
    case PolicyOp::kSharpness:
      return Linspace(0.0, wide ? 0.99 : 0.9, num_bins, bin);
    case PolicyOp::kPosterize: {
      // 8 - (arange(num_bins) / ((num_bins - 1) / k)).round().int(), in float32.
      const auto divisor = static_cast<float>((num_bins - 1) / (wide ? 6.0 : 4.0));
      return 8 - static_cast<int>(std::nearbyint(static_cast<float>(bin) / divisor));
    }
    case PolicyOp::kSolarize:
      return Linspace(255.0, 0.0, num_bins, bin);
    case PolicyOp::kIdentity:
    case PolicyOp::kAutoContrast:
    case PolicyOp::kEqualize:
      return 0.0;
  }
  return 0.0;
}

bool PolicyOpSigned(PolicyOp op) {
  return op != PolicyOp::kIdentity && op != PolicyOp::kPosterize && op != PolicyOp::kSolarize &&
         op != PolicyOp::kAutoContrast && op != PolicyOp::kEqualize;
}

void ApplyPolicyOp(const PixelView& image, PolicyOp op, double magnitude, Rgb fill,
                   ImageOpScratch& scratch) {
  double m[6];
  // ShearX/Y pass center=[0, 0] to F.affine, which is (-w/2, -h/2) from the centre.
  const double corner_x = -0.5 * image.width;
  const double corner_y = -0.5 * image.height;
  // math.degrees(math.atan(magnitude)), as Python computes it.
  const double shear = std::atan(magnitude) / kDegToRad;
  switch (op) {
    case PolicyOp::kIdentity:
      return;
    case PolicyOp::kShearX:
      InverseAffine(corner_x, corner_y, 0.0, 0.0, 0.0, shear, 0.0, m);
      return AffineNearest(image, m, fill, scratch);
    case PolicyOp::kShearY:
      InverseAffine(corner_x, corner_y, 0.0, 0.0, 0.0, 0.0, shear, m);
      return AffineNearest(image, m, fill, scratch);
    case PolicyOp::kTranslateX:
      InverseAffine(0.0, 0.0, 0.0, std::trunc(magnitude), 0.0, 0.0, 0.0, m);
      return AffineNearest(image, m, fill, scratch);
    case PolicyOp::kTranslateY:
      InverseAffine(0.0, 0.0, 0.0, 0.0, std::trunc(magnitude), 0.0, 0.0, m);
      return AffineNearest(image, m, fill, scratch);
    case PolicyOp::kRotate:
      // F.rotate turns counter-clockwise: the affine matrix of -angle.
      InverseAffine(0.0, 0.0, -magnitude, 0.0, 0.0, 0.0, 0.0, m);
      return AffineNearest(image, m, fill, scratch);
    case PolicyOp::kBrightness:
      return AdjustBrightness(image, 1.0 + magnitude);
    case PolicyOp::kColor:
      return AdjustSaturation(image, 1.0 + magnitude);
    case PolicyOp::kContrast:
      return AdjustContrast(image, 1.0 + magnitude);
    case PolicyOp::kSharpness:
      return AdjustSharpness(image, 1.0 + magnitude, scratch);
    case PolicyOp::kPosterize:
      return Posterize(image, static_cast<int>(magnitude));
    case PolicyOp::kSolarize:
      return Solarize(image, magnitude);
    case PolicyOp::kAutoContrast:
      return AutoContrast(image);
    case PolicyOp::kEqualize:
      return Equalize(image);
  }
}

}  // namespace tilefeed::codecs
