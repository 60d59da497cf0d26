// Canonical Huffman coding of version-2 coefficient groups (codecs/coef_huffman.h).
//
// Why Huffman and not zstd: zstd 1 meets the byte goal but decodes at a third of LZ4's
// speed on these small groups (bench/RESULTS-coef.md). The groups' bytes have little
// left for a match finder once split into masks and values; what they have is skewed
// byte statistics per role (a mask's high bytes are nearly always zero, values are mostly
// +-1). An order-0 code per role gets most of zstd's gain, and its decoder is one 2^11
// entry lookup per byte, four streams interleaved so that the lookups overlap.

#include "codecs/coef_huffman.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <functional>
#include <queue>
#include <tuple>
#include <utility>

#include "codecs/coef_format.h"
#include "codecs/cpu_dispatch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tilefeed::codecs::detail {
namespace {

constexpr int kLookupBits = kHuffMaxLength;
constexpr std::size_t kLookupSize = std::size_t{1} << kLookupBits;

// One segment of a group's raw bytes: where it starts, how many bytes, and its table.
struct Segment {
  std::size_t offset, count;
  int table;
};

// The six segments of a group whose component-0 values are `first_values` bytes; the
// last takes whatever of `size` remains (size >= 10 * blocks + first_values).
std::array<Segment, 6> Segments(HuffGroupShape shape, std::size_t size, std::size_t first_values,
                                int classes) {
  const std::size_t k = shape.blocks, k0 = shape.first_blocks, k1 = k - k0;
  const int other = (classes - 1) * kHuffTablesPerClass;  // class 1's tables (or class 0's)
  const std::size_t values = 10 * k;
  return {{{0, 2 * k0, 0},
           {2 * k0, 2 * k1, other},
           {2 * k, 8 * k0, 1},
           {2 * k + 8 * k0, 8 * k1, other + 1},
           {values, first_values, 2},
           {values + first_values, size - values - first_values, other + 2}}};
}

// The sum of the masks' popcounts; inlined into both versions of CountMaskBits, so that
// std::popcount is compiled once for the baseline and once as the POPCNT instruction.
[[gnu::always_inline]] inline std::size_t SumMaskBits(const std::uint8_t* masks,
                                                      std::size_t blocks) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < blocks; ++i) {
    n += static_cast<std::size_t>(std::popcount(Le64(masks + 8 * i)));
  }
  return n;
}

#if defined(__x86_64__)
TILEFEED_TARGET_POPCNT std::size_t SumMaskBitsPopcnt(const std::uint8_t* masks,
                                                     std::size_t blocks) {
  return SumMaskBits(masks, blocks);
}
#endif

// Component 0's value bytes: the popcounts of its masks.
std::size_t FirstValues(const std::uint8_t* raw, HuffGroupShape shape) {
  return CountMaskBits(raw + 2 * shape.blocks, shape.first_blocks);
}

// Part i (of 4) of a segment of `count` bytes: [begin, end).
std::pair<std::size_t, std::size_t> Part(std::size_t count, int i) {
  const std::size_t quarter = (count + 3) / 4;
  const std::size_t begin = std::min(count, quarter * static_cast<std::size_t>(i));
  return {begin, std::min(count, begin + quarter)};
}

// Code lengths of a Huffman code for `freq`, limited to kHuffMaxLength bits (the length
// limiting of the JPEG standard, Annex K.3). Needs at least two symbols.
std::array<std::uint8_t, 256> CodeLengths(const std::array<std::uint64_t, 256>& freq) {
  using Node = std::pair<std::uint64_t, int>;
  std::priority_queue<Node, std::vector<Node>, std::greater<>> heap;
  std::array<int, 512> parent{};
  for (int s = 0; s < 256; ++s) {
    if (freq[s] != 0) heap.emplace(freq[s], s);
  }
  int next = 256;
  while (heap.size() > 1) {
    const Node a = heap.top();
    heap.pop();
    const Node b = heap.top();
    heap.pop();
    parent[a.second] = parent[b.second] = next;
    heap.emplace(a.first + b.first, next++);
  }
  const int root = next - 1;
  std::array<int, 512> bits{};  // symbols per depth
  for (int s = 0; s < 256; ++s) {
    if (freq[s] == 0) continue;
    int depth = 0;
    for (int n = s; n != root; n = parent[n]) ++depth;
    ++bits[depth];
  }
  for (int i = 511; i > kHuffMaxLength; --i) {
    while (bits[i] > 0) {  // move two leaves up, split a shorter one: Kraft sum kept
      int j = i - 2;
      while (bits[j] == 0) --j;
      bits[i] -= 2;
      bits[i - 1] += 1;
      bits[j + 1] += 2;
      bits[j] -= 1;
    }
  }
  std::array<int, 256> order{};
  for (int s = 0; s < 256; ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return freq[a] > freq[b]; });
  std::array<std::uint8_t, 256> lengths{};
  int at = 0;
  for (int len = 1; len <= kHuffMaxLength; ++len) {
    for (int n = 0; n < bits[len]; ++n) lengths[order[at++]] = static_cast<std::uint8_t>(len);
  }
  return lengths;
}

// The canonical codes of `lengths`: by length, then by byte value, counting up.
std::array<std::uint16_t, 256> CanonicalCodes(const std::array<std::uint8_t, 256>& lengths) {
  std::array<unsigned, kHuffMaxLength + 1> count{}, next{};
  for (int s = 0; s < 256; ++s) ++count[lengths[s]];
  count[0] = 0;
  for (int len = 1, code = 0; len <= kHuffMaxLength; ++len) {
    code = (code + static_cast<int>(count[len - 1])) << 1;
    next[len] = static_cast<unsigned>(code);
  }
  std::array<std::uint16_t, 256> codes{};
  for (int s = 0; s < 256; ++s) {
    if (lengths[s] != 0) codes[s] = static_cast<std::uint16_t>(next[lengths[s]]++);
  }
  return codes;
}

// Writes codes most significant bit first; pads the last byte with zero bits.
class BitWriter {
 public:
  explicit BitWriter(std::vector<std::byte>& out) : out_(out) {}
  void Put(unsigned code, int length) {
    acc_ = (acc_ << length) | code;
    filled_ += length;
    while (filled_ >= 8) {
      filled_ -= 8;
      out_.push_back(std::byte((acc_ >> filled_) & 0xFF));
    }
  }
  void Flush() {
    if (filled_ > 0) out_.push_back(std::byte((acc_ << (8 - filled_)) & 0xFF));
    filled_ = 0;
  }

 private:
  std::vector<std::byte>& out_;
  std::uint64_t acc_ = 0;
  int filled_ = 0;
};

}  // namespace

std::size_t CountMaskBits(const std::uint8_t* masks, std::size_t blocks, bool portable) {
#if defined(__x86_64__)
  if (!portable && detail::CpuRuns(detail::KernelSet::kPopcnt))
    return SumMaskBitsPopcnt(masks, blocks);
#endif
  return SumMaskBits(masks, blocks);
}

HuffEncoder::HuffEncoder(int classes)
    : classes_(classes),
      counts_(std::size_t(classes) * kHuffTablesPerClass),
      lengths_(counts_.size()),
      codes_(counts_.size()),
      constant_(counts_.size(), -1) {
  assert(classes == 1 || classes == 2);
}

void HuffEncoder::Count(const std::uint8_t* raw, std::size_t size, HuffGroupShape shape) {
  for (const Segment& s : Segments(shape, size, FirstValues(raw, shape), classes_)) {
    for (std::size_t j = 0; j < s.count; ++j) ++counts_[std::size_t(s.table)][raw[s.offset + j]];
  }
}

void HuffEncoder::Finish() {
  for (std::size_t t = 0; t < counts_.size(); ++t) {
    int used = 0, last = 0;
    for (int s = 0; s < 256; ++s) {
      if (counts_[t][s] != 0) ++used, last = s;
    }
    lengths_[t].fill(0);
    if (used <= 1) {  // zero or one byte value: no bits at all
      constant_[t] = last;
      continue;
    }
    lengths_[t] = CodeLengths(counts_[t]);
    codes_[t] = CanonicalCodes(lengths_[t]);
  }
}

void HuffEncoder::AppendTables(std::vector<std::byte>& out) const {
  for (std::size_t t = 0; t < lengths_.size(); ++t) {
    if (constant_[t] >= 0) {
      out.push_back(std::byte{0});
      out.push_back(std::byte(constant_[t]));
      continue;
    }
    int last = 255;
    while (lengths_[t][last] == 0) --last;
    out.push_back(std::byte{1});
    out.push_back(std::byte(last));
    for (int s = 0; s <= last; s += 2) {
      const unsigned high = s + 1 <= last ? lengths_[t][s + 1] : 0u;
      out.push_back(std::byte(lengths_[t][s] | high << 4));
    }
  }
}

void HuffEncoder::AppendGroup(const std::uint8_t* raw, std::size_t size, HuffGroupShape shape,
                              std::vector<std::byte>& out) const {
  const std::size_t header = out.size();
  out.resize(header + kHuffGroupHeader);
  const auto segments = Segments(shape, size, FirstValues(raw, shape), classes_);
  std::size_t stream_begin = out.size();
  for (int i = 0; i < 4; ++i) {
    BitWriter bits(out);
    for (const Segment& s : segments) {
      const auto [begin, end] = Part(s.count, i);
      const auto t = std::size_t(s.table);
      for (std::size_t j = begin; j < end; ++j) {
        const std::uint8_t byte = raw[s.offset + j];
        assert(constant_[t] < 0 ? lengths_[t][byte] != 0 : constant_[t] == byte);
        bits.Put(codes_[t][byte], lengths_[t][byte]);
      }
    }
    bits.Flush();
    if (i < 3) {
      const std::size_t n = out.size() - stream_begin;
      for (int b = 0; b < 4; ++b)
        out[header + 4 * std::size_t(i) + b] = std::byte((n >> 8 * b) & 0xFF);
    }
    stream_begin = out.size();
  }
}

namespace {

// The bytes of up to three whole codes that the 11 bits of a lookup hold, from a value
// table (single: its one-code entries): bytes in bits 0..23 (the first lowest), the bits
// they take in 24..27, how many in 28..29. Branch-free: three dependent lookups.
void BuildMulti(const std::uint16_t* single, std::uint32_t* multi) {
  constexpr unsigned kMask = kLookupSize - 1;
  for (unsigned index = 0; index < kLookupSize; ++index) {
    const unsigned e1 = single[index], l1 = e1 >> 8;
    const unsigned e2 = single[(index << l1) & kMask], l2 = e2 >> 8;
    const unsigned two = l1 + l2 <= kLookupBits ? 1u : 0u;
    const unsigned e3 = single[(index << (l1 + l2)) & kMask], l3 = e3 >> 8;
    const unsigned three = two & (l1 + l2 + l3 <= kLookupBits ? 1u : 0u);
    const unsigned bits = l1 + two * l2 + three * l3;
    multi[index] = (e1 & 0xFFu) | two * ((e2 & 0xFFu) << 8) | three * ((e3 & 0xFFu) << 16) |
                   bits << 24 | (1 + two + three) << 28;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
TILEFEED_AVX512_WARNINGS_OFF  // codecs/cpu_dispatch.h
// The entries of `single` at the sixteen indexes `at`.
TILEFEED_TARGET_AVX512 inline __m512i Gather16(const std::uint16_t* single, __m512i at) {
  const __m512i word = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, at, single, 2);
  return _mm512_and_si512(word, _mm512_set1_epi32(0xFFFF));
}

// BuildMulti sixteen indexes at a time, with AVX-512 gathers: the scalar loop's three
// dependent lookups per entry were ~65 % of reading a record's tables. Each gather reads
// 32 bits at a 16-bit entry and keeps the low half, so `single` needs one readable entry
// past its end (ReadTables pads entries_).
TILEFEED_TARGET_AVX512 void BuildMultiAvx512(const std::uint16_t* single, std::uint32_t* multi) {
  const __m512i low8 = _mm512_set1_epi32(0xFF);
  const __m512i index_mask = _mm512_set1_epi32(static_cast<int>(kLookupSize - 1));
  const __m512i lookup_bits = _mm512_set1_epi32(kLookupBits), one = _mm512_set1_epi32(1);
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (unsigned i = 0; i < kLookupSize; i += 16) {
    const __m512i e1 = Gather16(single, index);
    const __m512i l1 = _mm512_srli_epi32(e1, 8);
    const __m512i e2 = Gather16(single, _mm512_and_si512(_mm512_sllv_epi32(index, l1), index_mask));
    const __m512i l12 = _mm512_add_epi32(l1, _mm512_srli_epi32(e2, 8));
    const __m512i e3 =
        Gather16(single, _mm512_and_si512(_mm512_sllv_epi32(index, l12), index_mask));
    const __m512i l123 = _mm512_add_epi32(l12, _mm512_srli_epi32(e3, 8));
    const __mmask16 two = _mm512_cmple_epu32_mask(l12, lookup_bits);
    const __mmask16 three = two & _mm512_cmple_epu32_mask(l123, lookup_bits);
    const __m512i bits = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(l1, two, l12), three, l123);
    const __m512i count = _mm512_add_epi32(_mm512_add_epi32(one, _mm512_maskz_mov_epi32(two, one)),
                                           _mm512_maskz_mov_epi32(three, one));
    __m512i entry = _mm512_and_si512(e1, low8);
    entry = _mm512_or_si512(entry, _mm512_maskz_slli_epi32(two, _mm512_and_si512(e2, low8), 8));
    entry = _mm512_or_si512(entry, _mm512_maskz_slli_epi32(three, _mm512_and_si512(e3, low8), 16));
    entry = _mm512_or_si512(entry, _mm512_slli_epi32(bits, 24));
    entry = _mm512_or_si512(entry, _mm512_slli_epi32(count, 28));
    _mm512_storeu_si512(multi + i, entry);
    index = _mm512_add_epi32(index, _mm512_set1_epi32(16));
  }
}
TILEFEED_AVX512_WARNINGS_ON
#endif

// One of a group's four bit streams while it is decoded.
struct Stream {
  const std::uint8_t* base;  // its first byte
  std::size_t size;          // its bytes
  std::size_t avail;         // bytes readable from base (to the end of the group)
};

// The next kLookupBits bits at bit `bit` of `s`, reading nothing past s.avail (zeros
// beyond it; the end check refuses a stream that needed them).
unsigned PeekSafe(const Stream& s, std::uint64_t bit) {
  const std::uint64_t byte = bit >> 3;
  std::uint64_t v = 0;
  if (byte + 8 <= s.avail) {
    v = Be64(s.base + byte);
  } else {
    for (std::uint64_t k = 0; k < 8 && byte + k < s.avail; ++k) {
      v |= std::uint64_t{s.base[byte + k]} << (56 - 8 * k);
    }
  }
  return static_cast<unsigned>((v << (bit & 7)) >> (64 - kLookupBits));
}

// Decodes the bytes [pos[i], end[i]) of a segment from each stream i, up to three
// bytes per lookup (the value bytes, most of a group, have codes of 2 to 5 bits), each
// lookup storing 4 bytes of which the next overwrites the unused: in lockstep while every
// stream has 16 bytes to go and 8 to load, then stream by stream while 4 are left, then
// one byte per lookup.
void DecodeRun(const Stream* streams, std::uint64_t* bits_out, const std::uint16_t* single,
               const std::uint32_t* multi, std::uint8_t* o, const std::size_t* pos_in,
               const std::size_t* end) {
  // Local copies: the byte stores cannot alias them, so they stay in registers.
  std::uint64_t bits[4] = {bits_out[0], bits_out[1], bits_out[2], bits_out[3]};
  std::size_t pos[4] = {pos_in[0], pos_in[1], pos_in[2], pos_in[3]};
  const auto room = [&](int i) { return (bits[i] >> 3) + 8 <= streams[i].avail; };
  // All four streams at once, lookup by lookup, while each has 16 bytes to go and 8 to
  // load: four independent chains of dependent lookups, written out so that they overlap
  // (7 % faster than one stream's four lookups after another's in coef_coding_bench).
  while (end[0] - pos[0] >= 16 && end[1] - pos[1] >= 16 && end[2] - pos[2] >= 16 &&
         end[3] - pos[3] >= 16 && room(0) && room(1) && room(2) && room(3)) {
    std::uint64_t buf[4];
    unsigned used[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; ++i) buf[i] = Be64(streams[i].base + (bits[i] >> 3)) << (bits[i] & 7);
    for (int u = 0; u < 4; ++u) {  // 4 x 11 bits + 7 fit one load
      for (int i = 0; i < 4; ++i) {
        const std::uint32_t m = multi[buf[i] >> (64 - kLookupBits)];
        std::memcpy(o + pos[i], &m, 4);
        pos[i] += m >> 28;
        buf[i] <<= (m >> 24) & 15;
        used[i] += (m >> 24) & 15;
      }
    }
    for (int i = 0; i < 4; ++i) bits[i] += used[i];
  }
  for (bool any = true; any;) {  // the streams run at different rates: go on with the others
    any = false;
    for (int i = 0; i < 4; ++i) {
      if (end[i] - pos[i] < 16 || !room(i)) continue;
      any = true;
      std::uint64_t buf = Be64(streams[i].base + (bits[i] >> 3)) << (bits[i] & 7);
      std::size_t at = pos[i];
      unsigned used = 0;
      for (int u = 0; u < 4; ++u) {  // 4 x 11 bits + 7 fit one load
        const std::uint32_t m = multi[buf >> (64 - kLookupBits)];
        std::memcpy(o + at, &m, 4);
        at += m >> 28;
        buf <<= (m >> 24) & 15;
        used += (m >> 24) & 15;
      }
      pos[i] = at;
      bits[i] += used;
    }
  }
  for (int i = 0; i < 4; ++i) {
    while (end[i] - pos[i] >= 4 && room(i)) {
      const std::uint32_t m = multi[PeekSafe(streams[i], bits[i])];
      std::memcpy(o + pos[i], &m, 4);
      pos[i] += m >> 28;
      bits[i] += (m >> 24) & 15;
    }
    for (std::size_t k = pos[i]; k < end[i]; ++k) {
      const unsigned e = single[PeekSafe(streams[i], bits[i])];
      o[k] = static_cast<std::uint8_t>(e);
      bits[i] += e >> 8;
    }
    bits_out[i] = bits[i];
  }
}

// Decodes the bytes [pos[i], end[i]) of a segment from each stream i, one byte per lookup
// (DC and mask bytes: short segments, where DecodeRun's set-up and tails cost more than
// its multi-byte lookups save): four bytes of each stream per step in lockstep while every
// stream has 4 bytes to go and 8 to load, then the rest one at a time.
void DecodeSingles(const Stream* streams, std::uint64_t* bits_out, const std::uint16_t* table,
                   std::uint8_t* o, const std::size_t* pos, const std::size_t* end) {
  std::uint64_t bits[4] = {bits_out[0], bits_out[1], bits_out[2], bits_out[3]};
  std::size_t common = end[0] - pos[0];
  for (int i = 1; i < 4; ++i) common = std::min(common, end[i] - pos[i]);
  std::size_t j = 0;
  for (; j + 4 <= common; j += 4) {
    bool room = true;
    for (int i = 0; i < 4; ++i) room &= (bits[i] >> 3) + 8 <= streams[i].avail;
    if (!room) break;
    for (int i = 0; i < 4; ++i) {
      std::uint64_t buf = Be64(streams[i].base + (bits[i] >> 3)) << (bits[i] & 7);
      std::uint8_t* d = o + pos[i] + j;
      unsigned used = 0;
      for (int u = 0; u < 4; ++u) {  // 4 x 11 bits + 7 fit one load
        const unsigned e = table[buf >> (64 - kLookupBits)];
        d[u] = static_cast<std::uint8_t>(e);
        buf <<= e >> 8;
        used += e >> 8;
      }
      bits[i] += used;
    }
  }
  for (int i = 0; i < 4; ++i) {
    for (std::size_t k = pos[i] + j; k < end[i]; ++k) {
      const unsigned e = table[PeekSafe(streams[i], bits[i])];
      o[k] = static_cast<std::uint8_t>(e);
      bits[i] += e >> 8;
    }
    bits_out[i] = bits[i];
  }
}

// Decodes one segment: part i from stream i.
void DecodeSegment(const Stream* streams, std::uint64_t* bits, const Segment& seg,
                   const std::uint16_t* entries, const std::uint32_t* multi, std::uint8_t* out) {
  std::size_t pos[4], end[4];
  for (int i = 0; i < 4; ++i) std::tie(pos[i], end[i]) = Part(seg.count, i);
  const std::uint16_t* table = entries + std::size_t(seg.table) * kLookupSize;
  if (seg.table % kHuffTablesPerClass != 2) {
    DecodeSingles(streams, bits, table, out + seg.offset, pos, end);
    return;
  }
  const auto value_table = std::size_t(seg.table / kHuffTablesPerClass);
  DecodeRun(streams, bits, table, multi + value_table * kLookupSize, out + seg.offset, pos, end);
}

}  // namespace

std::size_t HuffDecoder::ReadTables(const std::uint8_t* bytes, std::size_t size, int classes,
                                    const char** why, bool portable) {
  assert(classes == 1 || classes == 2);
  classes_ = classes;
  const auto fail = [why](const char* reason) {
    *why = reason;
    return std::size_t{0};
  };
  const std::size_t tables = std::size_t(classes) * kHuffTablesPerClass;
  entries_.resize(tables * kLookupSize + 1);  // + 1: BuildMultiAvx512 reads one past
  std::size_t at = 0;
  for (std::size_t t = 0; t < tables; ++t) {
    std::uint16_t* entry = entries_.data() + t * kLookupSize;
    if (size - at < 2) return fail("Huffman table ends early");
    const unsigned mode = bytes[at], arg = bytes[at + 1];
    at += 2;
    if (mode == 0) {  // one byte value, no bits
      std::fill(entry, entry + kLookupSize, static_cast<std::uint16_t>(arg));
      continue;
    }
    if (mode != 1) return fail("unknown Huffman table mode");
    const std::size_t n = arg / 2 + 1;
    if (size - at < n) return fail("Huffman table ends early");
    std::array<std::uint8_t, 256> lengths{};
    for (unsigned s = 0; s <= arg; ++s) lengths[s] = (bytes[at + s / 2] >> (4 * (s % 2))) & 15;
    if (arg % 2 == 0 && (bytes[at + n - 1] >> 4) != 0) {
      return fail("Huffman table has a code length past its last byte value");
    }
    at += n;
    if (lengths[arg] == 0) return fail("Huffman table's last byte value has no code");
    unsigned used = 0, kraft = 0;
    for (unsigned s = 0; s <= arg; ++s) {
      if (lengths[s] > kHuffMaxLength) return fail("Huffman code length over 11");
      if (lengths[s] != 0) ++used, kraft += 1u << (kHuffMaxLength - lengths[s]);
    }
    if (used < 2) return fail("Huffman table with fewer than two codes");
    if (kraft != kLookupSize) return fail("Huffman code lengths do not fill the code space");
    const auto codes = CanonicalCodes(lengths);
    for (unsigned s = 0; s <= arg; ++s) {
      if (lengths[s] == 0) continue;
      const int shift = kHuffMaxLength - lengths[s];
      std::fill(entry + (std::size_t{codes[s]} << shift),
                entry + (std::size_t{codes[s] + 1u} << shift),
                static_cast<std::uint16_t>(lengths[s] << 8 | s));
    }
  }
  multi_.resize(std::size_t(classes) * kLookupSize);
  for (int c = 0; c < classes; ++c) {  // the value tables
    const std::uint16_t* single =
        entries_.data() + std::size_t(c * kHuffTablesPerClass + 2) * kLookupSize;
    std::uint32_t* multi = multi_.data() + std::size_t(c) * kLookupSize;
#if defined(__x86_64__) && defined(__GNUC__)
    if (!portable && detail::CpuRuns(detail::KernelSet::kAvx512)) {
      BuildMultiAvx512(single, multi);
      continue;
    }
#endif
    BuildMulti(single, multi);
  }
  return at;
}

const char* HuffDecoder::DecodeGroup(const std::uint8_t* coded, std::size_t coded_size,
                                     std::uint8_t* out, std::size_t raw_size,
                                     HuffGroupShape shape) const {
  assert(raw_size >= 10 * shape.blocks);
  if (coded_size < kHuffGroupHeader) return "Huffman group shorter than its stream sizes";
  const std::uint64_t sizes[3] = {Le32(coded), Le32(coded + 4), Le32(coded + 8)};
  if (sizes[0] + sizes[1] + sizes[2] > coded_size - kHuffGroupHeader) {
    return "Huffman stream sizes exceed the group";
  }
  Stream streams[4];
  std::size_t at = kHuffGroupHeader;
  for (int i = 0; i < 4; ++i) {
    const std::size_t n = i < 3 ? sizes[i] : coded_size - at;
    streams[i] = {coded + at, n, coded_size - at};
    at += n;
  }
  std::uint64_t bits[4] = {0, 0, 0, 0};
  auto segments = Segments(shape, raw_size, 0, classes_);
  for (int k = 0; k < 4; ++k) {
    DecodeSegment(streams, bits, segments[k], entries_.data(), multi_.data(), out);
  }
  const std::size_t first_values = FirstValues(out, shape);
  if (first_values > raw_size - 10 * shape.blocks) return "masks do not fit the group";
  segments = Segments(shape, raw_size, first_values, classes_);
  for (int k = 4; k < 6; ++k) {
    DecodeSegment(streams, bits, segments[k], entries_.data(), multi_.data(), out);
  }
  for (int i = 0; i < 4; ++i) {
    const Stream& s = streams[i];
    const std::uint64_t used = bits[i];
    const unsigned tail = static_cast<unsigned>(used % 8);
    if ((used + 7) / 8 != s.size || (tail != 0 && (s.base[s.size - 1] & (0xFFu >> tail)) != 0)) {
      return "Huffman stream does not end where its codes end";
    }
  }
  return nullptr;
}

}  // namespace tilefeed::codecs::detail
