#pragma once

// The loader's autotuner (workers = kAutoWorkers, prefetch_depth = kAutoDepth): the policy, a
// pure function from one window of measurements to the next setting, so its settling and its
// refusal to oscillate are tested without a clock (tests/loader/tuner_test.cc). The loader
// (loader.cc) closes a window every kWindowBatches batches Next() hands out, at least
// kWindowSeconds long; the producer (loader_pipeline.cc) applies a new thread count at the next
// batch boundary and adds a slot when none is free and the depth may grow.
//
// The rules (docs/options.md, "Autotuning"), with wait = the consumer's share of the window
// spent blocked in Next(), busy = 1 - the producer's share spent waiting for a free slot, and
// n threads:
//   - wait > kWaitHigh and busy < 1 - kBurstIdle: batches came in bursts the slots could not
//     cover: one slot more, within the memory budget (depth only grows, like tf.data's);
//   - wait > kWaitHigh and busy >= kBusyToRemove: the producer is the bottleneck: one thread
//     more, if the threads' busy time that more threads could reach, busy * min(n + 1,
//     n / (1 - wait)) cores (no more than the consumer would take if it never waited), stays
//     within the CPU share's cores; otherwise (share cap, or fixed workers) twice the slots,
//     within the memory budget, as long as the last doubling raised the batch rate by
//     kDeepenGain (tf.data's prefetch autotuner also doubles while the consumer waits);
//   - wait < kWaitLow and busy * n / (n - 1) <= kBusyToRemove: n - 1 threads would still keep
//     up with headroom: one thread fewer, its core back to the training step.
// A move needs the same want in kConfirmWindows windows in a row, and the window after a move
// is not measured (the pipeline drains to change its threads). No oscillation: a thread is
// added only at busy >= 0.8, which n + 1 threads bring to busy * n / (n + 1), so removing it
// again would need busy <= 0.8; a removal leaves busy <= 0.8, below what an addition needs.
// The share only forbids additions, and the depth only grows, to a bound.
//
// Everything here is plain values and pure functions: safe from any thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace tilefeed::loader {
class Loader;
namespace detail {

inline constexpr std::uint64_t kWindowBatches = 8;
inline constexpr double kWindowSeconds = 0.2;
inline constexpr double kWaitHigh = 0.02;
inline constexpr double kWaitLow = 0.005;
inline constexpr double kBurstIdle = 0.10;
inline constexpr double kBusyToRemove = 0.8;
inline constexpr double kDeepenGain = 0.02;
inline constexpr int kConfirmWindows = 2;
inline constexpr std::size_t kMaxAutoDepth = 64;

enum class TuneReason : std::uint8_t {
  kNone,       // not tuned (fixed workers and depth)
  kStart,      // the starting setting
  kWaited,     // the consumer waited: a thread more
  kRingFull,   // the ring stayed full: a thread fewer
  kBursty,     // bursts, or more threads are not allowed: more slots
  kShareCap,   // the consumer waits; the CPU share allows no more threads, more slots no gain
  kBudgetCap,  // more slots wanted, but the memory budget allows no more
  kForced,     // the tests' hook
};
std::string_view ReasonText(TuneReason reason);

struct TunerSetting {
  int threads = 1;
  std::size_t depth = 2;
  friend bool operator==(const TunerSetting&, const TunerSetting&) = default;
};

struct TunerLimits {
  int max_threads = 1;        // cpu_share x the usable cores, rounded up
  double cpu = 1;             // cpu_share x the usable cores: the threads' busy time, in cores
  std::size_t max_depth = 2;  // memory_budget / slot bytes, at most kMaxAutoDepth
  bool threads = true;        // workers is auto
  bool depth = true;          // prefetch_depth is auto
};

// One window: the batches handed out, seconds of wall time, of the consumer blocked in Next(),
// of the producer waiting for a free slot.
struct TunerWindow {
  double batches = 0;
  double seconds = 0;
  double consumer_wait = 0;
  double producer_idle = 0;
};

struct TunerState {
  TunerSetting setting;
  TuneReason reason = TuneReason::kStart;  // why it last moved, or why it cannot
  int want = 0;                            // the pending move (Want's), confirmed by `streak`
  int streak = 0;
  bool skip = true;    // the next window follows a start or a move: not measured
  double batches = 0;  // over the windows of `streak`: the batch rate of the pending move
  double seconds = 0;
  double deepened_at = 0;    // the batch rate before the last doubling, while it counts
  bool deepen_done = false;  // the last doubling did not raise the rate by kDeepenGain
};

// The state after `window`.
TunerState Tune(TunerState state, const TunerWindow& window, const TunerLimits& limits);

// The tests' hook: `schedule(batches handed out)` replaces the policy after every batch, so a
// test drives the tuner through settings mid-epoch. Not public API.
struct TunerAccess {
  static void Force(Loader& loader, std::function<TunerSetting(std::uint64_t)> schedule);
};

}  // namespace detail
}  // namespace tilefeed::loader
