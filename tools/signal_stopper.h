#pragma once

// SIGINT and SIGTERM without a handler: blocked in the constructing thread before any other
// starts (threads inherit the mask: construct it first in main), taken by a thread of its own
// with sigtimedwait. A signal requests stop on token() (tilefeed-serve ends its session and
// exits 130), runs the action last given to OnSignal (train: its metrics' end record) under
// the lock OnSignal takes, and, if constructed to `die`, then ends the process by the signal
// as its default action would (a shell sees 128 + signal). Any thread may call.

#include <signal.h>

#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>

namespace tilefeed::tools {

class SignalStopper {
 public:
  explicit SignalStopper(bool die = false) : die_(die) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    thread_ = std::jthread([this](std::stop_token token) {
      const timespec tick{0, 200'000'000};
      int signal = -1;
      while (signal <= 0 && !token.stop_requested()) {
        signal = sigtimedwait(&signals_, nullptr, &tick);
      }
      if (signal <= 0) return;
      source_.request_stop();
      const std::lock_guard lock(mutex_);
      if (action_) action_();
      if (!die_) return;
      ::signal(signal, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &signals_, nullptr);
      ::raise(signal);
    });
  }
  SignalStopper(const SignalStopper&) = delete;  // its thread holds `this`

  std::stop_token token() const { return source_.get_token(); }
  void OnSignal(std::function<void()> action) {
    const std::lock_guard lock(mutex_);
    action_ = std::move(action);
  }

 private:
  bool die_;
  sigset_t signals_;
  std::stop_source source_;
  std::mutex mutex_;
  std::function<void()> action_;
  std::jthread thread_;  // last: joined before what it reads goes
};

}  // namespace tilefeed::tools
