// The coefficient store's block unpack (codecs/coef_blocks.h).

#include "codecs/coef_blocks.h"

#include <bit>

#include "codecs/coef_format.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "codecs/cpu_dispatch.h"
#endif

namespace tilefeed::codecs::detail {
namespace {

// The two-byte little-endian value at p, as a coefficient.
std::int16_t Wide(const std::uint8_t* p) {
  return static_cast<std::int16_t>(static_cast<std::uint16_t>(p[0] | p[1] << 8));
}

// Eight bytes at a time: a byte of x ^ 0x80.. is zero where the value byte is 0x80, and
// (((y & 0x7F..) + 0x7F..) | y) has its high bit clear exactly in y's zero bytes.
std::size_t CountEscapesPortable(const std::uint8_t* values, std::size_t n) {
  constexpr std::uint64_t kHigh = 0x8080808080808080u, kLow = 0x7F7F7F7F7F7F7F7Fu;
  std::size_t count = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t y = Le64(values + i) ^ kHigh;
    count += static_cast<std::size_t>(std::popcount(~(((y & kLow) + kLow) | y) & kHigh));
  }
  for (; i < n; ++i) count += values[i] == 0x80 ? 1u : 0u;
  return count;
}

void UnpackPortable(MaskedStreams& s, int count, std::uint16_t& dc, CoefficientBlock* out) {
  for (int x = 0; x < count; ++x) {
    dc = static_cast<std::uint16_t>(dc + (s.dc[0] | s.dc[1] << 8));
    s.dc += 2;
    std::uint64_t mask = Le64(s.masks);
    s.masks += 8;
    std::int16_t* block = out[x].c;
    std::memset(block, 0, sizeof(CoefficientBlock));
    block[0] = static_cast<std::int16_t>(dc);
    for (; mask != 0; mask &= mask - 1) {
      const int byte = *s.values++;
      int value = byte - ((byte & 0x80) << 1);  // the byte read as a two's-complement int8
      if (value == -128) {
        value = Wide(s.wide);
        s.wide += 2;
      }
      block[kNatural[static_cast<unsigned>(std::countr_zero(mask))]] =
          static_cast<std::int16_t>(value);
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)

// The words of the two registers that widen the expanded bytes (unpacklo/unpackhi of each
// 128-bit lane: words 8L..8L+7 of the first hold zigzag positions 16L..16L+7, of the second
// 16L+8..16L+15): for natural index i, the word (0..31 the first register's, 32..63 the
// second's) that holds the zigzag position landing at i.
constexpr std::array<std::uint16_t, 64> WidenedWordOfNatural() {
  std::array<std::uint16_t, 64> word{};
  for (unsigned z = 0; z < 64; ++z) {
    const unsigned lane = z / 16, within = z % 16;
    word[kNatural[z]] =
        static_cast<std::uint16_t>(within < 8 ? 8 * lane + within : 32 + 8 * lane + within - 8);
  }
  return word;
}
constexpr std::array<std::uint16_t, 64> kWordOfNatural = WidenedWordOfNatural();

// The zigzag permutation's two halves (kWordOfNatural).
struct Permutation {
  __m512i first_half, second_half;
};

TILEFEED_TARGET_AVX512_VBMI2 Permutation LoadPermutation() {
  return {_mm512_loadu_si512(kWordOfNatural.data()),
          _mm512_loadu_si512(kWordOfNatural.data() + 32)};
}

// Stores a block whose value bytes are `zigzag` (byte z: position z; byte 0 unused) and
// whose DC is `dc`, as 16-bit coefficients in natural order.
TILEFEED_TARGET_AVX512_VBMI2 inline void StoreExpanded(__m512i zigzag, std::uint16_t dc,
                                                       const Permutation& p, std::int16_t* block) {
  const __m512i zero = _mm512_setzero_si512();
  // Each byte to the high half of a word, then shifted down with its sign.
  const __m512i low = _mm512_srai_epi16(_mm512_unpacklo_epi8(zero, zigzag), 8);
  const __m512i high = _mm512_srai_epi16(_mm512_unpackhi_epi8(zero, zigzag), 8);
  __m512i rows0to3 = _mm512_permutex2var_epi16(low, p.first_half, high);
  const __m512i rows4to7 = _mm512_permutex2var_epi16(low, p.second_half, high);
  rows0to3 = _mm512_mask_set1_epi16(rows0to3, 1, static_cast<short>(dc));
  _mm512_storeu_si512(block, rows0to3);
  _mm512_storeu_si512(block + 32, rows4to7);
}

TILEFEED_TARGET_AVX512_VBMI2 void UnpackAvx512(MaskedStreams& s, int count, std::uint16_t& dc,
                                               CoefficientBlock* out) {
  const Permutation perm = LoadPermutation();
  const __m512i escape = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int x = 0; x < count; ++x) {
    dc = static_cast<std::uint16_t>(dc + (s.dc[0] | s.dc[1] << 8));
    s.dc += 2;
    const std::uint64_t mask = Le64(s.masks);
    s.masks += 8;
    const auto n = static_cast<unsigned>(_mm_popcnt_u64(mask));
    // Reads exactly the block's n value bytes (the masked-off lanes are not read).
    const __m512i packed = _mm512_maskz_loadu_epi8(_bzhi_u64(~std::uint64_t{0}, n), s.values);
    s.values += n;
    const __m512i zigzag = _mm512_maskz_expand_epi8(mask, packed);  // byte z = position z
    std::int16_t* block = out[x].c;
    StoreExpanded(zigzag, dc, perm, block);
    // Escapes (0x80): the wide stream's values, in zigzag order.
    for (std::uint64_t e = _mm512_mask_cmpeq_epi8_mask(mask, zigzag, escape); e != 0; e &= e - 1) {
      block[kNatural[static_cast<unsigned>(std::countr_zero(e))]] = Wide(s.wide);
      s.wide += 2;
    }
  }
}

TILEFEED_TARGET_AVX512_VBMI2 std::size_t CountEscapesAvx512(const std::uint8_t* values,
                                                            std::size_t n) {
  const __m512i escape = _mm512_set1_epi8(static_cast<char>(0x80));
  std::size_t count = 0, i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i bytes = _mm512_loadu_si512(values + i);
    count += static_cast<std::size_t>(_mm_popcnt_u64(_mm512_cmpeq_epi8_mask(bytes, escape)));
  }
  const std::uint64_t live = _bzhi_u64(~std::uint64_t{0}, static_cast<unsigned>(n - i));
  const __m512i tail = _mm512_maskz_loadu_epi8(live, values + i);  // reads n - i bytes
  return count +
         static_cast<std::size_t>(_mm_popcnt_u64(_mm512_mask_cmpeq_epi8_mask(live, tail, escape)));
}

bool HasAvx512Expand() { return CpuRuns(KernelSet::kAvx512Vbmi2); }

#endif

}  // namespace

void UnpackMaskedBlocks(MaskedStreams& s, int count, std::uint16_t& dc, CoefficientBlock* out,
                        bool portable) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!portable && HasAvx512Expand()) {
    UnpackAvx512(s, count, dc, out);
    return;
  }
#endif
  UnpackPortable(s, count, dc, out);
}

std::size_t CountEscapes(const std::uint8_t* values, std::size_t n, bool portable) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!portable && HasAvx512Expand()) return CountEscapesAvx512(values, n);
#endif
  return CountEscapesPortable(values, n);
}

}  // namespace tilefeed::codecs::detail
