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
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "codecs/cpu_dispatch.h"
#define TILEFEED_IMAGE_OPS_AVX2 1
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
  return static_cast<std::uint8_t>(std::clamp(ratio * x + other * y, 0.0f, 255.0f));
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

#if defined(TILEFEED_IMAGE_OPS_AVX2)
// Byte shuffles between 16 interleaved RGB pixels (three registers) and 16 values of one
// channel: kGather[c][k] moves channel c's bytes held in register k to their pixel's lane,
// kSpread[k] fills register k of the output with each pixel's value three times.
struct GrayShuffles {
  alignas(16) std::int8_t gather[3][3][16];
  alignas(16) std::int8_t spread[3][16];
};
constexpr GrayShuffles MakeGrayShuffles() {
  GrayShuffles s{};
  for (int c = 0; c < 3; ++c) {
    for (int k = 0; k < 3; ++k) {
      for (int j = 0; j < 16; ++j) {
        const int byte = 3 * j + c;
        s.gather[c][k][j] = static_cast<std::int8_t>(byte / 16 == k ? byte % 16 : -1);
      }
    }
  }
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 16; ++i) s.spread[k][i] = static_cast<std::int8_t>((16 * k + i) / 3);
  }
  return s;
}
constexpr GrayShuffles kGrayShuffles = MakeGrayShuffles();

// The low 8 bytes of v as floats.
TILEFEED_TARGET_AVX2 inline __m256 Widen(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

// Luma's float32 expression for 8 values of each channel.
TILEFEED_TARGET_AVX2 inline __m256i LumaAvx2(__m128i r, __m128i g, __m128i b) {
  const auto widen = Widen;
  const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(0.2989f), widen(r)),
                                               _mm256_mul_ps(_mm256_set1_ps(0.587f), widen(g))),
                                 _mm256_mul_ps(_mm256_set1_ps(0.114f), widen(b)));
  return _mm256_cvttps_epi32(v);
}

// GrayRow for whole groups of 16 pixels; returns the bytes done.
TILEFEED_TARGET_AVX2 std::size_t GrayRowAvx2(const std::uint8_t* in, std::size_t bytes,
                                             std::uint8_t* out) {
  const GrayShuffles& s = kGrayShuffles;
  const auto mask = [](const std::int8_t* m) TILEFEED_TARGET_AVX2 {
    return _mm_load_si128(reinterpret_cast<const __m128i*>(m));
  };
  std::size_t i = 0;
  for (; i + 48 <= bytes; i += 48) {
    __m128i v[3];
    for (int k = 0; k < 3; ++k)
      v[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + std::ptrdiff_t{16} * k));
    __m128i channel[3];
    for (int c = 0; c < 3; ++c) {
      channel[c] = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(v[0], mask(s.gather[c][0])),
                                             _mm_shuffle_epi8(v[1], mask(s.gather[c][1]))),
                                _mm_shuffle_epi8(v[2], mask(s.gather[c][2])));
    }
    const __m256i low = LumaAvx2(channel[0], channel[1], channel[2]);
    const __m256i high = LumaAvx2(_mm_srli_si128(channel[0], 8), _mm_srli_si128(channel[1], 8),
                                  _mm_srli_si128(channel[2], 8));
    // packs works within 128-bit lanes; the permute puts the 16 values back in order.
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), 0xd8);
    const __m128i luma =
        _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
    for (int k = 0; k < 3; ++k) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + std::ptrdiff_t{16} * k),
                       _mm_shuffle_epi8(luma, mask(s.spread[k])));
    }
  }
  return i;
}
#endif

// Writes each pixel's luma three times to `out` for `bytes` bytes of RGB (out may be in).
void GrayRow(const std::uint8_t* in, std::size_t bytes, std::uint8_t* out) {
  std::size_t i = 0;
#if defined(TILEFEED_IMAGE_OPS_AVX2)
  if (detail::CpuRuns(detail::KernelSet::kAvx2)) i = GrayRowAvx2(in, bytes, out);
#endif
  for (; i < bytes; i += 3) std::memset(out + i, Luma(in + i), 3);
}

#if defined(__SSE2__)
// mask ? a : b, lane by lane.
inline __m128 Select(__m128 mask, __m128 a, __m128 b) {
  return _mm_or_ps(_mm_and_ps(mask, a), _mm_andnot_ps(mask, b));
}
#endif

// std::nearbyint (round half to even) without a libm call: adding 1.5 * 2^23 leaves no
// fraction bits, so the sum is rounded in the default mode; |v| is capped below 2^22 first
// (a larger coordinate is outside any image either way).
inline float RoundHalfEven(float v) {
  constexpr float kCap = 4194304.0f;
  constexpr float kMagic = 12582912.0f;
  v = v < -kCap ? -kCap : (v > kCap ? kCap : v);
  return (v + kMagic) - kMagic;
}

// Pixels per chunk of the ops that build a second row on the stack.
constexpr std::size_t kChunkPixels = 256;

// The ShearX/ShearY/TranslateX/TranslateY/Rotate ops: torchvision's affine grid and
// grid_sample(mode="nearest", align_corners=False) in float32, for the inverse matrix
// `m` (output pixel -> source pixel, about the image centre) computed in double.
// _gen_affine_grid's float32 grid for one image and inverse matrix (AffineNearest).
struct AffineGrid {
  float half_w, half_h, r00, r10, r20, r01, r11, r21, x_origin, row_bytes, fill_offset;
};

#if defined(__SSE2__)
// AffineNearest's offsets of row pixels [0, 4 * (w / 4)), four at a time; returns the count.
int GridRowSse2(const AffineGrid& g, int w, float y_r10, float y_r11, std::int32_t* offsets) {
  int x = 0;
  const __m128 cap = _mm_set1_ps(4194304.0f);
  const __m128 magic = _mm_set1_ps(12582912.0f);
  const auto round = [&](__m128 v) {
    return _mm_sub_ps(
        _mm_add_ps(_mm_min_ps(_mm_max_ps(v, _mm_sub_ps(_mm_setzero_ps(), cap)), cap), magic),
        magic);
  };
  const __m128 one = _mm_set1_ps(1.0f);
  const __m128 half = _mm_set1_ps(0.5f);
  for (; x + 4 <= w; x += 4) {
    const __m128 bx =
        _mm_add_ps(_mm_cvtepi32_ps(_mm_add_epi32(_mm_set1_epi32(x), _mm_setr_epi32(0, 1, 2, 3))),
                   _mm_set1_ps(g.x_origin));
    const __m128 gx = _mm_add_ps(_mm_add_ps(_mm_mul_ps(bx, _mm_set1_ps(g.r00)), _mm_set1_ps(y_r10)),
                                 _mm_set1_ps(g.r20));
    const __m128 gy = _mm_add_ps(_mm_add_ps(_mm_mul_ps(bx, _mm_set1_ps(g.r01)), _mm_set1_ps(y_r11)),
                                 _mm_set1_ps(g.r21));
    const __m128 sx =
        round(_mm_sub_ps(_mm_mul_ps(_mm_add_ps(gx, one), _mm_set1_ps(g.half_w)), half));
    const __m128 sy =
        round(_mm_sub_ps(_mm_mul_ps(_mm_add_ps(gy, one), _mm_set1_ps(g.half_h)), half));
    const __m128 inside =
        _mm_and_ps(_mm_and_ps(_mm_cmpge_ps(sx, _mm_setzero_ps()),
                              _mm_cmplt_ps(sx, _mm_set1_ps(static_cast<float>(w)))),
                   _mm_and_ps(_mm_cmpge_ps(sy, _mm_setzero_ps()),
                              _mm_cmplt_ps(sy, _mm_set1_ps(g.half_h * 2.0f))));
    const __m128 offset =
        _mm_add_ps(_mm_mul_ps(sy, _mm_set1_ps(g.row_bytes)), _mm_mul_ps(sx, _mm_set1_ps(3.0f)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(offsets + x),
                     _mm_cvttps_epi32(Select(inside, offset, _mm_set1_ps(g.fill_offset))));
  }
  return x;
}
#endif

void AffineNearest(const PixelView& image, const double (&m)[6], Rgb fill,
                   ImageOpScratch& scratch) {
  const int w = image.width;
  const int h = image.height;
  const std::size_t row_bytes = std::size_t{3} * w;
  // The image, then the fill pixel, then a byte that 4-byte copies may read.
  const std::size_t fill_offset = row_bytes * h;
  scratch.bytes.resize(fill_offset + 4);
  scratch.offsets.resize(w);
  const std::uint8_t* src = scratch.bytes.data();
  std::int32_t* offsets = scratch.offsets.data();
  for (int y = 0; y < h; ++y) {
    std::memcpy(scratch.bytes.data() + row_bytes * y, image.at(y, 0), row_bytes);
  }
  std::memcpy(scratch.bytes.data() + fill_offset, fill.data(), 3);
  // _gen_affine_grid: theta in float32, divided by the half sizes, applied to the pixel
  // centres (x + 0.5 - w / 2, exact in float32). grid_sample then maps back with
  // (g + 1) * size / 2 - 0.5 and rounds half to even.
  const float half_w = 0.5f * static_cast<float>(w);
  const float half_h = 0.5f * static_cast<float>(h);
  const AffineGrid g{half_w,
                     half_h,
                     static_cast<float>(m[0]) / half_w,
                     static_cast<float>(m[1]) / half_w,
                     static_cast<float>(m[2]) / half_w,
                     static_cast<float>(m[3]) / half_h,
                     static_cast<float>(m[4]) / half_h,
                     static_cast<float>(m[5]) / half_h,
                     0.5f - half_w,
                     static_cast<float>(row_bytes),
                     static_cast<float>(fill_offset)};
  for (int y = 0; y < h; ++y) {
    const float by = static_cast<float>(y) + (0.5f - half_h);
    const float y_r10 = by * g.r10;
    const float y_r11 = by * g.r11;
    // The byte offset of each pixel's source in scratch (the fill's when outside).
    int x = 0;
#if defined(__SSE2__)
    // Offsets are exact in float32 below 2^24; larger images take the scalar loop.
    if (fill_offset < (std::size_t{1} << 24)) x = GridRowSse2(g, w, y_r10, y_r11, offsets);
#endif
    for (; x < w; ++x) {
      const float bx = static_cast<float>(x) + g.x_origin;
      const float gx = (bx * g.r00 + y_r10) + g.r20;
      const float gy = (bx * g.r01 + y_r11) + g.r21;
      const float sx = RoundHalfEven((gx + 1.0f) * half_w - 0.5f);
      const float sy = RoundHalfEven((gy + 1.0f) * half_h - 0.5f);
      const bool inside =
          sx >= 0.0f && sx < static_cast<float>(w) && sy >= 0.0f && sy < static_cast<float>(h);
      offsets[x] = static_cast<std::int32_t>(inside ? row_bytes * static_cast<std::size_t>(sy) +
                                                          3 * static_cast<std::size_t>(sx)
                                                    : fill_offset);
    }
    // Four bytes a pixel (the fourth is the next pixel's, written next), three for the last.
    std::uint8_t* out = image.at(y, 0);
    for (x = 0; x + 1 < w; ++x) std::memcpy(out + std::ptrdiff_t{3} * x, src + offsets[x], 4);
    std::memcpy(out + std::ptrdiff_t{3} * x, src + offsets[x], 3);
  }
}

// TranslateX/Y by whole pixels: torchvision's grid lands within float32 rounding of
// x - dx, so the op is row moves, in place, in the order that reads each row first.
void Translate(const PixelView& image, int dx, int dy, Rgb fill) {
  const int w = image.width;
  const int h = image.height;
  dx = std::clamp(dx, -w, w);
  const int keep = w - std::abs(dx);
  const auto fill_pixels = [&](std::uint8_t* p, int n) {
    for (int i = 0; i < n; ++i) std::memcpy(p + std::ptrdiff_t{3} * i, fill.data(), 3);
  };
  for (int k = 0; k < h; ++k) {
    const int y = dy > 0 ? h - 1 - k : k;
    std::uint8_t* out = image.at(y, 0);
    if (y - dy < 0 || y - dy >= h) {
      fill_pixels(out, w);
      continue;
    }
    std::memmove(out + std::ptrdiff_t{3} * std::max(dx, 0), image.at(y - dy, std::max(-dx, 0)),
                 std::size_t{3} * keep);
    fill_pixels(out + (dx > 0 ? 0 : std::ptrdiff_t{3} * keep), w - keep);
  }
}

// _get_inverse_affine_matrix(center, angle, translate=0, scale=1, shear) in degrees, with
// Python's math.radians and math.degrees, operation for operation.
constexpr double kDegToRad = std::numbers::pi / 180.0;

void InverseAffine(double cx, double cy, double angle, double shear_x, double shear_y,
                   double (&m)[6]) {
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
  m[2] += m[0] * -cx + m[1] * -cy;
  m[5] += m[3] * -cx + m[4] * -cy;
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

#if defined(__SSE2__)

// AdjustHue's loop body (below) four pixels at a time, the same float32 operations in the
// same order. Returns how many pixels it did.
std::size_t HueSse2(float* r, float* g, float* b, std::size_t n, float shift) {
  const __m128 zero = _mm_setzero_ps();
  const __m128 one = _mm_set1_ps(1.0f);
  const __m128 six = _mm_set1_ps(6.0f);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 rv = _mm_loadu_ps(r + i);
    const __m128 gv = _mm_loadu_ps(g + i);
    const __m128 bv = _mm_loadu_ps(b + i);
    const __m128 maxc = _mm_max_ps(_mm_max_ps(rv, gv), bv);
    const __m128 minc = _mm_min_ps(_mm_min_ps(rv, gv), bv);
    const __m128 eqc = _mm_cmpeq_ps(maxc, minc);
    const __m128 cr = _mm_sub_ps(maxc, minc);
    const __m128 s = _mm_div_ps(cr, Select(eqc, one, maxc));
    const __m128 divisor = Select(eqc, one, cr);
    const __m128 rc = _mm_div_ps(_mm_sub_ps(maxc, rv), divisor);
    const __m128 gc = _mm_div_ps(_mm_sub_ps(maxc, gv), divisor);
    const __m128 bc = _mm_div_ps(_mm_sub_ps(maxc, bv), divisor);
    const __m128 hr = _mm_sub_ps(bc, gc);
    const __m128 hg = _mm_sub_ps(_mm_add_ps(_mm_set1_ps(2.0f), rc), bc);
    const __m128 hb = _mm_sub_ps(_mm_add_ps(_mm_set1_ps(4.0f), gc), rc);
    __m128 h = Select(_mm_cmpeq_ps(maxc, rv), hr, Select(_mm_cmpeq_ps(maxc, gv), hg, hb));
    h = _mm_add_ps(_mm_div_ps(h, six), one);
    h = Select(_mm_cmpge_ps(h, one), _mm_sub_ps(h, one), h);
    h = _mm_add_ps(h, _mm_set1_ps(shift));
    h = Select(_mm_cmpge_ps(h, one), _mm_sub_ps(h, one), h);
    h = Select(_mm_cmplt_ps(h, zero), _mm_add_ps(h, one), h);
    const __m128 h6 = _mm_mul_ps(h, six);
    __m128i sector = _mm_cvttps_epi32(h6);
    const __m128 f = _mm_sub_ps(h6, _mm_cvtepi32_ps(sector));
    const auto unit = [&](__m128 x) { return _mm_min_ps(_mm_max_ps(x, zero), one); };
    const __m128 v = maxc;
    const __m128 pp = unit(_mm_mul_ps(v, _mm_sub_ps(one, s)));
    const __m128 qq = unit(_mm_mul_ps(v, _mm_sub_ps(one, _mm_mul_ps(s, f))));
    const __m128 tt = unit(_mm_mul_ps(v, _mm_sub_ps(one, _mm_mul_ps(s, _mm_sub_ps(one, f)))));
    sector = _mm_sub_epi32(
        sector, _mm_and_si128(_mm_cmpgt_epi32(sector, _mm_set1_epi32(5)), _mm_set1_epi32(6)));
    __m128 is[6];
    for (int k = 0; k < 6; ++k) {
      is[k] = _mm_castsi128_ps(_mm_cmpeq_epi32(sector, _mm_set1_epi32(k)));
    }
    _mm_storeu_ps(r + i,
                  Select(_mm_or_ps(is[0], is[5]), v, Select(is[1], qq, Select(is[4], tt, pp))));
    _mm_storeu_ps(g + i,
                  Select(_mm_or_ps(is[1], is[2]), v, Select(is[0], tt, Select(is[3], qq, pp))));
    _mm_storeu_ps(b + i,
                  Select(_mm_or_ps(is[3], is[4]), v, Select(is[2], tt, Select(is[5], qq, pp))));
  }
  return i;
}
#endif

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
    std::uint8_t gray[3 * kChunkPixels];
    for (std::size_t start = 0; start < bytes; start += 3 * kChunkPixels) {
      const std::size_t n = std::min(bytes - start, 3 * kChunkPixels);
      GrayRow(p + start, n, gray);
      for (std::size_t i = 0; i < n; i += 3) sum += gray[i];
    }
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
      GrayRow(p + start, n, gray);
      BlendRow(p + start, gray, n, ratio);
    }
  });
}

void AdjustHue(const PixelView& image, double hue_factor) {
  assert(-0.5 <= hue_factor && hue_factor <= 0.5);
  const auto shift = static_cast<float>(hue_factor);
  // _rgb2hsv, the hue shift and _hsv2rgb of functional_tensor.py in float32 and in its
  // order of operations, on a chunk of pixels at a time in three planes.
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    float r[kChunkPixels];
    float g[kChunkPixels];
    float b[kChunkPixels];
    for (std::size_t start = 0; start < bytes; start += 3 * kChunkPixels) {
      const std::size_t n = std::min(bytes - start, 3 * kChunkPixels) / 3;
      std::uint8_t* q = p + start;
      for (std::size_t i = 0; i < n; ++i) {
        r[i] = static_cast<float>(q[3 * i]) / 255.0f;
        g[i] = static_cast<float>(q[3 * i + 1]) / 255.0f;
        b[i] = static_cast<float>(q[3 * i + 2]) / 255.0f;
      }
      std::size_t i = 0;
#if defined(__SSE2__)
      i = HueSse2(r, g, b, n, shift);
#endif
      for (; i < n; ++i) {
        const float maxc = std::max(std::max(r[i], g[i]), b[i]);
        const float minc = std::min(std::min(r[i], g[i]), b[i]);
        const bool eqc = maxc == minc;
        const float cr = maxc - minc;
        const float s = cr / (eqc ? 1.0f : maxc);
        const float divisor = eqc ? 1.0f : cr;
        const float rc = (maxc - r[i]) / divisor;
        const float gc = (maxc - g[i]) / divisor;
        const float bc = (maxc - b[i]) / divisor;
        const float hr = bc - gc;
        const float hg = 2.0f + rc - bc;
        const float hb = 4.0f + gc - rc;
        float h = maxc == r[i] ? hr : (maxc == g[i] ? hg : hb);
        // fmod(h / 6 + 1, 1) of a value in [0, 2), then torch.remainder(h + shift, 1) of
        // one in [-0.5, 1.5): both subtractions of 1 are exact, as fmod is.
        h = h / 6.0f + 1.0f;
        float wrapped = h - 1.0f;
        h = h >= 1.0f ? wrapped : h;
        h = h + shift;
        wrapped = h - 1.0f;
        h = h >= 1.0f ? wrapped : h;
        wrapped = h + 1.0f;
        h = h < 0.0f ? wrapped : h;
        const float v = maxc;
        const float h6 = h * 6.0f;
        const auto sector = static_cast<std::int32_t>(h6);  // floor: h6 >= 0
        const float f = h6 - static_cast<float>(sector);
        const float pp = std::min(std::max(v * (1.0f - s), 0.0f), 1.0f);
        const float qq = std::min(std::max(v * (1.0f - s * f), 0.0f), 1.0f);
        const float tt = std::min(std::max(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
        // Sectors 0..5 (6 is 0 again): (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q).
        const std::int32_t k = sector >= 6 ? sector - 6 : sector;
        r[i] = ((k == 0) | (k == 5)) ? v : (k == 1 ? qq : (k == 4 ? tt : pp));
        g[i] = ((k == 1) | (k == 2)) ? v : (k == 0 ? tt : (k == 3 ? qq : pp));
        b[i] = ((k == 3) | (k == 4)) ? v : (k == 2 ? tt : (k == 5 ? qq : pp));
      }
      for (std::size_t i = 0; i < n; ++i) {
        q[3 * i] = static_cast<std::uint8_t>(r[i] * 255.0f);
        q[3 * i + 1] = static_cast<std::uint8_t>(g[i] * 255.0f);
        q[3 * i + 2] = static_cast<std::uint8_t>(b[i] * 255.0f);
      }
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
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) { GrayRow(p, bytes, p); });
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
#if defined(__SSE2__)
  // Byte j of register k of each 48-byte group is channel (16 * k + j) % 3.
  __m128i lo16[3];
  __m128i hi16[3];
  for (int k = 0; k < 3; ++k) {
    lo16[k] = _mm_set1_epi8(-1);
    hi16[k] = _mm_setzero_si128();
  }
#endif
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    std::size_t i = 0;
#if defined(__SSE2__)
    for (; i + 48 <= bytes; i += 48) {
      for (int k = 0; k < 3; ++k) {
        const __m128i v =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + std::ptrdiff_t{16} * k));
        lo16[k] = _mm_min_epu8(lo16[k], v);
        hi16[k] = _mm_max_epu8(hi16[k], v);
      }
    }
#endif
    for (; i < bytes; i += 3) {
      for (int c = 0; c < 3; ++c) {
        lo[c] = std::min(lo[c], p[i + c]);
        hi[c] = std::max(hi[c], p[i + c]);
      }
    }
  });
#if defined(__SSE2__)
  for (int k = 0; k < 3; ++k) {
    std::uint8_t l[16];
    std::uint8_t h[16];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(l), lo16[k]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h), hi16[k]);
    for (int j = 0; j < 16; ++j) {
      const int c = (16 * k + j) % 3;
      lo[c] = std::min(lo[c], l[j]);
      hi[c] = std::max(hi[c], h[j]);
    }
  }
#endif
  std::array<Lut, 3> luts;
  for (int c = 0; c < 3; ++c) {
    // A flat channel has an infinite scale, which torchvision replaces by min 0, scale 1.
    const bool flat = lo[c] == hi[c];
    const float minimum = flat ? 0.0f : static_cast<float>(lo[c]);
    // 255.0 / tensor is Tensor.__rtruediv__: the reciprocal, times 255.
    const float scale = flat ? 1.0f : (1.0f / static_cast<float>(hi[c] - lo[c])) * 255.0f;
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
      InverseAffine(corner_x, corner_y, 0.0, shear, 0.0, m);
      return AffineNearest(image, m, fill, scratch);
    case PolicyOp::kShearY:
      InverseAffine(corner_x, corner_y, 0.0, 0.0, shear, m);
      return AffineNearest(image, m, fill, scratch);
    case PolicyOp::kTranslateX:
      return Translate(image, static_cast<int>(magnitude), 0, fill);
    case PolicyOp::kTranslateY:
      return Translate(image, 0, static_cast<int>(magnitude), fill);
    case PolicyOp::kRotate:
      // F.rotate turns counter-clockwise: the affine matrix of -angle.
      InverseAffine(0.0, 0.0, -magnitude, 0.0, 0.0, m);
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
