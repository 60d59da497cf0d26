#pragma once

// The read-merging plan that sources over shared files use in ReadMany (ShardDataset,
// TarDataset): a batch's samples are sorted by file and offset, in blocks of
// kMergeSortBlock kept on the stack, and runs of samples of one file whose gaps are at
// most `max_gap` bytes (at most kMaxMergedReads of them) become one read. Internal: not
// installed, never included from a public header. ForEachMergedRun is stateless and
// allocation-free; PlanMergedRuns collects its runs so that their reads can be issued
// together (detail::ReadRanges).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tilefeed::loader::detail {

// Samples merged into one read at most; bounds the callers' iovec arrays on the stack.
inline constexpr std::size_t kMaxMergedReads = 32;
// Indices are sorted in blocks of this many, with the order kept on the stack.
inline constexpr std::size_t kMergeSortBlock = 64;

// Where a sample's bytes lie: file number, byte offset and length.
struct Extent {
  std::uint32_t file = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

// Calls `read(order, count)` for every run of samples to read at once: order[0..count)
// are positions in `indices`, all in one file, sorted by offset, not overlapping, each
// starting at most max_gap bytes after the previous one ends. A repeated sample starts a
// run of its own. Ties are broken by position, so the plan does not depend on the sort.
// `extent_of(index)` returns the Extent of sample `index`.
template <class ExtentOf, class ReadRun>
void ForEachMergedRun(std::span<const std::uint64_t> indices, std::uint64_t max_gap,
                      ExtentOf&& extent_of, ReadRun&& read) {
  std::array<std::uint32_t, kMergeSortBlock> order;
  std::array<Extent, kMergeSortBlock> extents;
  for (std::size_t block = 0; block < indices.size(); block += kMergeSortBlock) {
    const std::size_t n = std::min(kMergeSortBlock, indices.size() - block);
    for (std::size_t i = 0; i < n; ++i) {
      order[i] = static_cast<std::uint32_t>(block + i);
      extents[i] = extent_of(indices[block + i]);
    }
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n),
              [&](std::uint32_t a, std::uint32_t b) {
                const Extent& ea = extents[a - block];
                const Extent& eb = extents[b - block];
                if (ea.file != eb.file) return ea.file < eb.file;
                return ea.offset != eb.offset ? ea.offset < eb.offset : a < b;
              });
    std::size_t k = 0;
    while (k < n) {
      const Extent& first = extents[order[k] - block];
      std::uint64_t end = first.offset + first.size;
      std::size_t g = k + 1;
      while (g < n && g - k < kMaxMergedReads) {
        const Extent& next = extents[order[g] - block];
        if (next.file != first.file || next.offset < end || next.offset - end > max_gap) break;
        end = next.offset + next.size;
        ++g;
      }
      read(order.data() + k, g - k);
      k = g;
    }
  }
}

// The runs of ForEachMergedRun, one after another: run r is order[runs[r].first ..
// runs[r].first + runs[r].count).
struct MergedRuns {
  struct Run {
    std::size_t first = 0;
    std::size_t count = 0;
  };
  std::vector<std::uint32_t> order;
  std::vector<Run> runs;
};

template <class ExtentOf>
MergedRuns PlanMergedRuns(std::span<const std::uint64_t> indices, std::uint64_t max_gap,
                          ExtentOf&& extent_of) {
  MergedRuns plan;
  plan.order.reserve(indices.size());
  ForEachMergedRun(indices, max_gap, extent_of, [&](const std::uint32_t* order, std::size_t n) {
    plan.runs.push_back({plan.order.size(), n});
    plan.order.insert(plan.order.end(), order, order + n);
  });
  return plan;
}

}  // namespace tilefeed::loader::detail
