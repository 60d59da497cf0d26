#include "codecs/resize.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "codecs/cpu_dispatch.h"
#define TILEFEED_RESIZE_AVX2 1
#endif

// Both passes are fixed-point. The vertical pass runs first, over full source rows,
// and keeps 7 fractional bits in an int16 intermediate row instead of rounding to
// uint8, so the only rounding that matters is the final one. The horizontal pass then
// reads pixel pairs of that row with plain unaligned loads: one unpack puts
// (r_k, r_k+1, g_k, g_k+1, b_k, b_k+1) next to each other and one madd applies a weight
// pair to all three channels. The AVX2, SSE2 and scalar paths do the same integer
// arithmetic and give identical results; Resizer(true) takes the SSE2 path on any
// machine, and a test compares the two bit for bit (building with
// -DTILEFEED_RESIZE_NO_AVX2 leaves the AVX2 kernels out altogether).

namespace tilefeed::codecs {
namespace {

// Vertical weights are unsigned Q16 (a lone weight of 1.0 becomes 65535, which still
// maps every value back to itself after the >> 1 below). A product of a source byte
// shifted left by 8 with such a weight, keeping the high 16 bits, is the byte times the
// weight in Q8; the sum of a filter's products is at most 255 << 8 and fits uint16.
constexpr int kVerticalBits = 16;
constexpr std::int32_t kVerticalMax = 0xffff;
// The intermediate is Q7 so that it fits int16 (255 << 7 = 32640) for madd.
constexpr int kIntermediateBits = 7;
// Horizontal weights are Q14 int16, summing to exactly 1 << 14, so that the largest
// sum, 32640 << 14, fits int32.
constexpr int kHorizontalBits = 14;
constexpr int kFinalShift = kIntermediateBits + kHorizontalBits;
constexpr std::int32_t kFinalRound = 1 << (kFinalShift - 1);

// Slack after the intermediate row beyond the widest filter: the horizontal kernel
// loads 8 int16 at a time starting up to 3 values past a pixel pair.
constexpr std::size_t kRowSlack = 16;

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// The filter of one axis in double precision: output i reads count[i] source samples
// starting at first[i] with weights weights[i * stride ...], which sum to 1.
struct FilterWork {
  int stride = 0;
  int max_count = 0;
  std::vector<double> weights;
  std::vector<int> first;
  std::vector<int> count;
};

// Computes the antialiased bilinear filter that maps [box0, box1) of a source axis of
// in_size samples onto out_size samples, following PIL's precompute_coeffs: the
// support widens with the downscale factor and is clipped to the image, not the box,
// so pixels just outside a fractional box contribute. Zero weights at either end are
// dropped so that the kernels' inner loops are as short as the filter allows.
//
// Positions are measured from floor(box0): box0 - floor(box0), box1 - box0 and every
// column minus floor(box0) come out the same in any frame whose origin is a whole pixel
// at or left of box0, so a box's filter depends only on where the box lies on the pixel
// grid. A window of an image (a region decode, an indexed pack's sub-image, a
// coefficient record's columns) therefore resizes a box bit for bit as the whole image
// does. (PIL measures from its image's column 0; the two differ by rounding only, by an
// ulp of a weight.)
void ComputeFilter(int in_size, double box0, double box1, int out_size, FilterWork& work) {
  const double scale = (box1 - box0) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;
  // Setting up the filters is a fifth of a small resize, and divisions were most of
  // that; multiplying by reciprocals moves a weight by an ulp at most.
  const double inverse_scale = 1.0 / filter_scale;
  const double anchor = std::floor(box0);
  const double offset = box0 - anchor;  // exact
  const auto anchor_index = static_cast<int>(anchor);
  work.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  work.max_count = 1;
  work.weights.resize(static_cast<std::size_t>(out_size) * work.stride);
  work.first.resize(out_size);
  work.count.resize(out_size);
  for (int i = 0; i < out_size; ++i) {
    const double center = offset + (i + 0.5) * scale;  // from the anchor
    // PIL truncates toward zero; the clamp at 0 makes that floor.
    const int xmin =
        std::max(anchor_index + static_cast<int>(std::floor(center - support + 0.5)), 0);
    const int xmax =
        std::min(anchor_index + static_cast<int>(std::floor(center + support + 0.5)), in_size);
    double* w = &work.weights[static_cast<std::size_t>(i) * work.stride];
    double total = 0;
    for (int x = xmin; x < xmax; ++x) {
      w[x - xmin] =
          Triangle((static_cast<double>(x - anchor_index) - center + 0.5) * inverse_scale);
      total += w[x - xmin];
    }
    // The source pixel nearest the center lies within half a pixel of it and weighs at
    // least 0.5 before normalization.
    assert(total > 0);
    int begin = 0;
    int end = xmax - xmin;
    while (begin < end && w[begin] == 0) ++begin;
    while (end > begin && w[end - 1] == 0) --end;
    const double inverse_total = 1.0 / total;
    for (int k = begin; k < end; ++k) w[k - begin] = w[k] * inverse_total;
    work.first[i] = xmin + begin;
    work.count[i] = end - begin;
    work.max_count = std::max(work.max_count, end - begin);
  }
}

// std::lround for the non-negative values Quantize rounds, without the library call:
// x - trunc(x) is exact, so ties go up (away from zero) exactly as lround sends them.
inline std::int32_t RoundNonNegative(double x) {
  const auto whole = static_cast<std::int32_t>(x);
  return x - whole >= 0.5 ? whole + 1 : whole;
}

// Rounds `count` weights to integers that sum to exactly `one` (the rounding residue
// goes to the largest weight; exact sums keep a constant image constant), then caps
// them at max_value. This runs for every output row and column of every call, so it
// rounds each weight once.
template <typename Int>
void Quantize(const double* w, int count, std::int32_t one, std::int32_t max_value, Int* out) {
  std::int32_t sum = 0;
  int largest = 0;
  std::int32_t largest_value = 0;
  for (int k = 0; k < count; ++k) {
    const std::int32_t v = RoundNonNegative(w[k] * one);
    sum += v;
    if (w[k] > w[largest]) largest = k;
    if (k == largest) largest_value = v;
    out[k] = static_cast<Int>(std::min(v, max_value));
  }
  out[largest] = static_cast<Int>(std::min(largest_value + one - sum, max_value));
}

// One output row of the vertical pass: out[x] = sum_k (rows[k][x] * weights[k]) >> 8,
// then >> 1 with rounding, for x in [begin, end). Source rows are caller memory and are
// never read outside [0, end).
void VerticalScalar(const std::uint8_t* const* rows, const std::uint16_t* weights, int taps,
                    std::size_t begin, std::size_t end, std::int16_t* out) {
  for (std::size_t x = begin; x < end; ++x) {
    std::uint32_t sum = 0;
    for (int k = 0; k < taps; ++k) sum += (std::uint32_t{rows[k][x]} * weights[k]) >> 8;
    out[x] = static_cast<std::int16_t>((sum + 1) >> 1);
  }
}

#if defined(__SSE2__)
// Sixteen bytes at a time with no shuffles in the tap loop: the even bytes shifted into
// the high half of each 16-bit lane, and the odd bytes masked in place, are both
// "byte << 8", and mulhi_epu16 by a Q16 weight gives (byte * weight) >> 8.
// `broadcast` holds each weight 8 times. Returns how many bytes it did.
std::size_t VerticalSse2(const std::uint8_t* const* rows, const std::uint16_t* broadcast, int taps,
                         std::size_t begin, std::size_t bytes, std::int16_t* out) {
  const __m128i odd_mask = _mm_set1_epi16(static_cast<short>(0xff00));
  const __m128i one = _mm_set1_epi16(1);
  std::size_t x = begin;
  for (; x + 16 <= bytes; x += 16) {
    __m128i even_sum = _mm_setzero_si128();
    __m128i odd_sum = _mm_setzero_si128();
    for (int k = 0; k < taps; ++k) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + x));
      const __m128i w =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(broadcast + std::ptrdiff_t{8} * k));
      even_sum = _mm_add_epi16(even_sum, _mm_mulhi_epu16(_mm_slli_epi16(v, 8), w));
      odd_sum = _mm_add_epi16(odd_sum, _mm_mulhi_epu16(_mm_and_si128(v, odd_mask), w));
    }
    even_sum = _mm_srli_epi16(_mm_add_epi16(even_sum, one), 1);
    odd_sum = _mm_srli_epi16(_mm_add_epi16(odd_sum, one), 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), _mm_unpacklo_epi16(even_sum, odd_sum));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x + 8),
                     _mm_unpackhi_epi16(even_sum, odd_sum));
  }
  return x;
}
#endif

#if defined(TILEFEED_RESIZE_AVX2)
// Rounds the Q8 sums of 16 even and 16 odd bytes to Q7 and stores them in byte order.
TILEFEED_TARGET_AVX2 inline void StoreVerticalAvx2(__m256i even_sum, __m256i odd_sum,
                                                   std::int16_t* out) {
  // avg(v, 0) is (v + 1) >> 1.
  even_sum = _mm256_avg_epu16(even_sum, _mm256_setzero_si256());
  odd_sum = _mm256_avg_epu16(odd_sum, _mm256_setzero_si256());
  // The unpacks work within 128-bit lanes: lo holds bytes 0-7 and 16-23, hi 8-15 and
  // 24-31.
  const __m256i lo = _mm256_unpacklo_epi16(even_sum, odd_sum);
  const __m256i hi = _mm256_unpackhi_epi16(even_sum, odd_sum);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute2x128_si256(lo, hi, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16),
                      _mm256_permute2x128_si256(lo, hi, 0x31));
}

// The same arithmetic as VerticalSse2, 32 bytes at a time. The build targets baseline
// x86-64, so the AVX2 kernels are compiled for AVX2 alone and chosen at run time.
//
// The multiplies are the bottleneck, so the kernel avoids other work on their ports: the
// even bytes shifted into the high half of each lane are the bytes loaded one address
// earlier and masked (an AND, which runs on any vector port, instead of a shift), and
// (sum + 1) >> 1 is one average with zero. The first chunk has no byte before it that is
// ours to read, so it shifts. A compile-time tap count keeps the weights and row
// pointers in registers; kTaps == 0 reads them from memory.
template <int kTaps>
TILEFEED_TARGET_AVX2 std::size_t VerticalAvx2(const std::uint8_t* const* rows,
                                              const std::uint16_t* broadcast, int runtime_taps,
                                              std::size_t bytes, std::int16_t* out) {
  constexpr int kSlots = std::max(kTaps, 1);
  const int taps = kTaps > 0 ? kTaps : runtime_taps;
  const __m256i odd_mask = _mm256_set1_epi16(static_cast<short>(0xff00));
  __m256i weights[kSlots];
  const std::uint8_t* row[kSlots];
  if constexpr (kTaps > 0) {
    for (int k = 0; k < kTaps; ++k) {
      weights[k] = _mm256_set1_epi16(static_cast<short>(broadcast[std::size_t{8} * k]));
      row[k] = rows[k];
    }
  }
  // Tap k's weight and source row: from registers when the tap count is fixed.
  const auto weight = [&](int k) TILEFEED_TARGET_AVX2 {
    if constexpr (kTaps > 0) return weights[k];
    return _mm256_set1_epi16(static_cast<short>(broadcast[std::size_t{8} * k]));
  };
  const auto source = [&](int k) { return kTaps > 0 ? row[k] : rows[k]; };
  if (bytes < 32) return 0;
  {
    __m256i even_sum = _mm256_setzero_si256();
    __m256i odd_sum = _mm256_setzero_si256();
    for (int k = 0; k < taps; ++k) {
      const __m256i w = weight(k);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source(k)));
      even_sum = _mm256_add_epi16(even_sum, _mm256_mulhi_epu16(_mm256_slli_epi16(v, 8), w));
      odd_sum = _mm256_add_epi16(odd_sum, _mm256_mulhi_epu16(_mm256_and_si256(v, odd_mask), w));
    }
    StoreVerticalAvx2(even_sum, odd_sum, out);
  }
  // The last chunk ends exactly at `bytes`, overlapping the one before it (it writes the
  // same values there), so that no SSE2 or scalar tail is left for short rows.
  for (std::size_t x = 32; x < bytes; x += 32) {
    if (x + 32 > bytes) x = bytes - 32;
    __m256i even_sum = _mm256_setzero_si256();
    __m256i odd_sum = _mm256_setzero_si256();
    for (int k = 0; k < taps; ++k) {
      const __m256i w = weight(k);
      const std::uint8_t* p = source(k) + x;
      const __m256i even =
          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p - 1)), odd_mask);
      const __m256i odd =
          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), odd_mask);
      even_sum = _mm256_add_epi16(even_sum, _mm256_mulhi_epu16(even, w));
      odd_sum = _mm256_add_epi16(odd_sum, _mm256_mulhi_epu16(odd, w));
    }
    StoreVerticalAvx2(even_sum, odd_sum, out + x);
  }
  return bytes;
}

std::size_t VerticalAvx2Dispatch(const std::uint8_t* const* rows, const std::uint16_t* broadcast,
                                 int taps, std::size_t bytes, std::int16_t* out) {
  // The kernel unrolled for 1..8 taps; <0> takes any count.
  static constexpr decltype(&VerticalAvx2<0>) kKernels[] = {
      VerticalAvx2<0>, VerticalAvx2<1>, VerticalAvx2<2>, VerticalAvx2<3>, VerticalAvx2<4>,
      VerticalAvx2<5>, VerticalAvx2<6>, VerticalAvx2<7>, VerticalAvx2<8>};
  return kKernels[taps >= 1 && taps <= 8 ? taps : 0](rows, broadcast, taps, bytes, out);
}
#endif

// One output row of the vertical pass over `bytes` bytes of each source row.
void VerticalPass(const std::uint8_t* const* rows, const std::uint16_t* weights,
                  const std::uint16_t* broadcast, int taps, std::size_t bytes, bool use_avx2,
                  std::int16_t* out) {
  std::size_t x = 0;
#if defined(TILEFEED_RESIZE_AVX2)
  if (use_avx2) x = VerticalAvx2Dispatch(rows, broadcast, taps, bytes, out);
#else
  (void)use_avx2;
#endif
#if defined(__SSE2__)
  x = VerticalSse2(rows, broadcast, taps, x, bytes, out);
#else
  (void)broadcast;
#endif
  VerticalScalar(rows, weights, taps, x, bytes, out);
}

[[maybe_unused]] inline std::uint8_t ClampFinal(std::int32_t sum) {
  const std::int32_t v = sum >> kFinalShift;
  return static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// The horizontal filter in destination order (mirrored when flipping): output i reads
// `pairs` pixel pairs starting at intermediate pixel first[i]; pair k of output i has
// weights (w_2k | w_2k+1 << 16) repeated 4 times at weights[(i * pairs + k) * 4].
struct HorizontalFilter {
  int pairs = 0;
  std::vector<int> first;
  std::vector<std::int32_t> weights;
};

#if defined(__SSE2__)
// The three channel sums of output i, shifted down, in lanes 0..2.
template <int kPairs>
inline __m128i HorizontalSums(const std::int16_t* row, const HorizontalFilter& filter, int i,
                              int runtime_pairs) {
  const int pairs = kPairs > 0 ? kPairs : runtime_pairs;
  const std::int16_t* src = row + 3 * static_cast<std::ptrdiff_t>(filter.first[i]);
  const std::int32_t* w = &filter.weights[static_cast<std::size_t>(i) * pairs * 4];
  __m128i acc = _mm_set1_epi32(kFinalRound);
  for (int k = 0; k < pairs; ++k) {
    // Pixels p and p+1 start 3 values apart; interleaving the two loads gives
    // r_p r_p1 g_p g_p1 b_p b_p1, plus a pair from the next pixel in the ignored lane.
    const __m128i a =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + std::ptrdiff_t{6} * k));
    const __m128i b =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + std::ptrdiff_t{6} * k + 3));
    const __m128i wk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + std::ptrdiff_t{4} * k));
    acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), wk));
  }
  return _mm_srai_epi32(acc, kFinalShift);
}

template <int kPairs>
void HorizontalPassSimd(const std::int16_t* row, const HorizontalFilter& filter, int out_width,
                        std::uint8_t* out, std::ptrdiff_t pixel_stride,
                        std::ptrdiff_t channel_stride) {
  const int pairs = filter.pairs;
  const bool packed_rgb = pixel_stride == 3 && channel_stride == 1;
  int i = 0;
  for (; i + 2 <= out_width; i += 2) {
    const __m128i a = HorizontalSums<kPairs>(row, filter, i, pairs);
    const __m128i b = HorizontalSums<kPairs>(row, filter, i + 1, pairs);
    // Saturating packs clamp to [0, 255] exactly as ClampFinal does.
    const __m128i packed = _mm_packs_epi32(a, b);
    std::uint64_t rgbx2;
    _mm_storel_epi64(reinterpret_cast<__m128i*>(&rgbx2), _mm_packus_epi16(packed, packed));
    std::uint8_t* p = out + i * pixel_stride;
    if (packed_rgb && i + 2 < out_width) {
      // Pixel i's fourth byte is overwritten by pixel i+1, and pixel i+1's by i+2.
      std::memcpy(p, &rgbx2, 4);
      const auto second = static_cast<std::uint32_t>(rgbx2 >> 32);
      std::memcpy(p + 3, &second, 4);
    } else {
      for (int c = 0; c < 3; ++c) {
        p[c * channel_stride] = static_cast<std::uint8_t>(rgbx2 >> (8 * c));
        p[pixel_stride + c * channel_stride] = static_cast<std::uint8_t>(rgbx2 >> (32 + 8 * c));
      }
    }
  }
  if (i < out_width) {
    const __m128i a = HorizontalSums<kPairs>(row, filter, i, pairs);
    const __m128i packed = _mm_packs_epi32(a, a);
    const auto rgbx =
        static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(packed, packed)));
    std::uint8_t* p = out + i * pixel_stride;
    for (int c = 0; c < 3; ++c) p[c * channel_stride] = static_cast<std::uint8_t>(rgbx >> (8 * c));
  }
}
#endif

#if defined(TILEFEED_RESIZE_AVX2)
// The horizontal filter for HorizontalAvx2, in groups of 8 destination pixels (the last
// group padded with pixels that read intermediate pixel 0 with zero weights). Register r
// of a group computes pixels 8g + r (low 128-bit lane) and 8g + r + 4 (high lane), so
// that the packs below leave the 8 pixels in order. offsets[i] is 3 * first[i]; pair k of
// register r of group g has its 8 int32 weight pairs (lane 3 of each half zero) at
// weights[((g * 4 + r) * pairs + k) * 8].
struct HorizontalFilterAvx2 {
  int groups = 0;
  std::vector<std::int32_t> offsets;
  std::vector<std::int32_t> weights;
};

void BuildHorizontalFilterAvx2(const HorizontalFilter& filter, int out_width,
                               HorizontalFilterAvx2& avx2) {
  const int pairs = filter.pairs;
  avx2.groups = (out_width + 7) / 8;
  avx2.offsets.assign(static_cast<std::size_t>(avx2.groups) * 8, 0);
  avx2.weights.assign(static_cast<std::size_t>(avx2.groups) * 4 * pairs * 8, 0);
  for (int i = 0; i < out_width; ++i) {
    avx2.offsets[i] = 3 * filter.first[i];
    const int g = i / 8;
    const int r = i % 4;
    const int half = (i % 8) / 4;
    for (int k = 0; k < pairs; ++k) {
      std::int32_t* w = &avx2.weights[((static_cast<std::size_t>(g) * 4 + r) * pairs + k) * 8];
      std::fill_n(w + std::ptrdiff_t{4} * half, 3,
                  filter.weights[(static_cast<std::size_t>(i) * pairs + k) * 4]);
    }
  }
}

// One load of 8 values at pixel p holds r g b of p and p+1; the shuffle turns it into
// r_p r_p1 g_p g_p1 b_p b_p1 for one madd with a weight pair, as the SSE2 kernel's unpack
// does with two loads. Two pixels per register, one per 128-bit lane. The arithmetic is
// the SSE2 kernel's, so the results are identical.
template <int kPairs>
TILEFEED_TARGET_AVX2 inline __m256i HorizontalSumsAvx2(const std::int16_t* low,
                                                       const std::int16_t* high,
                                                       const std::int32_t* weights,
                                                       int runtime_pairs) {
  const int pairs = kPairs > 0 ? kPairs : runtime_pairs;
  const __m256i pair_shuffle =
      _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1,  //
                       0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
  __m256i acc = _mm256_set1_epi32(kFinalRound);
  for (int k = 0; k < pairs; ++k) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(low + std::ptrdiff_t{6} * k))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(high + std::ptrdiff_t{6} * k)), 1);
    const __m256i w =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + std::ptrdiff_t{8} * k));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, pair_shuffle), w));
  }
  return _mm256_srai_epi32(acc, kFinalShift);
}

template <int kPairs>
TILEFEED_TARGET_AVX2 void HorizontalPassAvx2(const std::int16_t* row,
                                             const HorizontalFilterAvx2& filter, int pairs,
                                             int out_width, std::uint8_t* out,
                                             std::ptrdiff_t pixel_stride,
                                             std::ptrdiff_t channel_stride) {
  // Drops the fourth byte of each pixel within a lane, then moves the high lane's 12
  // bytes next to the low lane's.
  const __m256i compact_bytes =
      _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,  //
                       0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i compact_lanes = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
  const bool packed_rgb = pixel_stride == 3 && channel_stride == 1;
  const std::int32_t* offsets = filter.offsets.data();
  const std::int32_t* weights = filter.weights.data();
  const std::size_t register_weights = static_cast<std::size_t>(pairs) * 8;
  for (int g = 0; g < filter.groups; ++g, offsets += 8, weights += 4 * register_weights) {
    __m256i sums[4];
    for (int r = 0; r < 4; ++r) {
      sums[r] = HorizontalSumsAvx2<kPairs>(row + offsets[r], row + offsets[r + 4],
                                           weights + r * register_weights, pairs);
    }
    // Saturating packs clamp to [0, 255] exactly as ClampFinal does.
    const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(sums[0], sums[1]),
                                              _mm256_packs_epi32(sums[2], sums[3]));
    const __m256i rgb =
        _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(bytes, compact_bytes), compact_lanes);
    const int i = 8 * g;
    const int count = std::min(8, out_width - i);
    std::uint8_t* p = out + i * pixel_stride;
    if (packed_rgb && 3 * (out_width - i) >= 32) {
      // Bytes 24-31 land on the next group's pixels, which overwrite them.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), rgb);
    } else if (packed_rgb && count == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(rgb));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(p + 16), _mm256_extracti128_si256(rgb, 1));
    } else {
      alignas(32) std::uint8_t values[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(values), rgb);
      for (int j = 0; j < count; ++j) {
        for (int c = 0; c < 3; ++c) p[j * pixel_stride + c * channel_stride] = values[3 * j + c];
      }
    }
  }
}

void HorizontalPassAvx2Dispatch(const std::int16_t* row, const HorizontalFilterAvx2& filter,
                                int pairs, int out_width, std::uint8_t* out,
                                std::ptrdiff_t pixel_stride, std::ptrdiff_t channel_stride) {
  static constexpr decltype(&HorizontalPassAvx2<0>) kPasses[] = {
      HorizontalPassAvx2<0>, HorizontalPassAvx2<1>, HorizontalPassAvx2<2>, HorizontalPassAvx2<3>,
      HorizontalPassAvx2<4>};
  kPasses[pairs >= 1 && pairs <= 4 ? pairs : 0](row, filter, pairs, out_width, out, pixel_stride,
                                                channel_stride);
}
#endif

// Resamples one intermediate row (Q7, index 0 = the first source column any output
// reads, padded with zeros past the end) into dst row `out`.
void HorizontalPass(const std::int16_t* row, const HorizontalFilter& filter, int out_width,
                    std::uint8_t* out, std::ptrdiff_t pixel_stride, std::ptrdiff_t channel_stride) {
  const int pairs = filter.pairs;
#if defined(__SSE2__)
  // A compile-time pair count lets the compiler unroll the tap loop: 1 pair covers
  // upscaling and identity, 2 a downscale by up to about 2x, 3 up to 3x, 4 up to 4x.
  static constexpr decltype(&HorizontalPassSimd<0>) kPasses[] = {
      HorizontalPassSimd<0>, HorizontalPassSimd<1>, HorizontalPassSimd<2>, HorizontalPassSimd<3>,
      HorizontalPassSimd<4>};
  kPasses[pairs >= 1 && pairs <= 4 ? pairs : 0](row, filter, out_width, out, pixel_stride,
                                                channel_stride);
#else
  for (int i = 0; i < out_width; ++i) {
    const std::int16_t* src = row + 3 * static_cast<std::ptrdiff_t>(filter.first[i]);
    const std::int32_t* w = &filter.weights[static_cast<std::size_t>(i) * pairs * 4];
    std::int32_t sum[3] = {kFinalRound, kFinalRound, kFinalRound};
    for (int k = 0; k < 2 * pairs; ++k) {
      const std::int32_t pair = w[(k / 2) * 4];
      const auto weight = static_cast<std::int16_t>(k % 2 == 0 ? pair & 0xffff : pair >> 16);
      for (int c = 0; c < 3; ++c) sum[c] += weight * src[3 * k + c];
    }
    std::uint8_t* p = out + i * pixel_stride;
    for (int c = 0; c < 3; ++c) p[c * channel_stride] = ClampFinal(sum[c]);
  }
#endif
}

}  // namespace

struct Resizer::Scratch {
  FilterWork horizontal_work;
  FilterWork vertical_work;
  HorizontalFilter horizontal;
#if defined(TILEFEED_RESIZE_AVX2)
  HorizontalFilterAvx2 horizontal_avx2;
#endif
  std::vector<std::int16_t> taps;                // one output's horizontal weights
  std::vector<std::uint16_t> vertical_weights;   // one output row's weights
  std::vector<std::uint16_t> broadcast;          // the same, each repeated 8 times
  std::vector<const std::uint8_t*> rows;         // one output row's source rows, offset
  std::vector<const std::uint8_t*> source_rows;  // the same, at column 0 (Resize)
  // The current Start()'s destination and layout of the source columns it reads.
  PixelView dst{};
  std::size_t column_offset = 0;  // bytes from column 0 to the first column read
  std::size_t row_values = 0;     // bytes read from each source row
  bool use_avx2 = false;
  // One vertically resampled row of the columns the horizontal filter reads. Fusing the
  // passes row by row keeps it in L1 however tall the output is.
  std::vector<std::int16_t> row;
};

Resizer::Resizer() : scratch_(std::make_unique<Scratch>()) {}
Resizer::Resizer(bool portable_kernels)
    : scratch_(std::make_unique<Scratch>()), portable_kernels_(portable_kernels) {}
Resizer::~Resizer() = default;
Resizer::Resizer(Resizer&&) noexcept = default;
Resizer& Resizer::operator=(Resizer&&) noexcept = default;

void Resizer::Resize(const ConstPixelView& src, const SourceBox& box, const PixelView& dst,
                     bool flip) {
  assert(src.channels == 3 && dst.channels == 3);
  Start(src.width, src.height, box, dst, flip);
  std::vector<const std::uint8_t*>& rows = scratch_->source_rows;
  rows.resize(MaxRows());
  for (int y = 0; y < dst.height; ++y) {
    const int first = FirstRow(y);
    for (int k = 0; k < EndRow(y) - first; ++k) rows[k] = src.data + (first + k) * src.row_stride;
    ResizeRow(y, rows.data());
  }
}

void Resizer::Start(int src_width, int src_height, const SourceBox& box, const PixelView& dst,
                    bool flip) {
  assert(dst.channels == 3);
  assert(0 <= box.x0 && box.x0 < box.x1 && box.x1 <= src_width);
  assert(0 <= box.y0 && box.y0 < box.y1 && box.y1 <= src_height);
  assert(dst.width > 0 && dst.height > 0);
  if (!scratch_) scratch_ = std::make_unique<Scratch>();  // a moved-from Resizer
  Scratch& s = *scratch_;
  s.dst = dst;

  FilterWork& hw = s.horizontal_work;
  ComputeFilter(src_width, box.x0, box.x1, dst.width, hw);
  int lo = src_width;
  int hi = 0;
  for (int i = 0; i < dst.width; ++i) {
    lo = std::min(lo, hw.first[i]);
    hi = std::max(hi, hw.first[i] + hw.count[i]);
  }
  HorizontalFilter& h = s.horizontal;
  h.pairs = (hw.max_count + 1) / 2;
  h.first.resize(dst.width);
  h.weights.resize(static_cast<std::size_t>(dst.width) * h.pairs * 4);
  s.taps.resize(2 * static_cast<std::size_t>(h.pairs));
  for (int i = 0; i < dst.width; ++i) {
    // Mirroring is only a matter of which filter each output position gets.
    const int from = flip ? dst.width - 1 - i : i;
    std::fill(s.taps.begin(), s.taps.end(), 0);
    Quantize(&hw.weights[static_cast<std::size_t>(from) * hw.stride], hw.count[from],
             1 << kHorizontalBits, 1 << kHorizontalBits, s.taps.data());
    std::int32_t* w = &h.weights[static_cast<std::size_t>(i) * h.pairs * 4];
    for (int k = 0; k < h.pairs; ++k) {
      const std::int32_t pair = static_cast<std::uint16_t>(s.taps[2 * std::size_t(k)]) |
                                (static_cast<std::int32_t>(s.taps[2 * std::size_t(k) + 1]) << 16);
      std::fill_n(w + std::ptrdiff_t{4} * k, 4, pair);
    }
    h.first[i] = hw.first[from] - lo;
  }

#if defined(TILEFEED_RESIZE_AVX2) && !defined(TILEFEED_RESIZE_NO_AVX2)
  s.use_avx2 = !portable_kernels_ && detail::CpuRuns(detail::KernelSet::kAvx2);
  if (s.use_avx2) BuildHorizontalFilterAvx2(h, dst.width, s.horizontal_avx2);
#else
  s.use_avx2 = false;
#endif

  FilterWork& vw = s.vertical_work;
  ComputeFilter(src_height, box.y0, box.y1, dst.height, vw);
  s.vertical_weights.resize(vw.max_count);
  s.broadcast.resize(8 * static_cast<std::size_t>(vw.max_count));
  s.rows.resize(vw.max_count);

  s.column_offset = 3 * static_cast<std::size_t>(lo);
  s.row_values = 3 * static_cast<std::size_t>(hi - lo);
  // Outputs near the right edge read zero-weight pairs that reach past the last column.
  const std::size_t padding = 6 * static_cast<std::size_t>(h.pairs) + kRowSlack;
  if (s.row.size() < s.row_values + padding) s.row.resize(s.row_values + padding);
  std::fill_n(s.row.begin() + static_cast<std::ptrdiff_t>(s.row_values), padding, 0);
}

int Resizer::FirstRow(int y) const { return scratch_->vertical_work.first[y]; }

int Resizer::EndRow(int y) const {
  return scratch_->vertical_work.first[y] + scratch_->vertical_work.count[y];
}

int Resizer::MaxRows() const { return scratch_->vertical_work.max_count; }

void Resizer::ResizeRow(int y, const std::uint8_t* const* rows) {
  Scratch& s = *scratch_;
  const FilterWork& vw = s.vertical_work;
  const int count = vw.count[y];
  Quantize(&vw.weights[static_cast<std::size_t>(y) * vw.stride], count, 1 << kVerticalBits,
           kVerticalMax, s.vertical_weights.data());
  for (int k = 0; k < count; ++k) {
    std::fill_n(&s.broadcast[8 * static_cast<std::size_t>(k)], 8, s.vertical_weights[k]);
    s.rows[k] = rows[k] + s.column_offset;
  }
  VerticalPass(s.rows.data(), s.vertical_weights.data(), s.broadcast.data(), count, s.row_values,
               s.use_avx2, s.row.data());
  const PixelView& dst = s.dst;
  std::uint8_t* out = dst.data + y * dst.row_stride;
#if defined(TILEFEED_RESIZE_AVX2)
  if (s.use_avx2) {
    HorizontalPassAvx2Dispatch(s.row.data(), s.horizontal_avx2, s.horizontal.pairs, dst.width, out,
                               dst.pixel_stride, dst.channel_stride);
    return;
  }
#endif
  HorizontalPass(s.row.data(), s.horizontal, dst.width, out, dst.pixel_stride, dst.channel_stride);
}

void CopyPixels(const ConstPixelView& src, const PixelView& dst, bool flip) {
  assert(src.width == dst.width && src.height == dst.height && src.channels == dst.channels);
  const int width = dst.width;
  const int channels = dst.channels;
  for (int y = 0; y < dst.height; ++y) {
    const std::uint8_t* in = src.data + y * src.row_stride;
    std::uint8_t* out = dst.data + y * dst.row_stride;
    if (!flip && dst.interleaved()) {
      std::memcpy(out, in, static_cast<std::size_t>(width) * channels);
      continue;
    }
    for (int x = 0; x < width; ++x) {
      const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(flip ? width - 1 - x : x) * channels;
      std::uint8_t* q = out + x * dst.pixel_stride;
      for (int c = 0; c < channels; ++c) q[c * dst.channel_stride] = p[c];
    }
  }
}

}  // namespace tilefeed::codecs
