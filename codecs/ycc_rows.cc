#include "codecs/ycc_rows.h"

#include <array>
#include <cassert>
#include <cstdint>

#include "codecs/cpu_dispatch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TILEFEED_YCC_X86 1
#endif

// The arithmetic, from libjpeg-turbo's C code (the same results as its SIMD code):
//
// Fancy upsampling, h2v2: colsum = 3 * nearer row + further row, per chroma column; then
// output column 2x is (3 * colsum[x] + colsum[x - 1] + 8) >> 4 and 2x + 1 is
// (3 * colsum[x] + colsum[x + 1] + 7) >> 4, the first and last columns using their own
// colsum for the missing neighbour. h2v1: (3 * c[x] + c[x - 1] + 1) >> 2 and
// (3 * c[x] + c[x + 1] + 2) >> 2, likewise at the ends. Repeating each chroma row's first and
// last samples outside it (the caller does) makes the ends the general case.
//
// Colour, with x = Cb - 128 or Cr - 128 and FIX(v) = round(v * 65536):
//   R = Y + ((FIX(1.402) * Cr + 32768) >> 16)
//   G = Y + ((-FIX(0.34414) * Cb + 32768 - FIX(0.71414) * Cr) >> 16)
//   B = Y + ((FIX(1.772) * Cb + 32768) >> 16)
// clamped to [0, 255]. FIX(1.402) = 91881 is 65536 + 26345, so R's term is
// Cr + ((26345 * Cr + 32768) >> 16), and ((a * 2 * Cr) >> 16 + 1) >> 1 is
// (a * Cr + 32768) >> 16 exactly (nested floors), which is one 16-bit high multiply.
// FIX(1.772) = 116130 is 131072 - 14942, likewise. -FIX(0.71414) = -46802 is
// 18734 - 65536, so G's term is ((-22554 * Cb + 18734 * Cr + 32768) >> 16) - Cr: one
// multiply-add of (Cb, Cr) pairs to 32 bits. libjpeg's tables hold exactly these values
// (ycc_rows_test checks every Cb and Cr).

namespace tilefeed::codecs::detail {
namespace {

#if defined(TILEFEED_YCC_X86)

// After packus_epi16(even, odd) of a channel's 64 pixels (even: pixels 2i, odd: 2i + 1, 32
// words each), each 128-bit lane holds 8 even pixels then the 8 odd ones beside them: the
// byte that holds pixel p.
constexpr unsigned PackedByteOfPixel(unsigned p) {
  const unsigned i = p / 2;
  return 16 * (i / 8) + 8 * (p % 2) + i % 8;
}

// The byte permutations that interleave the three packed channels into 192 bytes of RGB:
// output register k is permutex2var(permutex2var(R, red_green[k], G), blue[k], B).
struct Interleave {
  std::array<std::array<std::uint8_t, 64>, 3> red_green;
  std::array<std::array<std::uint8_t, 64>, 3> blue;
};

constexpr Interleave MakeInterleave() {
  Interleave t{};
  for (unsigned k = 0; k < 3; ++k) {
    for (unsigned j = 0; j < 64; ++j) {
      const unsigned o = 64 * k + j, pixel = o / 3, channel = o % 3;
      const unsigned at = PackedByteOfPixel(pixel);
      t.red_green[k][j] = static_cast<std::uint8_t>(channel == 0 ? at : 64 + at);
      t.blue[k][j] = static_cast<std::uint8_t>(channel == 2 ? 64 + at : j);
    }
  }
  return t;
}
constexpr Interleave kInterleave = MakeInterleave();

TILEFEED_AVX512_WARNINGS_OFF  // codecs/cpu_dispatch.h

// One channel of 64 pixels as 16-bit values: pixels 2i in `even`, 2i + 1 in `odd`.
struct Split {
  __m512i even, odd;
};

TILEFEED_TARGET_AVX512_VBMI inline __m512i Widen(const std::uint8_t* p) {
  return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

TILEFEED_TARGET_AVX512_VBMI inline __m512i Times3(__m512i v) {
  return _mm512_add_epi16(_mm512_add_epi16(v, v), v);
}

// 64 consecutive samples (luma, or chroma at full resolution).
TILEFEED_TARGET_AVX512_VBMI inline Split SplitBytes(const std::uint8_t* p) {
  const __m512i v = _mm512_loadu_si512(p);
  return {_mm512_and_si512(v, _mm512_set1_epi16(0x00ff)), _mm512_srli_epi16(v, 8)};
}

// h2v1: 32 chroma samples from column x to 64 pixels.
TILEFEED_TARGET_AVX512_VBMI inline Split Upsample422(const std::uint8_t* row) {
  const __m512i three = Times3(Widen(row));
  return {_mm512_srli_epi16(
              _mm512_add_epi16(_mm512_add_epi16(three, Widen(row - 1)), _mm512_set1_epi16(1)), 2),
          _mm512_srli_epi16(
              _mm512_add_epi16(_mm512_add_epi16(three, Widen(row + 1)), _mm512_set1_epi16(2)), 2)};
}

// h2v2's column sums of 32 chroma samples.
TILEFEED_TARGET_AVX512_VBMI inline __m512i ColumnSums(const std::uint8_t* near,
                                                      const std::uint8_t* far) {
  const __m512i n = Widen(near);
  return _mm512_add_epi16(_mm512_add_epi16(n, n), _mm512_add_epi16(n, Widen(far)));
}

// h2v2: 32 chroma samples from column x of the two rows to 64 pixels.
TILEFEED_TARGET_AVX512_VBMI inline Split Upsample420(const std::uint8_t* near,
                                                     const std::uint8_t* far) {
  const __m512i three = Times3(ColumnSums(near, far));
  const __m512i left = ColumnSums(near - 1, far - 1);
  const __m512i right = ColumnSums(near + 1, far + 1);
  return {
      _mm512_srli_epi16(_mm512_add_epi16(_mm512_add_epi16(three, left), _mm512_set1_epi16(8)), 4),
      _mm512_srli_epi16(_mm512_add_epi16(_mm512_add_epi16(three, right), _mm512_set1_epi16(7)), 4)};
}

struct Rgb16 {
  __m512i r, g, b;
};

// 32 pixels' colour, unclamped (packus clamps).
TILEFEED_TARGET_AVX512_VBMI inline Rgb16 Convert(__m512i y, __m512i cb, __m512i cr) {
  const __m512i center = _mm512_set1_epi16(128);
  const __m512i one = _mm512_set1_epi16(1);
  const __m512i xb = _mm512_sub_epi16(cb, center);
  const __m512i xr = _mm512_sub_epi16(cr, center);
  const __m512i xb2 = _mm512_add_epi16(xb, xb);
  const __m512i xr2 = _mm512_add_epi16(xr, xr);
  const __m512i red = _mm512_add_epi16(
      xr, _mm512_srai_epi16(
              _mm512_add_epi16(_mm512_mulhi_epi16(xr2, _mm512_set1_epi16(26345)), one), 1));
  const __m512i blue = _mm512_add_epi16(
      xb2, _mm512_srai_epi16(
               _mm512_add_epi16(_mm512_mulhi_epi16(xb2, _mm512_set1_epi16(-14942)), one), 1));
  // Words (Cb, Cr) times (-22554, 18734), summed to 32 bits.
  const __m512i weights = _mm512_set1_epi32(static_cast<std::int32_t>(
      (std::uint32_t{18734} << 16) | static_cast<std::uint16_t>(std::int16_t{-22554})));
  const __m512i half = _mm512_set1_epi32(32768);
  const __m512i low = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_madd_epi16(_mm512_unpacklo_epi16(xb, xr), weights), half), 16);
  const __m512i high = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_madd_epi16(_mm512_unpackhi_epi16(xb, xr), weights), half), 16);
  // The unpacks and the pack both work within 128-bit lanes, so the words come back in order.
  const __m512i green = _mm512_sub_epi16(_mm512_packs_epi32(low, high), xr);
  return {_mm512_add_epi16(y, red), _mm512_add_epi16(y, green), _mm512_add_epi16(y, blue)};
}

template <ChromaSampling kSampling>
TILEFEED_TARGET_AVX512_VBMI void RowAvx512(const std::uint8_t* y, const std::uint8_t* cb_near,
                                           const std::uint8_t* cb_far, const std::uint8_t* cr_near,
                                           const std::uint8_t* cr_far, int width,
                                           std::uint8_t* out) {
  __m512i red_green[3], blue[3];
  for (int k = 0; k < 3; ++k) {
    red_green[k] = _mm512_loadu_si512(kInterleave.red_green[k].data());
    blue[k] = _mm512_loadu_si512(kInterleave.blue[k].data());
  }
  for (int x = 0; x < width; x += 64) {
    const Split luma = SplitBytes(y + x);
    Split cb{}, cr{};
    if constexpr (kSampling == ChromaSampling::k444) {
      cb = SplitBytes(cb_near + x);
      cr = SplitBytes(cr_near + x);
    } else if constexpr (kSampling == ChromaSampling::k422) {
      cb = Upsample422(cb_near + x / 2);
      cr = Upsample422(cr_near + x / 2);
    } else {
      cb = Upsample420(cb_near + x / 2, cb_far + x / 2);
      cr = Upsample420(cr_near + x / 2, cr_far + x / 2);
    }
    const Rgb16 even = Convert(luma.even, cb.even, cr.even);
    const Rgb16 odd = Convert(luma.odd, cb.odd, cr.odd);
    const __m512i r = _mm512_packus_epi16(even.r, odd.r);
    const __m512i g = _mm512_packus_epi16(even.g, odd.g);
    const __m512i b = _mm512_packus_epi16(even.b, odd.b);
    std::uint8_t* p = out + std::ptrdiff_t{3} * x;
    const int bytes = 3 * (width - x);
    for (int k = 0; k < 3; ++k) {
      const __m512i rgb =
          _mm512_permutex2var_epi8(_mm512_permutex2var_epi8(r, red_green[k], g), blue[k], b);
      const int left = bytes - 64 * k;
      if (left >= 64) {
        _mm512_storeu_si512(p + std::ptrdiff_t{64} * k, rgb);
      } else if (left > 0) {
        _mm512_mask_storeu_epi8(p + std::ptrdiff_t{64} * k, (std::uint64_t{1} << left) - 1, rgb);
      }
    }
  }
}

TILEFEED_AVX512_WARNINGS_ON

#endif  // TILEFEED_YCC_X86

}  // namespace

bool YccKernelAvailable() {
#if defined(TILEFEED_YCC_X86)
  return detail::CpuRuns(detail::KernelSet::kAvx512Vbmi);
#else
  return false;
#endif
}

void YccToRgbRow(ChromaSampling sampling, const std::uint8_t* y, const std::uint8_t* cb_near,
                 const std::uint8_t* cb_far, const std::uint8_t* cr_near,
                 const std::uint8_t* cr_far, int width, std::uint8_t* out) {
  assert(YccKernelAvailable() && width >= 1);
#if defined(TILEFEED_YCC_X86)
  switch (sampling) {
    case ChromaSampling::k444:
      return RowAvx512<ChromaSampling::k444>(y, cb_near, cb_far, cr_near, cr_far, width, out);
    case ChromaSampling::k422:
      return RowAvx512<ChromaSampling::k422>(y, cb_near, cb_far, cr_near, cr_far, width, out);
    case ChromaSampling::k420:
      return RowAvx512<ChromaSampling::k420>(y, cb_near, cb_far, cr_near, cr_far, width, out);
  }
#else
  (void)sampling, (void)y, (void)cb_near, (void)cb_far, (void)cr_near, (void)cr_far, (void)width,
      (void)out;
#endif
}

}  // namespace tilefeed::codecs::detail
