// image_ops_bench: each augment op of codecs/image_ops.h on one image the size a loader
// feeds it (224x224 and 128x128 RGB). One item is one call on one image; the time per
// item is the figure to set beside a 224x224 crop's decode (about 1 ms).

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codecs/image_ops.h"

namespace tilefeed::codecs {
namespace {

using Op = std::function<void(const PixelView&, ImageOpScratch&)>;

void Run(benchmark::State& state, const Op& op) {
  const int size = static_cast<int>(state.range(0));
  std::vector<std::uint8_t> original(std::size_t{3} * size * size);
  std::mt19937 rng(1);
  // Smooth content with noise: LUT and blend costs do not depend on it, Equalize's and
  // AutoContrast's histograms see a photo-like spread.
  for (std::size_t i = 0; i < original.size(); ++i) {
    original[i] = static_cast<std::uint8_t>((i / 3 % size + i / 3 / size) / 2 + rng() % 32);
  }
  std::vector<std::uint8_t> pixels = original;
  const PixelView view = PixelView::Interleaved(pixels.data(), size, size);
  ImageOpScratch scratch;
  op(view, scratch);  // warms the scratch up, as a worker's is
  for (auto _ : state) {
    // Ops that saturate would reach a fixed point; each call starts from the same pixels.
    state.PauseTiming();
    pixels = original;
    state.ResumeTiming();
    op(view, scratch);
    benchmark::DoNotOptimize(pixels.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(pixels.size()));
}

void Register(const std::string& name, Op op) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [op = std::move(op)](benchmark::State& s) { Run(s, op); })
      ->ArgName("size")
      ->Arg(224)
      ->Arg(128);
}

// RandAugment(2, 9)'s magnitudes at bin 9 of 31 (and 224 x 224).
const int registered = [] {
  Register("Brightness", [](const PixelView& v, ImageOpScratch&) { AdjustBrightness(v, 1.27); });
  Register("Contrast", [](const PixelView& v, ImageOpScratch&) { AdjustContrast(v, 1.27); });
  Register("Saturation", [](const PixelView& v, ImageOpScratch&) { AdjustSaturation(v, 1.27); });
  Register("Hue", [](const PixelView& v, ImageOpScratch&) { AdjustHue(v, 0.1); });
  Register("Sharpness", [](const PixelView& v, ImageOpScratch& s) { AdjustSharpness(v, 1.27, s); });
  Register("Grayscale", [](const PixelView& v, ImageOpScratch&) { Grayscale(v); });
  Register("Posterize", [](const PixelView& v, ImageOpScratch&) { Posterize(v, 7); });
  Register("Solarize", [](const PixelView& v, ImageOpScratch&) { Solarize(v, 178.5); });
  Register("AutoContrast", [](const PixelView& v, ImageOpScratch&) { AutoContrast(v); });
  Register("Equalize", [](const PixelView& v, ImageOpScratch&) { Equalize(v); });
  Register("Erase", [](const PixelView& v, ImageOpScratch&) {
    Erase(v, {v.width / 4, v.height / 4, v.width / 2, v.height / 2}, {0, 0, 0});
  });
  Register("ShearX", [](const PixelView& v, ImageOpScratch& s) {
    ApplyPolicyOp(v, PolicyOp::kShearX, 0.09, {0, 0, 0}, s);
  });
  Register("ShearY", [](const PixelView& v, ImageOpScratch& s) {
    ApplyPolicyOp(v, PolicyOp::kShearY, 0.09, {0, 0, 0}, s);
  });
  Register("TranslateX", [](const PixelView& v, ImageOpScratch& s) {
    ApplyPolicyOp(v, PolicyOp::kTranslateX, 30.0, {0, 0, 0}, s);
  });
  Register("TranslateY", [](const PixelView& v, ImageOpScratch& s) {
    ApplyPolicyOp(v, PolicyOp::kTranslateY, 30.0, {0, 0, 0}, s);
  });
  Register("Rotate", [](const PixelView& v, ImageOpScratch& s) {
    ApplyPolicyOp(v, PolicyOp::kRotate, 9.0, {0, 0, 0}, s);
  });
  // The 14 policy ops in turn at RandAugment(2, 9)'s magnitudes: the mean cost of one of
  // RandAugment's draws (a sample pays num_ops of them).
  Register("RandAugmentOp", [op = 0](const PixelView& v, ImageOpScratch& s) mutable {
    const auto policy = static_cast<PolicyOp>(op++ % kPolicyOps);
    ApplyPolicyOp(v, policy, PolicyMagnitude(policy, 9, 31, false, v.height, v.width), {0, 0, 0},
                  s);
  });
  return 0;
}();

}  // namespace
}  // namespace tilefeed::codecs
