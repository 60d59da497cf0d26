// epoch_order_bench: what one instance pays each epoch to build its sample order
// (loader::EpochOrder: the epoch permutation, then this instance's slice), by dataset size
// and instance count -- the figure docs/scaling.md extrapolates to 256 instances.
//
//   epoch_order_bench [--benchmark_filter=...]

#include <benchmark/benchmark.h>

#include "tilefeed/loader/sampler.h"

namespace {

void BM_EpochOrder(benchmark::State& state) {
  const auto size = static_cast<std::uint64_t>(state.range(0));
  const int instances = static_cast<int>(state.range(1));
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    tilefeed::loader::EpochOrder order(size, 7, epoch++, true, {instances - 1, instances});
    benchmark::DoNotOptimize(order[0]);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(size));
  // 4 bytes per index of this instance's slice, rounded up.
  const std::uint64_t index_bytes = (size + static_cast<std::uint64_t>(instances) - 1) /
                                    static_cast<std::uint64_t>(instances) * 4;
  state.counters["indices_kib"] = static_cast<double>(index_bytes) / 1024.0;
}
BENCHMARK(BM_EpochOrder)
    ->Args({1281167, 1})
    ->Args({1281167, 8})
    ->Args({1281167, 256})
    ->Args({12811670, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
