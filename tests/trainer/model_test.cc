// The reference model's gradients against finite differences, the SGD rule, and the
// synthetic core's cost.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "trainer/reference_core.h"
#include "trainer/sgd.h"
#include "trainer/synthetic_core.h"

namespace tilefeed::trainer {
namespace {

struct TinyBatch {
  std::vector<std::uint8_t> images;
  std::vector<std::int32_t> labels;
  InputView view;
};

TinyBatch MakeBatch(std::size_t n, int side, int classes, std::uint64_t seed) {
  TinyBatch b;
  std::mt19937 rng(static_cast<unsigned>(seed));
  b.images.resize(n * side * side * 3);
  for (auto& p : b.images) p = static_cast<std::uint8_t>(rng() % 256);
  for (std::size_t i = 0; i < n; ++i) b.labels.push_back(static_cast<std::int32_t>(i % classes));
  b.view = InputView{b.images, b.labels, n, side, side, loader::Layout::kNhwc};
  return b;
}

TEST(ReferenceCore, GradientsMatchFiniteDifferences) {
  ReferenceCoreOptions options;
  options.classes = 3;
  options.pool = 2;
  options.hidden = 5;
  options.seed = 7;
  ReferenceCore core(options);
  const TinyBatch batch = MakeBatch(4, 6, 3, 1);
  std::vector<float> gradients(core.parameters().size(), 0.0f);
  core.AccumulateGradients(batch.view, gradients);
  auto loss = [&] { return core.Evaluate(batch.view).loss_sum / 4.0; };
  // Central differences in double-accumulated loss; eps balances float rounding against
  // curvature (and stays clear of ReLU kinks for these seeds).
  const float eps = 1e-2f;
  std::span<float> p = core.parameters();
  int checked = 0;
  for (std::size_t i = 0; i < p.size(); i += 3) {
    const float saved = p[i];
    p[i] = saved + eps;
    const double up = loss();
    p[i] = saved - eps;
    const double down = loss();
    p[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(gradients[i], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << "parameter " << i;
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

TEST(ReferenceCore, GradientsAccumulateAndAreDeterministic) {
  ReferenceCoreOptions options;
  options.classes = 4;
  options.pool = 4;
  options.hidden = 8;
  ReferenceCore a(options);
  ReferenceCore b(options);
  const TinyBatch batch = MakeBatch(3, 8, 4, 2);
  std::vector<float> once(a.parameters().size(), 0.0f);
  std::vector<float> twice(a.parameters().size(), 0.0f);
  a.AccumulateGradients(batch.view, once);
  b.AccumulateGradients(batch.view, twice);
  EXPECT_EQ(once, twice);  // bit-identical
  b.AccumulateGradients(batch.view, twice);
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

// The staged backward (what the overlapped all-reduce uses) adds exactly what
// AccumulateGradients adds, and each segment is final once its stage has run.
TEST(ReferenceCore, StagedBackwardSegmentsCoverTheGradientAndMatchBitForBit) {
  ReferenceCoreOptions options;
  options.classes = 4;
  options.pool = 4;
  options.hidden = 10;
  options.backward_chunks = 3;  // uneven row blocks: 3, 3, 4
  ReferenceCore whole(options);
  ReferenceCore staged(options);
  const TinyBatch batch = MakeBatch(5, 8, 4, 9);
  // Start from a non-zero gradient (an earlier micro-batch) to check the stages add.
  std::vector<float> expected(whole.parameters().size(), 0.25f);
  whole.AccumulateGradients(batch.view, expected);

  ASSERT_EQ(staged.gradient_segments(), 2u + 3u);
  std::vector<int> covered(expected.size(), 0);
  for (std::size_t s = 0; s < staged.gradient_segments(); ++s) {
    const GradientSegment segment = staged.gradient_segment(s);
    ASSERT_LE(segment.offset + segment.size, expected.size());
    for (std::size_t i = 0; i < segment.size; ++i) ++covered[segment.offset + i];
  }
  EXPECT_TRUE(std::ranges::all_of(covered, [](int c) { return c == 1; }));

  std::vector<float> gradients(expected.size(), 0.25f);
  staged.BeginGradients(batch.view, gradients);
  for (std::size_t s = 0; s < staged.gradient_segments(); ++s) {
    staged.BackwardSegment(s, gradients);
    const GradientSegment segment = staged.gradient_segment(s);
    for (std::size_t i = segment.offset; i < segment.offset + segment.size; ++i) {
      ASSERT_EQ(gradients[i], expected[i]) << "segment " << s << ", parameter " << i;
    }
  }
  EXPECT_EQ(gradients, expected);
}

TEST(ReferenceCore, PoolingIsTheMeanOfTheNormalisedBin) {
  ReferenceCoreOptions options;
  options.pool = 2;
  options.normalization.mean = {0, 0, 0};
  options.normalization.std = {1, 1, 1};
  ReferenceCore core(options);
  // 4x4 image: channel c of pixel (y, x) = 10 * c + y * 4 + x.
  std::vector<std::uint8_t> image(std::size_t{4} * 4 * 3);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c)
        image[(y * 4 + x) * 3 + c] = static_cast<std::uint8_t>(10 * c + y * 4 + x);
  std::vector<std::int32_t> labels = {0};
  const std::vector<float> f =
      core.Features(InputView{image, labels, 1, 4, 4, loader::Layout::kNhwc});
  ASSERT_EQ(f.size(), 12u);
  EXPECT_FLOAT_EQ(f[0], (0 + 1 + 4 + 5) / 4.0f);           // c0, top-left bin
  EXPECT_FLOAT_EQ(f[3], (10 + 11 + 14 + 15) / 4.0f);       // c0, bottom-right bin
  EXPECT_FLOAT_EQ(f[4 + 0], 10 + (0 + 1 + 4 + 5) / 4.0f);  // c1
}

TEST(SgdMomentum, FollowsTheUpdateRule) {
  SgdMomentum sgd(2, SgdOptions{0.1f, 0.9f, 0.01f});
  std::vector<float> p = {1.0f, -2.0f};
  const std::vector<float> g1 = {0.5f, 0.25f};
  sgd.Step(p, g1);
  // v = g + wd p; p -= lr v
  const float v0 = 0.5f + 0.01f * 1.0f;
  const float v1 = 0.25f + 0.01f * -2.0f;
  EXPECT_FLOAT_EQ(sgd.velocity()[0], v0);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * v0);
  EXPECT_FLOAT_EQ(p[1], -2.0f - 0.1f * v1);
  const float p0 = p[0];
  const std::vector<float> g2 = {-1.0f, 0.0f};
  sgd.Step(p, g2);
  const float w0 = 0.9f * v0 + (-1.0f + 0.01f * p0);
  EXPECT_FLOAT_EQ(sgd.velocity()[0], w0);
  EXPECT_FLOAT_EQ(p[0], p0 - 0.1f * w0);
}

TEST(SyntheticCore, DoesItsCalibratedWorkAndLearnsTheChannelMeans) {
  const KernelCalibration calibration = CalibrateSyntheticKernel(0.05);
  ASSERT_GT(calibration.iterations_per_us, 0);
  // With a fixed calibration the work is a pure function of the batch, so it is checked
  // without timing anything: timed assertions flake on a shared machine, and the cost
  // itself is what bench/stall_bench measures.
  const KernelCalibration fixed{200.0, 0.0};
  SyntheticCore core(500, fixed);  // 0.5 ms per sample at 200 iterations/us
  SyntheticCore twin(500, fixed);
  const TinyBatch batch = MakeBatch(8, 16, 2, 3);
  std::vector<float> gradients(3, 0.0f);
  std::vector<float> twin_gradients(3, 0.0f);
  core.AccumulateGradients(batch.view, gradients);
  twin.AccumulateGradients(batch.view, twin_gradients);
  EXPECT_NE(core.sink(), 0.0f);  // the kernel loop really ran
  EXPECT_EQ(core.sink(), twin.sink());
  EXPECT_EQ(gradients, twin_gradients);
  SgdMomentum sgd(3, SgdOptions{0.5f, 0.0f, 0.0f});
  for (int i = 0; i < 30; ++i) {
    std::fill(gradients.begin(), gradients.end(), 0.0f);
    core.AccumulateGradients(batch.view, gradients);
    sgd.Step(core.parameters(), gradients);
  }
  EXPECT_LT(core.Evaluate(batch.view).loss_sum, 1e-6);
}

TEST(SyntheticCore, ZeroCostDoesNoKernelWorkAndLearnsTheSame) {
  // --core synthetic:us-per-sample=0 is the intake benchmark's "the loader is the limit": no loop,
  // no normalisation (a 1 ns/pixel normalisation does not fit a zero budget).
  const KernelCalibration fixed{200.0, 1.0};
  SyntheticCore free_core(0, fixed);
  SyntheticCore paid_core(500, KernelCalibration{200.0, 0.0});
  const TinyBatch batch = MakeBatch(8, 16, 2, 3);
  std::vector<float> free_gradients(3, 0.0f);
  std::vector<float> paid_gradients(3, 0.0f);
  const BatchStats free_stats = free_core.AccumulateGradients(batch.view, free_gradients);
  const BatchStats paid_stats = paid_core.AccumulateGradients(batch.view, paid_gradients);
  EXPECT_EQ(free_core.sink(), 0.0f);
  EXPECT_NE(paid_core.sink(), 0.0f);
  EXPECT_EQ(free_gradients, paid_gradients);
  EXPECT_EQ(free_stats.loss_sum, paid_stats.loss_sum);
}

}  // namespace
}  // namespace tilefeed::trainer
