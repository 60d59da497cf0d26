// The geometric ops of RandAugment and TrivialAugmentWide (ShearX/Y, TranslateX/Y, Rotate):
// torchvision's affine grid and nearest sampling in float32 (codecs/image_ops.h). Built with
// -ffp-contract=off, as image_ops.cc: a fused multiply-add would round the grid differently.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "codecs/image_ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "codecs/cpu_dispatch.h"
#define TILEFEED_IMAGE_OPS_X86 1
#endif

namespace tilefeed::codecs::detail {
namespace {

// std::nearbyint (round half to even) without a libm call: adding 1.5 * 2^23 leaves no
// fraction bits, so the sum is rounded in the default mode; |v| is capped below 2^22 first
// (a larger coordinate is outside any image either way).
constexpr float kRoundCap = 4194304.0f;
constexpr float kRoundMagic = 12582912.0f;
inline float RoundHalfEven(float v) {
  v = v < -kRoundCap ? -kRoundCap : (v > kRoundCap ? kRoundCap : v);
  return (v + kRoundMagic) - kRoundMagic;
}

// _gen_affine_grid's float32 grid for one image and inverse matrix (AffineNearest).
struct AffineGrid {
  float half_w, half_h, r00, r10, r20, r01, r11, r21, x_origin, row_bytes, fill_offset;
};

#if defined(TILEFEED_IMAGE_OPS_X86)
// AffineNearest's pixels [0, 8 * ((w - 1) / 8)) of one row: its float32 grid expression
// eight pixels at a time, then four bytes a pixel copied from its source (the fourth is
// the next pixel's, written next; a gather instruction is slower). Returns the pixels done.
TILEFEED_TARGET_AVX2 int AffineRowAvx2(AffineGrid g, int w, float y_r10, float y_r11,
                                       const std::uint8_t* src, std::uint8_t* out) {
  const auto set = [&](float v) TILEFEED_TARGET_AVX2 { return _mm256_set1_ps(v); };
  const auto round = [&](__m256 v) TILEFEED_TARGET_AVX2 {
    v = _mm256_min_ps(_mm256_max_ps(v, set(-kRoundCap)), set(kRoundCap));
    return _mm256_sub_ps(_mm256_add_ps(v, set(kRoundMagic)), set(kRoundMagic));
  };
  const auto source = [&](__m256 grid, float half) TILEFEED_TARGET_AVX2 {
    return round(
        _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(grid, set(1.0f)), set(half)), set(0.5f)));
  };
  const __m256 lanes = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  alignas(32) std::int32_t index[8];
  int x = 0;
  for (; x + 8 < w; x += 8) {
    const __m256 bx =
        _mm256_add_ps(_mm256_add_ps(set(static_cast<float>(x)), lanes), set(g.x_origin));
    const __m256 gx =
        _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, set(g.r00)), set(y_r10)), set(g.r20));
    const __m256 gy =
        _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, set(g.r01)), set(y_r11)), set(g.r21));
    const __m256 sx = source(gx, g.half_w);
    const __m256 sy = source(gy, g.half_h);
    const __m256 inside =
        _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(sx, _mm256_setzero_ps(), _CMP_GE_OQ),
                                    _mm256_cmp_ps(sx, set(static_cast<float>(w)), _CMP_LT_OQ)),
                      _mm256_and_ps(_mm256_cmp_ps(sy, _mm256_setzero_ps(), _CMP_GE_OQ),
                                    _mm256_cmp_ps(sy, set(g.half_h * 2.0f), _CMP_LT_OQ)));
    const __m256 offset =
        _mm256_add_ps(_mm256_mul_ps(sy, set(g.row_bytes)), _mm256_mul_ps(sx, set(3.0f)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(index),
                       _mm256_cvttps_epi32(_mm256_blendv_ps(set(g.fill_offset), offset, inside)));
    for (int k = 0; k < 8; ++k) std::memcpy(out + std::ptrdiff_t{3} * (x + k), src + index[k], 4);
  }
  return x;
}
#endif

}  // namespace

void AffineNearest(const PixelView& image, const double (&m)[6], Rgb fill,
                   ImageOpScratch& scratch) {
  const int w = image.width;
  const int h = image.height;
  const std::size_t row_bytes = std::size_t{3} * w;
  // The image, then the fill pixel, then a byte that 4-byte copies may read.
  const std::size_t fill_offset = row_bytes * h;
  scratch.bytes.resize(fill_offset + 4);
  const std::uint8_t* src = scratch.bytes.data();
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
#if defined(TILEFEED_IMAGE_OPS_X86)
  // Offsets are exact in float32 below 2^24; larger images take the scalar loop.
  const bool vector = fill_offset < (std::size_t{1} << 24) && CpuRuns(KernelSet::kAvx2);
#endif
  for (int y = 0; y < h; ++y) {
    const float by = static_cast<float>(y) + (0.5f - half_h);
    const float y_r10 = by * g.r10;
    const float y_r11 = by * g.r11;
    std::uint8_t* out = image.at(y, 0);
    int x = 0;
#if defined(TILEFEED_IMAGE_OPS_X86)
    if (vector) x = AffineRowAvx2(g, w, y_r10, y_r11, src, out);
#endif
    for (; x < w; ++x) {
      const float bx = static_cast<float>(x) + g.x_origin;
      const float gx = (bx * g.r00 + y_r10) + g.r20;
      const float gy = (bx * g.r01 + y_r11) + g.r21;
      const float sx = RoundHalfEven((gx + 1.0f) * half_w - 0.5f);
      const float sy = RoundHalfEven((gy + 1.0f) * half_h - 0.5f);
      const bool inside =
          sx >= 0.0f && sx < static_cast<float>(w) && sy >= 0.0f && sy < static_cast<float>(h);
      const std::size_t offset =
          inside ? row_bytes * static_cast<std::size_t>(sy) + 3 * static_cast<std::size_t>(sx)
                 : fill_offset;
      std::memcpy(out + std::ptrdiff_t{3} * x, src + offset, 3);
    }
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

}  // namespace tilefeed::codecs::detail
