#include "loader/tuner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "loader/image_folder.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

using detail::TuneReason;
using detail::TunerLimits;
using detail::TunerSetting;
using detail::TunerState;
using detail::TunerWindow;

// A loader and its consumer as the policy sees them, without a clock: the consumer needs
// `demand` threads' worth of decoding per second. Fewer threads keep the producer busy all
// the time and make the consumer wait for the rest; more leave the producer idle.
// `burst_idle` > 0: batches come in bursts that `depth` slots cover from `covered` slots on.
// `shallow` > 0: each thread's output falls by `shallow` per halving of the depth below
// `deep` slots (a data-bound loader that a deeper ring feeds better).
struct Plant {
  double demand = 3.0;
  double burst_idle = 0;
  std::size_t covered = 0;
  double shallow = 0;
  std::size_t deep = 0;

  TunerWindow Window(const TunerSetting& s) const {
    double output = s.threads;
    for (std::size_t d = s.depth; d < deep; d *= 2) output *= 1 - shallow;
    TunerWindow w{.batches = 10 * std::min(output, demand), .seconds = 1.0};
    if (output < demand) {
      w.consumer_wait = 1.0 - output / demand;
    } else {
      w.producer_idle = 1.0 - demand / output;
    }
    if (burst_idle > 0 && s.depth < covered) {
      w.consumer_wait = std::max(w.consumer_wait, 0.05);
      w.producer_idle = std::max(w.producer_idle, burst_idle);
    }
    return w;
  }
};

struct Trace {
  std::vector<TunerSetting> settings;  // after each window
  TunerState last;
  // Moves from window `from` on.
  int MovesFrom(std::size_t from) const {
    int moves = 0;
    for (std::size_t i = std::max<std::size_t>(from, 1); i < settings.size(); ++i) {
      moves += settings[i] == settings[i - 1] ? 0 : 1;
    }
    return moves;
  }
};

Trace Simulate(TunerState state, const Plant& plant, const TunerLimits& limits, int windows) {
  Trace trace;
  for (int i = 0; i < windows; ++i) {
    state = detail::Tune(state, plant.Window(state.setting), limits);
    trace.settings.push_back(state.setting);
  }
  trace.last = state;
  return trace;
}

TunerState Start(int threads, std::size_t depth) {
  TunerState s;
  s.setting = {threads, depth};
  return s;
}

TEST(Tuner, AddsThreadsWhileTheConsumerWaitsUpToTheShareAndSaysSo) {
  const TunerLimits limits{.max_threads = 4, .cpu = 4, .max_depth = 8};
  const Trace t = Simulate(Start(1, 2), Plant{.demand = 10}, limits, 40);
  EXPECT_EQ(t.last.setting.threads, 4);
  EXPECT_EQ(t.last.reason, TuneReason::kShareCap);
  // At the cap it doubles the slots once; the rate did not rise, so it stops there.
  EXPECT_EQ(t.last.setting.depth, 4u);
  EXPECT_EQ(t.MovesFrom(20), 0);
}

// The share bounds the threads' busy time, not their number: on 2 cores at 0.75 a consumer
// that needs a little more than one thread gets a second (1.5 cores would be a floor of 1
// thread), while one that would take both cores gets one, and deeper prefetch instead.
TEST(Tuner, TheShareBoundsTheThreadsBusyTimeNotTheirNumber) {
  const TunerLimits limits{.max_threads = 2, .cpu = 1.5, .max_depth = 8};
  const Trace compute = Simulate(Start(1, 2), Plant{.demand = 1.06}, limits, 40);
  EXPECT_EQ(compute.last.setting.threads, 2);
  EXPECT_EQ(compute.last.setting.depth, 2u);
  EXPECT_EQ(compute.last.reason, TuneReason::kWaited);
  EXPECT_EQ(compute.MovesFrom(10), 0);
  const Trace data = Simulate(Start(1, 2), Plant{.demand = 10}, limits, 40);
  EXPECT_EQ(data.last.setting.threads, 1);
  EXPECT_EQ(data.last.reason, TuneReason::kShareCap);
}

// A data-bound loader whose threads may not grow: twice the slots while a doubling raises the
// rate, then no more (the slots it has stay: the depth only grows), within the budget.
TEST(Tuner, DoublesTheSlotsWhileThatPaysWhenNoMoreThreadsAreAllowed) {
  const Plant plant{.demand = 10, .shallow = 0.1, .deep = 8};
  const TunerLimits limits{.max_threads = 2, .cpu = 2, .max_depth = 64};
  const Trace t = Simulate(Start(1, 2), plant, limits, 60);
  EXPECT_EQ(t.last.setting.threads, 2);
  EXPECT_EQ(t.last.setting.depth, 16u);  // 8 paid, 16 did not: one doubling past the best
  EXPECT_EQ(t.last.reason, TuneReason::kShareCap);
  EXPECT_EQ(t.MovesFrom(30), 0);
  for (std::size_t i = 1; i < t.settings.size(); ++i) {
    EXPECT_GE(t.settings[i].depth, t.settings[i - 1].depth);  // grows only
  }
  // Fixed workers deepen the same way; the budget bounds the doubling.
  const Trace fixed = Simulate(Start(2, 2), plant,
                               {.max_threads = 2, .cpu = 2, .max_depth = 6, .threads = false}, 60);
  EXPECT_EQ(fixed.last.setting, (TunerSetting{2, 6}));
  EXPECT_EQ(fixed.last.reason, TuneReason::kBudgetCap);
  // A consumer that keeps up, then waits again, gets another chance to deepen.
  Trace easy = Simulate(t.last, Plant{.demand = 1}, limits, 10);
  EXPECT_FALSE(easy.last.deepen_done);
}

TEST(Tuner, SettlesWhereTheProducerKeepsUpAndNeverOscillates) {
  const TunerLimits limits{.max_threads = 16, .cpu = 16, .max_depth = 8};
  for (double demand : {0.3, 1.0, 2.5, 3.0, 4.2, 7.9, 12.0}) {
    for (int start : {1, 8, 16}) {
      const Trace t = Simulate(Start(start, 2), Plant{.demand = demand}, limits, 300);
      const int n = t.last.setting.threads;
      // Enough threads (the consumer does not wait), and no thread that could go without
      // pushing the rest past 80 % busy.
      EXPECT_GE(n, std::min(16, static_cast<int>(std::ceil(demand - 1e-9))))
          << demand << " from " << start;
      if (n > 1) {
        EXPECT_GT(demand / (n - 1), 0.8) << demand << " from " << start;
      }
      EXPECT_EQ(t.MovesFrom(100), 0) << demand << " from " << start;
    }
  }
}

TEST(Tuner, ReadaptsWhenTheConsumerHalvesItsSpeedAndWhenItDoublesIt) {
  const TunerLimits limits{.max_threads = 16, .cpu = 16, .max_depth = 8};
  Trace fast = Simulate(Start(1, 2), Plant{.demand = 6}, limits, 100);
  ASSERT_EQ(fast.last.setting.threads, 6);
  // Half as fast (a larger image size, a slower step): half the threads, within the stated
  // bound of kConfirmWindows + 1 windows per thread given back.
  Trace slow = Simulate(fast.last, Plant{.demand = 3}, limits, 3 * (detail::kConfirmWindows + 1));
  EXPECT_EQ(slow.last.setting.threads, 4);  // 3 would be 100 % busy: 4 keep 20 % headroom
  EXPECT_EQ(slow.last.reason, TuneReason::kRingFull);
  Trace again = Simulate(slow.last, Plant{.demand = 6}, limits, 3 * (detail::kConfirmWindows + 1));
  EXPECT_EQ(again.last.setting.threads, 6);
}

TEST(Tuner, DeepensPrefetchForBurstsOnlyAndNeverBeyondTheBudget) {
  const TunerLimits limits{.max_threads = 4, .cpu = 4, .max_depth = 5};
  const Trace covered =
      Simulate(Start(2, 2), Plant{.demand = 1.5, .burst_idle = 0.3, .covered = 4}, limits, 100);
  EXPECT_EQ(covered.last.setting.depth, 4u);
  EXPECT_EQ(covered.MovesFrom(50), 0);
  const Trace capped =
      Simulate(Start(2, 2), Plant{.demand = 1.5, .burst_idle = 0.3, .covered = 9}, limits, 100);
  EXPECT_EQ(capped.last.setting.depth, 5u);
  EXPECT_EQ(capped.last.reason, TuneReason::kBudgetCap);
  for (std::size_t i = 1; i < capped.settings.size(); ++i) {
    EXPECT_GE(capped.settings[i].depth, capped.settings[i - 1].depth);  // grows only
  }
}

TEST(Tuner, OneNoisyWindowMovesNothingAndFixedSettingsNeverMove) {
  TunerState s = Start(2, 2);
  s.skip = false;
  const TunerLimits limits{.max_threads = 4, .cpu = 4, .max_depth = 8};
  for (int i = 0; i < 20; ++i) {  // waits in every other window only
    s = detail::Tune(s, {.seconds = 1, .consumer_wait = i % 2 ? 0.5 : 0.01}, limits);
    EXPECT_EQ(s.setting, (TunerSetting{2, 2}));
  }
  const Trace fixed =
      Simulate(Start(2, 2), Plant{.demand = 9, .burst_idle = 0.3, .covered = 9},
               {.max_threads = 2, .cpu = 2, .max_depth = 2, .threads = false, .depth = false}, 50);
  EXPECT_EQ(fixed.MovesFrom(0), 0);
}

// ---- The loader under the tuner --------------------------------------------------------

std::unique_ptr<testing::TempDir> Folder(int per_class) {
  auto dir = std::make_unique<testing::TempDir>("tilefeed-tuner");
  int n = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < per_class; ++i, ++n) {
      const std::filesystem::path rel =
          std::filesystem::path("class" + std::to_string(c)) / (std::to_string(i) + ".jpg");
      std::vector<std::byte> bytes =
          testing::MakeJpeg(40 + (n * 13) % 90, 36 + (n * 29) % 70, codecs::EncodeOptions{}, n);
      if (n % 17 == 5) bytes.resize(bytes.size() / 3);  // bad: substituted, deterministically
      testing::WriteFile(dir->path() / rel, bytes);
    }
  }
  return dir;
}

LoaderOptions Options(int workers, std::size_t depth) {
  LoaderOptions o;
  o.batch_size = 8;
  o.image_size = 24;
  o.workers = workers;
  o.prefetch_depth = depth;
  o.seed = 77;
  o.epochs = 2;
  return o;
}

struct Consumed {
  std::vector<std::vector<std::uint8_t>> images;
  std::vector<std::vector<std::uint64_t>> indices;
  std::set<int> threads;
  std::size_t max_slots = 0;
};

// Both epochs, keeping the last `keep` batches alive (so the producer needs slots).
Consumed Consume(Loader& loader, std::size_t keep) {
  Consumed out;
  std::deque<Batch> kept;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (Batch& batch : loader) {
      out.images.emplace_back(batch.images().begin(), batch.images().end());
      out.indices.emplace_back(batch.sample_indices().begin(), batch.sample_indices().end());
      const LoaderMetrics m = loader.metrics();
      out.threads.insert(m.threads);
      out.max_slots = std::max(out.max_slots, m.slots);
      if (keep > 0) kept.push_back(std::move(batch));
      if (kept.size() > keep) kept.pop_front();
    }
  }
  return out;
}

// Whatever the tuner chooses, mid-epoch and across the epoch boundary, the batches are those
// of a fixed workers=1 loader: order, substitutes, crops and pixels.
TEST(LoaderTuner, BatchesAreTheSameWhateverTheTunerChoosesMidEpoch) {
  const auto dir = Folder(30);
  Loader fixed(ImageFolder::Open(dir->path().string()), Options(1, 4));
  const Consumed want = Consume(fixed, 0);
  ASSERT_EQ(want.images.size(), 2 * ((90 + 7) / 8));

  Loader tuned(ImageFolder::Open(dir->path().string()), Options(kAutoWorkers, kAutoDepth));
  static constexpr int kThreads[] = {3, 1, 4, 2};
  detail::TunerAccess::Force(tuned, [](std::uint64_t batches) {
    return TunerSetting{kThreads[(batches / 3) % 4], batches < 2 ? 2u : 5u};
  });
  const Consumed got = Consume(tuned, 3);
  ASSERT_EQ(got.images.size(), want.images.size());
  for (std::size_t b = 0; b < want.images.size(); ++b) {
    EXPECT_EQ(got.indices[b], want.indices[b]) << "batch " << b;
    EXPECT_TRUE(got.images[b] == want.images[b]) << "pixels differ in batch " << b;
  }
  EXPECT_GE(got.threads.size(), 2u);  // the thread count did move
  // Slots were added past auto's first 2: Next() runs with three batches kept, so the producer
  // needs a fourth; a fifth only when it runs ahead (not on a slow machine or under TSan).
  EXPECT_GE(got.max_slots, 4u);
  EXPECT_LE(got.max_slots, 5u);
  EXPECT_GE(tuned.metrics().retunes, 4u);
  EXPECT_EQ(tuned.metrics().tuned, "forced");
}

TEST(LoaderTuner, SlotMemoryStaysWithinTheMemoryBudget) {
  const auto dir = Folder(10);
  LoaderOptions o = Options(kAutoWorkers, kAutoDepth);
  const std::uint64_t slot_bytes = std::uint64_t{8} * (24 * 24 * 3 + 12);
  o.memory_budget = 3 * slot_bytes + slot_bytes / 2;
  Loader loader(ImageFolder::Open(dir->path().string()), o);
  detail::TunerAccess::Force(loader, [](std::uint64_t) { return TunerSetting{2, 64}; });
  const Consumed got = Consume(loader, 2);  // keeps two: the producer wants more than it may have
  EXPECT_EQ(got.max_slots, 3u);
  EXPECT_LE(loader.metrics().slots * loader.metrics().slot_bytes, o.memory_budget);

  // A fixed depth past the budget, and a budget past the machine, are refused in one line.
  o.prefetch_depth = 4;
  EXPECT_THAT([&] { Loader(ImageFolder::Open(dir->path().string()), o); },
              ::testing::ThrowsMessage<std::invalid_argument>(::testing::HasSubstr(
                  "prefetch_depth 4 slots x batch 8 x 24 x 24 x 3 (+ 12 bytes of label and index "
                  "each) = 55680 bytes, more than memory_budget 48720 bytes")));
  // auto's one slot past the budget: the line must not ask for fewer slots alone.
  o.prefetch_depth = kAutoDepth;
  o.memory_budget = slot_bytes - 1;
  EXPECT_THAT([&] { Loader(ImageFolder::Open(dir->path().string()), o); },
              ::testing::ThrowsMessage<std::invalid_argument>(::testing::EndsWith(
                  "= 13920 bytes, more than memory_budget 13919 bytes; raise memory_budget, or "
                  "lower the batch or prefetch_depth (auto takes one slot)")));
  o.memory_budget = ~std::uint64_t{0} - 1;
  EXPECT_THAT([&] { Loader(ImageFolder::Open(dir->path().string()), o); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  ::testing::HasSubstr("memory_budget 18446744073709551614 is more than the ")));
}

TEST(LoaderTuner, AutoOptionsAreCheckedOnce) {
  LoaderOptions o = Options(kAutoWorkers, kAutoDepth);
  EXPECT_EQ(OptionsProblem(o), std::nullopt);
  o.cpu_share = 0;
  EXPECT_EQ(OptionsProblem(o), "cpu_share must be above 0 and at most 1, got 0");
  o.cpu_share = 0.5;
  o.workers = -2;
  EXPECT_EQ(OptionsProblem(o), "workers must be auto or between 0 and 1024, got -2");
  o.workers = kAutoWorkers;
  struct NoSlots : SlotMemory {
    Spans Slot(std::size_t, std::size_t, std::size_t, std::size_t) override { return {}; }
  };
  o.slot_memory = std::make_shared<NoSlots>();
  EXPECT_EQ(OptionsProblem(o),
            "prefetch_depth auto needs the loader's own slots (slot_memory is set)");
}

}  // namespace
}  // namespace tilefeed::loader
