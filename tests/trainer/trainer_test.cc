// The trainer fed from memory: the in-memory stream replays exactly its batches, and
// gradient accumulation G with batch B gives the update of one batch of G x B.

#include "tilefeed/trainer/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tilefeed/trainer/mpi_session.h"
#include "trainer/memory_stream.h"
#include "trainer/reference_core.h"
#include "trainer/stall.h"

namespace tilefeed::trainer {
namespace {

constexpr int kSide = 8;
constexpr std::size_t kSampleBytes = static_cast<std::size_t>(kSide) * kSide * 3;
constexpr int kClasses = 3;

// `samples` random images cut into batches of `batch`, in order.
std::vector<HeldBatch> MakeBatches(std::size_t samples, std::size_t batch) {
  std::mt19937 rng(11);
  std::vector<std::uint8_t> pixels(samples * kSampleBytes);
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng() % 256);
  std::vector<HeldBatch> out;
  for (std::size_t first = 0; first < samples; first += batch) {
    HeldBatch b;
    b.meta.size = batch;
    b.meta.height = kSide;
    b.meta.width = kSide;
    b.images.assign(pixels.begin() + static_cast<std::ptrdiff_t>(first * kSampleBytes),
                    pixels.begin() + static_cast<std::ptrdiff_t>((first + batch) * kSampleBytes));
    for (std::size_t i = first; i < first + batch; ++i) {
      b.labels.push_back(static_cast<std::int32_t>(i % kClasses));
      b.sample_indices.push_back(i);
    }
    out.push_back(std::move(b));
  }
  return out;
}

TEST(InMemoryStream, ReplaysItsBatchesEpochAfterEpoch) {
  InMemoryStream stream(MakeBatches(6, 2), 2);
  EXPECT_EQ(stream.batches_per_epoch(), 3u);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    for (std::uint64_t i = 0; i < 3; ++i) {
      std::optional<transport::ReceivedBatch> batch = stream.Next();
      ASSERT_TRUE(batch);
      EXPECT_EQ(batch->epoch(), epoch);
      EXPECT_EQ(batch->index(), i);
      EXPECT_EQ(batch->sample_indices()[0], 2 * i);
      EXPECT_EQ(batch->images().size(), 2 * kSampleBytes);
      // The held samples are the whole dataset of one instance.
      EXPECT_EQ(stream.position(), (loader::LoaderState{0, epoch, 2 * (i + 1), 6}));
    }
    EXPECT_FALSE(stream.ended());
    EXPECT_FALSE(stream.Next());  // the epoch's end
    EXPECT_EQ(stream.position(), (loader::LoaderState{0, epoch + 1, 0, 6}));
  }
  EXPECT_TRUE(stream.ended());
  EXPECT_FALSE(stream.Next());
}

std::vector<float> TrainSteps(std::size_t batch, int accumulation, std::uint64_t steps,
                              std::vector<float>* initial,
                              AllreduceMode allreduce = AllreduceMode::kOverlap, int replicas = 1) {
  ReferenceCoreOptions core_options;
  core_options.classes = kClasses;
  core_options.pool = 4;
  core_options.hidden = 16;
  core_options.seed = 3;
  TrainerOptions options;
  options.local_batch = batch;
  options.sample_bytes = kSampleBytes;
  options.gradient_accumulation = accumulation;
  options.replicas = replicas;
  options.compute_threads = replicas;
  options.allreduce = allreduce;
  options.max_steps = steps;
  options.check_every = 1;
  LocalCollectives local;
  Trainer trainer([&] { return std::make_unique<ReferenceCore>(core_options); }, local, options);
  if (initial != nullptr) initial->assign(trainer.parameters().begin(), trainer.parameters().end());
  InMemoryStream stream(MakeBatches(8 * steps, batch), 1);
  EXPECT_EQ(trainer.Train(stream), steps);
  return {trainer.parameters().begin(), trainer.parameters().end()};
}

// G x B samples per step either way; each micro-batch adds the gradient of its mean loss
// and the trainer divides by G, so only float summation order differs.
void ExpectSameUpdate(std::uint64_t steps) {
  std::vector<float> initial;
  const std::vector<float> accumulated = TrainSteps(2, 4, steps, &initial);
  const std::vector<float> whole = TrainSteps(8, 1, steps, nullptr);
  ASSERT_EQ(accumulated.size(), whole.size());
  float largest_update = 0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    largest_update = std::max(largest_update, std::abs(whole[i] - initial[i]));
  }
  ASSERT_GT(largest_update, 1e-4f);  // the step did move the parameters
  for (std::size_t i = 0; i < whole.size(); ++i) {
    EXPECT_NEAR(accumulated[i], whole[i], 1e-5f * std::max(1.0f, std::abs(whole[i])))
        << "parameter " << i;
    // The update itself agrees too, not just the (much larger) parameters.
    EXPECT_NEAR(accumulated[i] - initial[i], whole[i] - initial[i], 1e-4f * largest_update)
        << "parameter " << i;
  }
}

TEST(Trainer, GradientAccumulationMatchesTheWholeBatch) { ExpectSameUpdate(1); }

TEST(Trainer, GradientAccumulationMatchesOverMomentumSteps) { ExpectSameUpdate(3); }

// One instance, two replicas, accumulation 2: the overlap path (staged backward, replicas
// summed per segment) and the blocking path give the same bits.
TEST(Trainer, OverlappedAllreducePathMatchesTheBlockingOne) {
  std::vector<float> initial;
  const std::vector<float> blocking =
      TrainSteps(2, 2, 3, &initial, AllreduceMode::kBlocking, /*replicas=*/2);
  const std::vector<float> overlap =
      TrainSteps(2, 2, 3, nullptr, AllreduceMode::kOverlap, /*replicas=*/2);
  ASSERT_NE(blocking, initial);  // the steps moved the parameters
  EXPECT_EQ(overlap, blocking);
}

// The per-step times a progress sink sees are the ones the epoch report sums: a bench that
// splits a run's steps into groups (stall_bench's interleaved runs) adds up to the report.
TEST(Trainer, ProgressStepTimesAddUpToTheEpochReport) {
  constexpr std::uint64_t kSteps = 6;
  ReferenceCoreOptions core_options;
  core_options.classes = kClasses;
  core_options.pool = 4;
  core_options.hidden = 16;
  TrainerOptions options;
  options.local_batch = 2;
  options.sample_bytes = kSampleBytes;
  LocalCollectives local;
  std::vector<EpochReport> reports;
  Trainer trainer([&] { return std::make_unique<ReferenceCore>(core_options); }, local, options, {},
                  [&](const EpochReport& r) { reports.push_back(r); });
  std::vector<StepProgress> steps;
  trainer.SetProgressSink([&](const StepProgress& p) { steps.push_back(p); });
  InMemoryStream stream(MakeBatches(2 * kSteps, 2), 1);
  EXPECT_EQ(trainer.Train(stream), kSteps);
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_EQ(steps.size(), kSteps);
  double wait = 0;
  double total = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].global_step, i + 1);
    EXPECT_GE(steps[i].step_wait_seconds, 0.0);
    EXPECT_GT(steps[i].step_busy_seconds, 0.0);
    wait += steps[i].step_wait_seconds;
    total += steps[i].step_wait_seconds + steps[i].step_busy_seconds;
  }
  EXPECT_EQ(steps[0].step_wait_seconds, 0.0);  // the first wait is the fill
  EXPECT_NEAR(wait, reports[0].wait_seconds, 1e-9);
  EXPECT_NEAR(total, reports[0].seconds, 1e-9);
}

TEST(Trainer, AllreduceModesParseAndNameThemselves) {
  EXPECT_EQ(ParseAllreduceMode("overlap"), AllreduceMode::kOverlap);
  EXPECT_EQ(ParseAllreduceMode("blocking"), AllreduceMode::kBlocking);
  EXPECT_STREQ(AllreduceModeName(AllreduceMode::kOverlap), "overlap");
  EXPECT_THROW(ParseAllreduceMode("async"), TrainerError);
}

// A resume on another instance count keeps the global batch: accumulation first, then the
// local batch, else a refusal that shows the arithmetic.
TEST(FitGlobalBatch, KeepsTheGlobalBatchOrRefusesWithTheArithmetic) {
  const BatchLayout layout{4, 1};
  auto fit = [&](std::uint64_t saved, int instances, bool batch_fixed, bool accumulation_fixed) {
    return FitGlobalBatch(saved, layout, 1, instances, batch_fixed, accumulation_fixed);
  };
  EXPECT_EQ(fit(8, 2, false, false).gradient_accumulation, 1);  // unchanged
  EXPECT_EQ(fit(0, 3, false, false).local_batch, 4u);           // unknown: unchanged
  const BatchLayout two_to_one = fit(8, 1, false, false);
  EXPECT_EQ(two_to_one.local_batch, 4u);
  EXPECT_EQ(two_to_one.gradient_accumulation, 2);
  const BatchLayout one_to_four = fit(8, 4, false, false);  // 8 / 16: a smaller batch
  EXPECT_EQ(one_to_four.local_batch, 2u);
  EXPECT_EQ(one_to_four.gradient_accumulation, 1);
  EXPECT_EQ(fit(8, 1, true, false).gradient_accumulation, 2);
  EXPECT_EQ(fit(8, 1, false, true).local_batch, 8u);
  try {
    fit(8, 3, false, false);  // 8 is a multiple of neither 12 nor 3
    FAIL() << "no refusal";
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("global batch 8; here local batch 4 x replicas 1 x "
                                         "instances 3 x gradient accumulation 1 = 12"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(fit(8, 1, true, true), TrainerError);
}

}  // namespace
}  // namespace tilefeed::trainer
