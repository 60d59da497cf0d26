#pragma once

// Deterministic epoch order and per-sample randomness.
//
// EpochOrder is the list of dataset indices one instance (of N) reads in one epoch. The
// epoch permutation is a pure function of (seed, epoch, dataset size), built with our own
// generator and bounded draw so that it is the same on every standard library, compiler and
// run; instance i takes positions i, i+N, i+2N, ... of it, after padding or dropping the tail
// so that every instance takes the same number of samples. The N instance slices of an epoch are
// disjoint apart from padding and together cover the dataset.
//
// SampleRng is the random stream one sample's augmentations draw from, a pure function of
// (seed, epoch, sample index): the same sample in the same epoch is augmented the same way
// whichever worker decodes it, and in whatever order.
//
// Both are plain values. EpochOrder is immutable after construction, so concurrent const use
// is safe; a SampleRng is used by one thread at a time.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tilefeed::loader {

// Which instance this is, of how many.
struct InstanceSlice {
  int index = 0;  // this instance, in [0, count)
  int count = 1;  // instances sharing the epoch
};

// What happens to the n % N samples that do not split evenly over N instances.
enum class Remainder {
  kPad,   // like torch DistributedSampler(drop_last=False): repeat the start of the
          // permutation so every instance takes ceil(n / N) samples
  kDrop,  // every instance takes floor(n / N) samples; the permutation's tail is dropped
};

// A shuffle that keeps reads local (like FFCV's QUASI_RANDOM or a WebDataset shuffle
// buffer): the dataset is cut into blocks of `block` consecutive indices, the blocks are
// shuffled, and the positions are then shuffled within each window of `window` consecutive
// blocks of that order. A window of positions thus reads `window` whole blocks, each a run
// of consecutive records of one shard for a ShardDataset. Still a permutation of the
// dataset, a pure function of (seed, epoch, size, block, window), split among instances
// and resumed exactly as the full shuffle is. The cost is randomness: samples of one block
// always land in the same window, so batches mix fewer distinct parts of the dataset.
// block = 0 (the default) is the full shuffle.
struct OrderLocality {
  std::uint64_t block = 0;   // records per block; 0 = full shuffle
  std::uint64_t window = 1;  // blocks shuffled together (>= 1)
};

// One instance's sample order for one epoch.
class EpochOrder {
 public:
  // Builds the order; shuffle = false gives the identity permutation. Throws
  // std::invalid_argument on a bad instance slice. An empty dataset gives an empty order, as does
  // kDrop with fewer samples than instances.
  //
  // `start` resumes an epoch: the first `start` positions of the epoch's permutation were
  // already delivered (by however many instances), and this order splits the rest.
  // Instance i takes global positions start + i, start + i + N, ... so resuming with the
  // same instance count continues exactly where an uninterrupted run would be, and
  // resuming with another count still delivers every remaining sample once (plus
  // padding), none already delivered.
  //
  // `locality` (used only when shuffling) selects the block-local shuffle; throws
  // std::invalid_argument if its window is 0.
  // REQUIRES: slice.count >= 1, 0 <= slice.index < slice.count, start <= dataset_size.
  EpochOrder(std::uint64_t dataset_size, std::uint64_t seed, std::uint64_t epoch, bool shuffle,
             InstanceSlice slice, Remainder remainder = Remainder::kPad, std::uint64_t start = 0,
             OrderLocality locality = {});

  // Number of samples this instance takes this epoch (the same for every instance).
  std::size_t size() const { return size_; }

  // The dataset index of this instance's position-th sample.
  // REQUIRES: position < size().
  std::uint64_t operator[](std::size_t position) const;

  // Samples taken by all instances together from `start` on: size() * slice.count.
  std::uint64_t global_size() const { return global_size_; }

 private:
  std::uint64_t dataset_size_ = 0;
  std::uint64_t start_ = 0;
  std::uint64_t global_size_ = 0;
  std::size_t size_ = 0;
  InstanceSlice slice_;
  bool shuffle_ = false;
  // This instance's indices when shuffled; the narrow vector whenever the dataset has fewer
  // than 2^32 samples. Unshuffled orders store nothing: they are computed.
  std::vector<std::uint32_t> indices32_;
  std::vector<std::uint64_t> indices64_;
};

// A xoshiro256** stream seeded by hashing (seed, epoch, sample_index) with splitmix64.
class SampleRng {
 public:
  // Starts the stream of one sample in one epoch.
  SampleRng(std::uint64_t seed, std::uint64_t epoch, std::uint64_t sample_index);

  // The next 64 random bits.
  std::uint64_t Next();

  // A double uniform in [0, 1) with 53 random bits.
  double Uniform();

  // An integer uniform in [lo, hi], inclusive and unbiased. Throws std::invalid_argument if
  // lo > hi.
  // REQUIRES: lo <= hi.
  std::int64_t UniformInt(std::int64_t lo, std::int64_t hi);

 private:
  std::uint64_t state_[4];
};

}  // namespace tilefeed::loader
