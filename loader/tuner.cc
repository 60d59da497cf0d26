// The autotuner's policy; the rules and why they settle are in tuner.h.

#include "loader/tuner.h"

#include <algorithm>

namespace tilefeed::loader::detail {
namespace {

enum Move : int { kHold = 0, kAddThread = 1, kRemoveThread = -1, kAddSlot = 2, kDoubleSlots = 3 };

// The move `window` asks for, and the reason to report when a cap forbids it.
Move Want(const TunerState& state, const TunerWindow& window, const TunerLimits& limits,
          TuneReason& capped) {
  const TunerSetting& now = state.setting;
  const double wait = window.consumer_wait / window.seconds;
  const double busy = 1.0 - std::clamp(window.producer_idle / window.seconds, 0.0, 1.0);
  const int n = now.threads;
  if (wait > kWaitHigh) {
    const bool deeper = limits.depth && now.depth < limits.max_depth;
    if (busy < 1.0 - kBurstIdle) {
      if (deeper) return kAddSlot;
      if (limits.depth) capped = TuneReason::kBudgetCap;
    }
    if (busy >= kBusyToRemove) {
      // The most the threads could be busy with one more: no more than the consumer takes.
      const double reach = busy * std::min(n + 1.0, n / std::max(1.0 - wait, 1e-3));
      if (limits.threads && n < limits.max_threads && reach <= limits.cpu) return kAddThread;
      if (limits.threads) capped = TuneReason::kShareCap;
      if (deeper && !state.deepen_done) return kDoubleSlots;
      if (limits.depth && !deeper && !limits.threads) capped = TuneReason::kBudgetCap;
    }
    return kHold;
  }
  if (wait < kWaitLow && limits.threads && n > 1 && busy * n / (n - 1) <= kBusyToRemove) {
    return kRemoveThread;
  }
  return kHold;
}

}  // namespace

std::string_view ReasonText(TuneReason reason) {
  static constexpr std::string_view kText[] = {"",       "start",     "waited",     "ring full",
                                               "bursty", "share cap", "budget cap", "forced"};
  return kText[static_cast<std::size_t>(reason)];
}

TunerState Tune(TunerState state, const TunerWindow& window, const TunerLimits& limits) {
  if (state.skip || window.seconds <= 0) {
    state.skip = false;
    return state;
  }
  if (window.consumer_wait < kWaitLow * window.seconds) {
    state.deepened_at = 0;  // the consumer keeps up: a later wait may want more slots afresh
    state.deepen_done = false;
  }
  TuneReason capped = TuneReason::kNone;
  const Move want = Want(state, window, limits, capped);
  if (want != state.want) {
    state.streak = 0;
    state.batches = state.seconds = 0;
  }
  ++state.streak;
  state.want = want;
  state.batches += window.batches;
  state.seconds += window.seconds;
  if (want == kHold) {
    if (capped != TuneReason::kNone) state.reason = capped;
    return state;
  }
  if (state.streak < kConfirmWindows) return state;
  const double rate = state.batches / state.seconds;
  if (want == kDoubleSlots && state.deepened_at > 0 &&
      rate < state.deepened_at * (1 + kDeepenGain)) {
    state.deepen_done = true;  // the last doubling did not pay: keep its slots, stop there
    if (limits.threads) state.reason = TuneReason::kShareCap;
  } else if (want >= kAddSlot) {
    state.setting.depth = std::min(
        want == kAddSlot ? state.setting.depth + 1 : 2 * state.setting.depth, limits.max_depth);
    state.deepened_at = want == kDoubleSlots ? rate : 0;
    state.reason = TuneReason::kBursty;
    state.skip = true;
  } else {
    state.setting.threads += want;
    state.deepened_at = 0;
    state.deepen_done = false;
    state.reason = want == kAddThread ? TuneReason::kWaited : TuneReason::kRingFull;
    state.skip = true;
  }
  state.want = kHold;
  state.streak = 0;
  state.batches = state.seconds = 0;
  return state;
}

}  // namespace tilefeed::loader::detail
