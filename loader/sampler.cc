#include "tilefeed/loader/sampler.h"

#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace tilefeed::loader {
namespace {

// Every constant and step below is part of the contract "same seed, same batches, run after
// run and version after version": changing any of them changes every epoch order and crop,
// and the golden values in tests/loader/sampler_test.cc will say so.

std::uint64_t SplitMix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Domain tags keep the permutation stream and the per-sample streams apart even when their
// other inputs coincide.
constexpr std::uint64_t kPermutationDomain = 0x7065726D75746531ull;  // "permute1"
constexpr std::uint64_t kSampleDomain = 0x73616D706C653031ull;       // "sample01"
constexpr std::uint64_t kLocalDomain = 0x6C6F63616C706D31ull;        // "localpm1"

// Hashes the words one after another, so (a, b) and (b, a) give different results.
std::uint64_t HashWords(std::initializer_list<std::uint64_t> words) {
  std::uint64_t hash = 0;
  for (std::uint64_t word : words) {
    std::uint64_t state = hash ^ word;
    hash = SplitMix64(state);
  }
  return hash;
}

void SeedXoshiro(std::uint64_t key, std::uint64_t (&state)[4]) {
  // splitmix64 never yields four zero words in a row, which xoshiro cannot leave.
  for (std::uint64_t& word : state) word = SplitMix64(key);
}

std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// xoshiro256** 1.0 (Blackman & Vigna).
std::uint64_t XoshiroNext(std::uint64_t (&s)[4]) {
  const std::uint64_t result = Rotl(s[1] * 5, 7) * 9;
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = Rotl(s[3], 45);
  return result;
}

__extension__ using Uint128 = unsigned __int128;

// A uniform integer in [0, bound) by Lemire's multiply-shift with rejection ("Fast Random
// Integer Generation in an Interval", 2019): unbiased, and almost never divides.
// std::uniform_int_distribution is not used because its output differs between standard
// libraries. REQUIRES: bound >= 1.
std::uint64_t Below(std::uint64_t bound, std::uint64_t (&s)[4]) {
  Uint128 product = Uint128{XoshiroNext(s)} * bound;
  auto low = static_cast<std::uint64_t>(product);
  if (low < bound) {
    const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      product = Uint128{XoshiroNext(s)} * bound;
      low = static_cast<std::uint64_t>(product);
    }
  }
  return static_cast<std::uint64_t>(product >> 64);
}

// Fisher-Yates of [first, first + count), drawing from `state`.
template <typename Index>
void Shuffle(Index* first, std::uint64_t count, std::uint64_t (&state)[4]) {
  for (std::uint64_t i = count; i > 1; --i) std::swap(first[i - 1], first[Below(i, state)]);
}

// The block-local permutation of [0, n) (OrderLocality): blocks of `block` indices in a
// shuffled order, then positions shuffled within each window of `window` blocks.
template <typename Index>
std::vector<Index> LocalPermutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch,
                                    OrderLocality locality) {
  const std::uint64_t block = locality.block;
  const std::uint64_t blocks = n / block + (n % block != 0);
  std::vector<Index> block_order(blocks);
  for (std::uint64_t b = 0; b < blocks; ++b) block_order[b] = static_cast<Index>(b);
  std::uint64_t state[4];
  SeedXoshiro(HashWords({kLocalDomain, seed, epoch, n, block, locality.window}), state);
  Shuffle(block_order.data(), blocks, state);
  std::vector<Index> permutation;
  permutation.reserve(n);
  for (std::uint64_t w = 0; w < blocks; w += locality.window) {
    const std::size_t window_begin = permutation.size();
    for (std::uint64_t b = w; b < blocks && b < w + locality.window; ++b) {
      const std::uint64_t first = static_cast<std::uint64_t>(block_order[b]) * block;
      const std::uint64_t last = first + block < n ? first + block : n;
      for (std::uint64_t i = first; i < last; ++i) permutation.push_back(static_cast<Index>(i));
    }
    Shuffle(permutation.data() + window_begin, permutation.size() - window_begin, state);
  }
  return permutation;
}

// The epoch's permutation of [0, n) (full or block-local), then keeps this instance's
// positions of the padded/dropped order. Index is uint32 for datasets below 2^32 to halve
// the memory and cache traffic.
template <typename Index>
std::vector<Index> ShuffledSlice(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch,
                                 InstanceSlice slice, std::uint64_t start, std::size_t size,
                                 OrderLocality locality) {
  std::vector<Index> permutation;
  if (locality.block > 0) {
    permutation = LocalPermutation<Index>(n, seed, epoch, locality);
  } else {
    permutation.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) permutation[i] = static_cast<Index>(i);
    std::uint64_t state[4];
    SeedXoshiro(HashWords({kPermutationDomain, seed, epoch, n}), state);
    Shuffle(permutation.data(), n, state);
  }
  std::vector<Index> mine(size);
  const auto count = static_cast<std::uint64_t>(slice.count);
  for (std::size_t k = 0; k < size; ++k) {
    // Positions past n are padding, which repeats the permutation from its start.
    mine[k] = permutation[(start + static_cast<std::uint64_t>(slice.index) + k * count) % n];
  }
  return mine;
}

}  // namespace

EpochOrder::EpochOrder(std::uint64_t dataset_size, std::uint64_t seed, std::uint64_t epoch,
                       bool shuffle, InstanceSlice slice, Remainder remainder, std::uint64_t start,
                       OrderLocality locality)
    : dataset_size_(dataset_size), start_(start), slice_(slice), shuffle_(shuffle) {
  if (locality.window < 1) {
    throw std::invalid_argument("EpochOrder: locality window must be >= 1 block");
  }
  if (slice.count < 1) {
    throw std::invalid_argument("EpochOrder: instance count must be >= 1, got " +
                                std::to_string(slice.count));
  }
  if (slice.index < 0 || slice.index >= slice.count) {
    throw std::invalid_argument("EpochOrder: instance index must be in [0, " +
                                std::to_string(slice.count) + "), got " +
                                std::to_string(slice.index));
  }
  if (start > dataset_size) {
    throw std::invalid_argument("EpochOrder: start " + std::to_string(start) +
                                " is past the end of a dataset of " + std::to_string(dataset_size));
  }
  const auto count = static_cast<std::uint64_t>(slice.count);
  const std::uint64_t remaining = dataset_size - start;
  const std::uint64_t per_instance = remainder == Remainder::kPad
                                         ? remaining / count + (remaining % count != 0)
                                         : remaining / count;
  if (per_instance > std::numeric_limits<std::size_t>::max()) {
    throw std::invalid_argument("EpochOrder: dataset too large for this platform");
  }
  size_ = static_cast<std::size_t>(per_instance);
  global_size_ = per_instance * count;
  if (!shuffle_ || size_ == 0) return;
  if (dataset_size <= std::numeric_limits<std::uint32_t>::max()) {
    indices32_ =
        ShuffledSlice<std::uint32_t>(dataset_size, seed, epoch, slice, start, size_, locality);
  } else {
    indices64_ =
        ShuffledSlice<std::uint64_t>(dataset_size, seed, epoch, slice, start, size_, locality);
  }
}

std::uint64_t EpochOrder::operator[](std::size_t position) const {
  if (!shuffle_) {
    return (start_ + static_cast<std::uint64_t>(slice_.index) +
            position * static_cast<std::uint64_t>(slice_.count)) %
           dataset_size_;
  }
  return indices64_.empty() ? indices32_[position] : indices64_[position];
}

SampleRng::SampleRng(std::uint64_t seed, std::uint64_t epoch, std::uint64_t sample_index) {
  SeedXoshiro(HashWords({kSampleDomain, seed, epoch, sample_index}), state_);
}

std::uint64_t SampleRng::Next() { return XoshiroNext(state_); }

double SampleRng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

std::int64_t SampleRng::UniformInt(std::int64_t lo, std::int64_t hi) {
  if (lo > hi) {
    throw std::invalid_argument("SampleRng::UniformInt: lo " + std::to_string(lo) + " > hi " +
                                std::to_string(hi));
  }
  // Unsigned arithmetic: hi - lo overflows int64 for wide ranges but never uint64.
  const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
  const std::uint64_t offset =
      span == std::numeric_limits<std::uint64_t>::max() ? Next() : Below(span + 1, state_);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + offset);
}

}  // namespace tilefeed::loader
