// The autotuner's policy; the rules and why they settle are in tuner.h.

#include "loader/tuner.h"

#include <algorithm>

namespace tilefeed::loader::detail {
namespace {

enum Move : int { kHold = 0, kAddThread = 1, kRemoveThread = -1, kAddSlot = 2 };

// The move `window` asks for, and the reason to report when a cap forbids it.
Move Want(const TunerSetting& now, const TunerWindow& window, const TunerLimits& limits,
          TuneReason& capped) {
  const double wait = window.consumer_wait / window.seconds;
  const double busy = 1.0 - std::clamp(window.producer_idle / window.seconds, 0.0, 1.0);
  if (wait > kWaitHigh) {
    if (busy < 1.0 - kBurstIdle) {
      if (limits.depth && now.depth < limits.max_depth) return kAddSlot;
      if (limits.depth) capped = TuneReason::kBudgetCap;
    }
    if (busy >= kBusyToRemove) {
      if (limits.threads && now.threads < limits.max_threads) return kAddThread;
      if (limits.threads) capped = TuneReason::kShareCap;
    }
    return kHold;
  }
  const int n = now.threads;
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
  TuneReason capped = TuneReason::kNone;
  const Move want = Want(state.setting, window, limits, capped);
  state.streak = want == state.want ? state.streak + 1 : 1;
  state.want = want;
  if (want == kHold) {
    if (capped != TuneReason::kNone) state.reason = capped;
    return state;
  }
  if (state.streak < kConfirmWindows) return state;
  if (want == kAddSlot) {
    ++state.setting.depth;
  } else {
    state.setting.threads += want;
  }
  state.reason = want == kAddSlot     ? TuneReason::kBursty
                 : want == kAddThread ? TuneReason::kWaited
                                      : TuneReason::kRingFull;
  state.want = kHold;
  state.streak = 0;
  state.skip = true;
  return state;
}

}  // namespace tilefeed::loader::detail
