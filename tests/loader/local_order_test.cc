// Tests the block-local epoch order (OrderLocality in tilefeed/loader/sampler.h): deterministic,
// a permutation, each window made of whole blocks, split among instances and resumed
// exactly as the full shuffle is, and the full shuffle itself unchanged.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

#include "tilefeed/loader/sampler.h"

namespace tilefeed::loader {
namespace {

std::vector<std::uint64_t> Indices(const EpochOrder& order) {
  std::vector<std::uint64_t> out(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) out[i] = order[i];
  return out;
}

std::vector<std::uint64_t> Local(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch,
                                 OrderLocality locality, InstanceSlice slice = {},
                                 Remainder remainder = Remainder::kPad, std::uint64_t start = 0) {
  return Indices(EpochOrder(n, seed, epoch, true, slice, remainder, start, locality));
}

TEST(LocalOrder, SameArgumentsGiveSameOrderAndAnyChangeAnother) {
  const OrderLocality l{16, 4};
  const auto base = Local(1000, 7, 3, l);
  EXPECT_EQ(base, Local(1000, 7, 3, l));
  EXPECT_NE(base, Local(1000, 7, 4, l));
  EXPECT_NE(base, Local(1000, 8, 3, l));
  EXPECT_NE(base, Local(1000, 7, 3, {16, 5}));
  EXPECT_NE(base, Local(1000, 7, 3, {17, 4}));
  // Block 0 is the full shuffle, bit for bit.
  EXPECT_EQ(Local(1000, 7, 3, {0, 1}), Indices(EpochOrder(1000, 7, 3, true, {})));
}

TEST(LocalOrder, IsAPermutationMadeOfWholeBlocksPerWindow) {
  for (std::uint64_t n : {1u, 2u, 7u, 64u, 97u, 1000u, 4097u}) {
    for (const OrderLocality l :
         {OrderLocality{1, 1}, OrderLocality{1, 8}, OrderLocality{8, 1}, OrderLocality{8, 3},
          OrderLocality{32, 4}, OrderLocality{5000, 2}}) {
      const auto order = Local(n, 11, 2, l);
      ASSERT_EQ(order.size(), n);
      auto sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << n;
      // Walk the windows: each holds exactly l.window whole blocks (fewer at the end).
      std::size_t at = 0;
      while (at < n) {
        std::set<std::uint64_t> blocks;
        std::size_t taken = 0;
        std::size_t want = 0;
        // Collect positions until the window's blocks are complete.
        do {
          ASSERT_LT(at + taken, n) << "blocks incomplete at the end, n " << n;
          const std::uint64_t b = order[at + taken] / l.block;
          if (blocks.insert(b).second) {
            ASSERT_LE(blocks.size(), l.window) << "n " << n << " at " << at;
            want += static_cast<std::size_t>(std::min<std::uint64_t>((b + 1) * l.block, n) -
                                             b * l.block);
          }
          ++taken;
        } while (taken < want || (blocks.size() < l.window && at + taken < n));
        ASSERT_EQ(taken, want) << "a window mixes a block with the next window, n " << n;
        at += taken;
      }
    }
  }
}

TEST(LocalOrder, ShuffleMixesWithinTheWindow) {
  // Blocks of 64 in windows of 4: positions in a window are not in block order.
  const auto order = Local(4096, 1, 0, {64, 4});
  std::size_t ascending = 0;
  for (std::size_t i = 1; i < order.size(); ++i) ascending += order[i] == order[i - 1] + 1;
  EXPECT_LT(ascending, order.size() / 8);
  // And the blocks are not in dataset order.
  std::size_t first_block_in_place = 0;
  for (std::size_t w = 0; w < order.size(); w += 256) {
    first_block_in_place += order[w] / 256 == w / 256;
  }
  EXPECT_LT(first_block_in_place, 16u);
}

TEST(LocalOrder, InstancesAreDisjointCoverTheEpochAndResumeExactly) {
  const OrderLocality l{10, 3};
  for (const std::uint64_t n : {1u, 5u, 97u, 1000u}) {
    for (const int count : {1, 2, 3, 7}) {
      for (const Remainder remainder : {Remainder::kPad, Remainder::kDrop}) {
        const auto global = Local(n, 5, 9, l);
        std::multiset<std::uint64_t> seen;
        for (int i = 0; i < count; ++i) {
          const EpochOrder mine(n, 5, 9, true, {i, count}, remainder, 0, l);
          for (std::size_t k = 0; k < mine.size(); ++k) {
            // Instance i takes global positions i, i + N, ... (padding wraps around).
            ASSERT_EQ(mine[k], global[(static_cast<std::uint64_t>(i) + k * count) % n]);
            seen.insert(mine[k]);
          }
          // Resuming after `start` global positions continues the same sequence.
          for (const std::uint64_t start : {std::uint64_t{0}, n / 3, n}) {
            const EpochOrder resumed(n, 5, 9, true, {i, count}, remainder, start, l);
            for (std::size_t k = 0; k < resumed.size(); ++k) {
              ASSERT_EQ(resumed[k],
                        global[(start + static_cast<std::uint64_t>(i) + k * count) % n]);
            }
          }
        }
        std::set<std::uint64_t> distinct(seen.begin(), seen.end());
        if (remainder == Remainder::kPad) {
          EXPECT_EQ(distinct.size(), n);  // covers the dataset, repeats only as padding
          EXPECT_LT(seen.size(), n + static_cast<std::uint64_t>(count));
        } else {
          EXPECT_EQ(distinct.size(), seen.size());  // disjoint
          EXPECT_EQ(seen.size(), n - n % static_cast<std::uint64_t>(count));
        }
      }
    }
  }
}

TEST(LocalOrder, RejectsAnEmptyWindow) {
  EXPECT_THROW(EpochOrder(10, 0, 0, true, {}, Remainder::kPad, 0, {4, 0}), std::invalid_argument);
}

// Pins the local order across versions, as GoldenOrder does the full shuffle.
TEST(LocalOrder, GoldenOrder) {
  const auto order = Local(100, 0, 0, {8, 2});
  const std::vector<std::uint64_t> first8(order.begin(), order.begin() + 8);
  EXPECT_EQ(first8, (std::vector<std::uint64_t>{64, 71, 51, 55, 67, 68, 66, 54}));
}

}  // namespace
}  // namespace tilefeed::loader
