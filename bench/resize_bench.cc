// resize_bench: the resize and flip kernels on the shapes a RandomResizedCrop loader
// feeds them. One item is one call; the time per item is the figure to compare with a
// JPEG decode (about 1 ms for a 224x224 crop).

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "codecs/resize.h"

namespace tilefeed::codecs {
namespace {

std::vector<std::uint8_t> RandomPixels(std::size_t size) {
  std::vector<std::uint8_t> pixels(size);
  std::mt19937 rng(1);
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng());
  return pixels;
}

// Arguments: source width, source height, flip (0/1), planar output (0/1). The whole
// source is resized to 224x224.
void BM_Resize(benchmark::State& state) {
  const int src_w = static_cast<int>(state.range(0));
  const int src_h = static_cast<int>(state.range(1));
  const bool flip = state.range(2) != 0;
  const bool planar = state.range(3) != 0;
  constexpr int kOut = 224;
  const std::vector<std::uint8_t> src = RandomPixels(static_cast<std::size_t>(src_w) * src_h * 3);
  std::vector<std::uint8_t> dst(std::size_t{kOut} * kOut * 3);
  const ConstPixelView view{src.data(), src_w, src_h, 3, std::ptrdiff_t{src_w} * 3};
  const PixelView out = planar ? PixelView::Planar(dst.data(), kOut, kOut)
                               : PixelView::Interleaved(dst.data(), kOut, kOut);
  const SourceBox box{0, 0, static_cast<double>(src_w), static_cast<double>(src_h)};
  Resizer resizer;
  for (auto _ : state) {
    resizer.Resize(view, box, out, flip);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(dst.size()));
}
BENCHMARK(BM_Resize)
    ->ArgNames({"src_w", "src_h", "flip", "planar"})
    ->Args({448, 448, 0, 0})
    ->Args({448, 448, 1, 0})
    ->Args({300, 400, 0, 0})
    ->Args({300, 400, 1, 0})
    ->Args({256, 256, 0, 0})
    ->Args({256, 256, 1, 0})
    ->Args({1000, 750, 0, 0})
    ->Args({1000, 750, 1, 0})
    ->Args({224, 224, 0, 0})
    ->Args({448, 448, 0, 1});

// A fractional crop box, as RandomResizedCrop produces after DCT scaling.
void BM_ResizeFractionalCrop(benchmark::State& state) {
  const std::vector<std::uint8_t> src = RandomPixels(std::size_t{500} * 375 * 3);
  std::vector<std::uint8_t> dst(std::size_t{224} * 224 * 3);
  const ConstPixelView view{src.data(), 500, 375, 3, std::ptrdiff_t{500} * 3};
  Resizer resizer;
  for (auto _ : state) {
    resizer.Resize(view, {37.4, 12.8, 371.9, 350.2}, PixelView::Interleaved(dst.data(), 224, 224));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeFractionalCrop);

}  // namespace
}  // namespace tilefeed::codecs
