#include "codecs/image_ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "codecs/cpu_dispatch.h"
#define TILEFEED_IMAGE_OPS_X86 1
#endif

// torchvision computes these ops in float32 on the uint8 values and truncates to uint8.
// Where an op maps each value through a function of that value alone (brightness,
// contrast, posterize, solarize, autocontrast, equalize) the float32 expression is
// evaluated once per level into a table, so the table op is exact. A blend of two images
// (saturation, sharpness) and the luma (grayscale, saturation) depend on two or three
// values; no integer form reproduces float32's rounding where the result lies on a whole
// level (x == y in a blend is common), so they evaluate torchvision's float32 expression,
// in its order, several values at a time. The file is built with -ffp-contract=off: a
// fused multiply-add would round differently from torch. Every vector kernel does whole
// groups and leaves the rest of a row to the scalar code beside it, which is the whole op
// on a CPU without the kernel's instructions.

namespace tilefeed::codecs {
namespace {

using Lut = std::array<std::uint8_t, 256>;

#if defined(TILEFEED_IMAGE_OPS_X86)
bool HasAvx2() { return detail::CpuRuns(detail::KernelSet::kAvx2); }
#endif

// Every row of `image`, as (row pointer, bytes in the row).
template <typename Fn>
void ForEachRow(const PixelView& image, Fn fn) {
  assert(image.interleaved() && image.channels == 3 && image.width > 0 && image.height > 0);
  const std::size_t bytes = std::size_t{3} * image.width;
  for (int y = 0; y < image.height; ++y) fn(image.data + y * image.row_stride, bytes);
}

#if defined(TILEFEED_IMAGE_OPS_X86)
// Bit j of kChannelMasks[phase][c] is set when byte j of a 64-byte block whose first byte
// is channel `phase` belongs to channel c.
constexpr std::array<std::array<std::uint64_t, 3>, 3> MakeChannelMasks() {
  std::array<std::array<std::uint64_t, 3>, 3> masks{};
  for (int phase = 0; phase < 3; ++phase) {
    for (int j = 0; j < 64; ++j) masks[phase][(phase + j) % 3] |= std::uint64_t{1} << j;
  }
  return masks;
}
constexpr auto kChannelMasks = MakeChannelMasks();

// ApplyLuts on one row, 64 values at a time: each table is two 128-byte halves that VBMI
// permutes index with a value's low seven bits; its top bit picks the half. A masked load
// and store do the row's end. kTables is 1 when the three channels share a table.
template <int kTables>
TILEFEED_TARGET_AVX512_VBMI void LutRowAvx512(std::uint8_t* p, std::size_t bytes,
                                              const Lut* const (&luts)[3]) {
  __m512i t[kTables][4];
  for (int c = 0; c < kTables; ++c) {
    for (int k = 0; k < 4; ++k)
      t[c][k] = _mm512_loadu_si512(luts[c]->data() + std::ptrdiff_t{64} * k);
  }
  for (std::size_t i = 0; i < bytes; i += 64) {
    const __mmask64 live = bytes - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (bytes - i)) - 1;
    const __m512i x = _mm512_maskz_loadu_epi8(live, p + i);
    const __mmask64 high = _mm512_movepi8_mask(x);
    __m512i out = x;
    for (int c = 0; c < kTables; ++c) {
      const __m512i v = _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(t[c][0], x, t[c][1]),
                                               _mm512_permutex2var_epi8(t[c][2], x, t[c][3]));
      out = kTables == 1 ? v : _mm512_mask_blend_epi8(kChannelMasks[i % 3][c], out, v);
    }
    _mm512_mask_storeu_epi8(p + i, live, out);
  }
}
#endif

void ApplyLuts(const PixelView& image, const Lut& r, const Lut& g, const Lut& b) {
#if defined(TILEFEED_IMAGE_OPS_X86)
  if (detail::CpuRuns(detail::KernelSet::kAvx512Vbmi)) {
    const Lut* const luts[3] = {&r, &g, &b};
    const bool shared = &r == &g && &g == &b;
    return ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
      if (shared) return LutRowAvx512<1>(p, bytes, luts);
      LutRowAvx512<3>(p, bytes, luts);
    });
  }
#endif
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; i += 3) {
      p[i] = r[p[i]];
      p[i + 1] = g[p[i + 1]];
      p[i + 2] = b[p[i + 2]];
    }
  });
}

void ApplyLut(const PixelView& image, const Lut& lut) { ApplyLuts(image, lut, lut, lut); }

// _blend: (ratio * x + (1 - ratio) * y).clamp(0, 255).to(uint8) in float32, `other` = 1 - ratio;
// NaN (a ratio beyond float32) is 0, as torch writes it and the AVX2 kernel's max(v, 0) does.
inline std::uint8_t BlendValue(float ratio, float other, float x, float y) {
  return static_cast<std::uint8_t>(std::fmin(std::fmax(ratio * x + other * y, 0.0f), 255.0f));
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

// rgb_to_grayscale: (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8), in float32.
inline std::uint8_t Luma(const std::uint8_t* p) {
  const float v = 0.2989f * static_cast<float>(p[0]) + 0.587f * static_cast<float>(p[1]) +
                  0.114f * static_cast<float>(p[2]);
  return static_cast<std::uint8_t>(v);
}

#if defined(TILEFEED_IMAGE_OPS_X86)
TILEFEED_TARGET_AVX2 inline __m128i Load16(const std::uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
TILEFEED_TARGET_AVX2 inline void Store16(std::uint8_t* p, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}

// The low 8 bytes of v as floats.
TILEFEED_TARGET_AVX2 inline __m256 Widen(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

// Sixteen int32 lanes that hold bytes, as 16 bytes in order (packs works within 128-bit
// lanes; the permute puts the values back in order).
TILEFEED_TARGET_AVX2 inline __m128i PackBytes(__m256i low, __m256i high) {
  const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), 0xd8);
  return _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
}

// BlendValue of 16 values.
TILEFEED_TARGET_AVX2 inline __m128i Blend16(__m128i x, __m128i y, __m256 ratio, __m256 other) {
  __m256i half[2];
  for (int k = 0; k < 2; ++k) {
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(ratio, Widen(k == 0 ? x : _mm_srli_si128(x, 8))),
                                   _mm256_mul_ps(other, Widen(k == 0 ? y : _mm_srli_si128(y, 8))));
    half[k] = _mm256_cvttps_epi32(
        _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f)));
  }
  return PackBytes(half[0], half[1]);
}

TILEFEED_TARGET_AVX2 std::size_t BlendRowAvx2(std::uint8_t* x, const std::uint8_t* y, std::size_t n,
                                              const BlendRatio& b) {
  const __m256 ratio = _mm256_set1_ps(b.ratio);
  const __m256 other = _mm256_set1_ps(b.other);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(x + i, Blend16(Load16(x + i), Load16(y + i), ratio, other));
  return i;
}
#endif

// x[i] = _blend(x[i], y[i]) for n values.
void BlendRow(std::uint8_t* x, const std::uint8_t* y, std::size_t n, const BlendRatio& b) {
  std::size_t i = 0;
#if defined(TILEFEED_IMAGE_OPS_X86)
  if (HasAvx2()) i = BlendRowAvx2(x, y, n, b);
#endif
  for (; i < n; ++i) {
    x[i] = BlendValue(b.ratio, b.other, static_cast<float>(x[i]), static_cast<float>(y[i]));
  }
}

#if defined(TILEFEED_IMAGE_OPS_X86)
// Byte shuffles between 16 interleaved RGB pixels (three registers) and 16 values of one
// channel: gather[c][k] moves channel c's bytes held in register k to their pixel's lane,
// spread[k] fills register k of the output with each pixel's value three times.
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

TILEFEED_TARGET_AVX2 inline __m128i Mask(const std::int8_t* m) {
  return _mm_load_si128(reinterpret_cast<const __m128i*>(m));
}

// Luma's float32 expression for 8 values of each channel.
TILEFEED_TARGET_AVX2 inline __m256i LumaAvx2(__m128i r, __m128i g, __m128i b) {
  const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(0.2989f), Widen(r)),
                                               _mm256_mul_ps(_mm256_set1_ps(0.587f), Widen(g))),
                                 _mm256_mul_ps(_mm256_set1_ps(0.114f), Widen(b)));
  return _mm256_cvttps_epi32(v);
}

// The luma of the 16 RGB pixels at `in` (48 bytes).
TILEFEED_TARGET_AVX2 inline __m128i Luma16(const std::uint8_t* in) {
  const GrayShuffles& s = kGrayShuffles;
  const __m128i v[3] = {Load16(in), Load16(in + 16), Load16(in + 32)};
  __m128i channel[3];
  for (int c = 0; c < 3; ++c) {
    channel[c] = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(v[0], Mask(s.gather[c][0])),
                                           _mm_shuffle_epi8(v[1], Mask(s.gather[c][1]))),
                              _mm_shuffle_epi8(v[2], Mask(s.gather[c][2])));
  }
  return PackBytes(LumaAvx2(channel[0], channel[1], channel[2]),
                   LumaAvx2(_mm_srli_si128(channel[0], 8), _mm_srli_si128(channel[1], 8),
                            _mm_srli_si128(channel[2], 8)));
}

// Each pixel's luma three times, in place, for whole groups of 16 pixels; returns the bytes
// done.
TILEFEED_TARGET_AVX2 std::size_t GrayRowAvx2(std::uint8_t* p, std::size_t bytes) {
  std::size_t i = 0;
  for (; i + 48 <= bytes; i += 48) {
    const __m128i luma = Luma16(p + i);
    for (int k = 0; k < 3; ++k) {
      Store16(p + i + std::ptrdiff_t{16} * k,
              _mm_shuffle_epi8(luma, Mask(kGrayShuffles.spread[k])));
    }
  }
  return i;
}

// Adds the lumas of whole groups of 16 pixels to `sum`; returns the bytes done.
TILEFEED_TARGET_AVX2 std::size_t LumaSumAvx2(const std::uint8_t* p, std::size_t bytes,
                                             std::uint64_t& sum) {
  __m128i total = _mm_setzero_si128();
  std::size_t i = 0;
  for (; i + 48 <= bytes; i += 48) {
    total = _mm_add_epi64(total, _mm_sad_epu8(Luma16(p + i), _mm_setzero_si128()));
  }
  sum += static_cast<std::uint64_t>(_mm_cvtsi128_si64(total) + _mm_extract_epi64(total, 1));
  return i;
}

// Each value blended with its pixel's luma, in place, for whole groups of 16 pixels;
// returns the bytes done.
TILEFEED_TARGET_AVX2 std::size_t SaturationRowAvx2(std::uint8_t* p, std::size_t bytes,
                                                   const BlendRatio& b) {
  const __m256 ratio = _mm256_set1_ps(b.ratio);
  const __m256 other = _mm256_set1_ps(b.other);
  std::size_t i = 0;
  for (; i + 48 <= bytes; i += 48) {
    const __m128i luma = Luma16(p + i);
    for (int k = 0; k < 3; ++k) {
      std::uint8_t* q = p + i + std::ptrdiff_t{16} * k;
      const __m128i gray = _mm_shuffle_epi8(luma, Mask(kGrayShuffles.spread[k]));
      Store16(q, Blend16(Load16(q), gray, ratio, other));
    }
  }
  return i;
}
#endif

// Sharpness's smoothing of the values [3, bytes - 3) of row `mid` into `out`: conv2d with
// [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13 rounded to uint8. sum / 13 is never within 1/26
// of a half, so rounding (2 * sum + 13) / 26 down is the float32 result rounded.
// kDiv26 turns that division into a multiply and a shift for every 16-bit numerator.
constexpr int kDiv26 = 40330;
static_assert([] {
  for (int v = 0; v <= 2 * 13 * 255 + 13; ++v) {
    if ((v * kDiv26) >> 20 != v / 26) return false;
  }
  return true;
}());

#if defined(TILEFEED_IMAGE_OPS_X86)
TILEFEED_TARGET_AVX2 std::size_t SmoothRowAvx2(const std::uint8_t* up, const std::uint8_t* mid,
                                               const std::uint8_t* down, std::size_t bytes,
                                               std::uint8_t* out) {
  const auto wide = [&](const std::uint8_t* p)
                        TILEFEED_TARGET_AVX2 { return _mm256_cvtepu8_epi16(Load16(p)); };
  std::size_t i = 3;
  for (; i + 19 <= bytes; i += 16) {
    __m256i sum = _mm256_slli_epi16(wide(mid + i), 2);
    for (const std::uint8_t* row : {up, mid, down}) {
      sum = _mm256_add_epi16(
          sum,
          _mm256_add_epi16(_mm256_add_epi16(wide(row + i - 3), wide(row + i)), wide(row + i + 3)));
    }
    const __m256i numerator = _mm256_add_epi16(_mm256_add_epi16(sum, sum), _mm256_set1_epi16(13));
    const __m256i q = _mm256_srli_epi16(
        _mm256_mulhi_epu16(numerator, _mm256_set1_epi16(static_cast<std::int16_t>(kDiv26))), 4);
    Store16(out + i, _mm_packus_epi16(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
  }
  return i;
}
#endif

void SmoothRow(const std::uint8_t* up, const std::uint8_t* mid, const std::uint8_t* down,
               std::size_t bytes, std::uint8_t* out) {
  std::size_t i = 3;
#if defined(TILEFEED_IMAGE_OPS_X86)
  if (HasAvx2()) i = SmoothRowAvx2(up, mid, down, bytes, out);
#endif
  for (; i + 3 < bytes; ++i) {
    int sum = 4 * mid[i];
    for (const std::uint8_t* row : {up, mid, down}) sum += row[i - 3] + row[i] + row[i + 3];
    out[i] = static_cast<std::uint8_t>((2 * sum + 13) / 26);
  }
}

#if defined(__SSE2__)
// mask ? a : b, lane by lane.
inline __m128 Select(__m128 mask, __m128 a, __m128 b) {
  return _mm_or_ps(_mm_and_ps(mask, a), _mm_andnot_ps(mask, b));
}
#endif

// Pixels per chunk of AdjustHue, which converts a chunk to float planes on the stack.
constexpr std::size_t kChunkPixels = 256;

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
    std::size_t i = 0;
#if defined(TILEFEED_IMAGE_OPS_X86)
    if (HasAvx2()) i = LumaSumAvx2(p, bytes, sum);
#endif
    for (; i < bytes; i += 3) sum += Luma(p + i);
  });
  const float mean = static_cast<float>(sum) /
                     static_cast<float>(static_cast<std::int64_t>(image.width) * image.height);
  ApplyLut(image, BlendLut(BlendRatio(factor), mean));
}

void AdjustSaturation(const PixelView& image, double factor) {
  assert(factor >= 0);
  const BlendRatio b(factor);
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    std::size_t i = 0;
#if defined(TILEFEED_IMAGE_OPS_X86)
    if (HasAvx2()) i = SaturationRowAvx2(p, bytes, b);
#endif
    for (; i < bytes; i += 3) {
      const auto gray = static_cast<float>(Luma(p + i));
      for (int c = 0; c < 3; ++c) {
        p[i + c] = BlendValue(b.ratio, b.other, static_cast<float>(p[i + c]), gray);
      }
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
  // A copy of the image, then one smoothed row.
  scratch.bytes.resize(row_bytes * (h + 1));
  std::uint8_t* copy = scratch.bytes.data();
  std::uint8_t* smooth = copy + row_bytes * h;
  for (int y = 0; y < h; ++y) std::memcpy(copy + row_bytes * y, image.at(y, 0), row_bytes);
  for (int y = 0; y < h; ++y) {
    const std::uint8_t* mid = copy + row_bytes * y;
    std::memcpy(smooth, mid, row_bytes);  // the border keeps the image's values
    if (y > 0 && y < h - 1) SmoothRow(mid - row_bytes, mid, mid + row_bytes, row_bytes, smooth);
    BlendRow(image.at(y, 0), smooth, row_bytes, ratio);
  }
}

void Grayscale(const PixelView& image) {
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    std::size_t i = 0;
#if defined(TILEFEED_IMAGE_OPS_X86)
    if (HasAvx2()) i = GrayRowAvx2(p, bytes);
#endif
    for (; i < bytes; i += 3) std::memset(p + i, Luma(p + i), 3);
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
  // Byte j of each 48-byte group is channel j % 3: the loop over j vectorizes.
  std::array<std::uint8_t, 48> low;
  std::array<std::uint8_t, 48> high{};
  low.fill(255);
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    std::size_t i = 0;
    for (; i + 48 <= bytes; i += 48) {
      std::uint8_t v[48];  // a copy the compiler knows low and high do not alias
      std::memcpy(v, p + i, 48);
      for (std::size_t j = 0; j < 48; ++j) {
        low[j] = std::min(low[j], v[j]);
        high[j] = std::max(high[j], v[j]);
      }
    }
    for (; i < bytes; ++i) {
      low[i % 48] = std::min(low[i % 48], p[i]);
      high[i % 48] = std::max(high[i % 48], p[i]);
    }
  });
  std::array<std::uint8_t, 3> lo = {255, 255, 255};
  std::array<std::uint8_t, 3> hi = {0, 0, 0};
  for (int j = 0; j < 48; ++j) {
    lo[j % 3] = std::min(lo[j % 3], low[j]);
    hi[j % 3] = std::max(hi[j % 3], high[j]);
  }
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
  // Two histograms a channel, of even and odd pixels: neighbours often share a value, and
  // one table would make each count wait for the last one's store.
  std::array<std::array<std::int64_t, 256>, 6> counts{};
  ForEachRow(image, [&](std::uint8_t* p, std::size_t bytes) {
    std::size_t i = 0;
    for (; i + 6 <= bytes; i += 6) {
      for (int k = 0; k < 6; ++k) ++counts[k][p[i + k]];
    }
    for (std::size_t k = 0; i + k < bytes; ++k) ++counts[k][p[i + k]];
  });
  std::array<std::array<std::int64_t, 256>, 3> hist;
  for (int c = 0; c < 3; ++c) {
    for (int x = 0; x < 256; ++x) hist[c][x] = counts[c][x] + counts[c + 3][x];
  }
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
  const double shear = std::atan(magnitude) / detail::kDegToRad;
  switch (op) {
    case PolicyOp::kIdentity:
      return;
    case PolicyOp::kShearX:
      detail::InverseAffine(corner_x, corner_y, 0.0, shear, 0.0, m);
      return detail::AffineNearest(image, m, fill, scratch);
    case PolicyOp::kShearY:
      detail::InverseAffine(corner_x, corner_y, 0.0, 0.0, shear, m);
      return detail::AffineNearest(image, m, fill, scratch);
    case PolicyOp::kTranslateX:
      return detail::Translate(image, static_cast<int>(magnitude), 0, fill);
    case PolicyOp::kTranslateY:
      return detail::Translate(image, 0, static_cast<int>(magnitude), fill);
    case PolicyOp::kRotate:
      // F.rotate turns counter-clockwise: the affine matrix of -angle.
      detail::InverseAffine(0.0, 0.0, -magnitude, 0.0, 0.0, m);
      return detail::AffineNearest(image, m, fill, scratch);
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
