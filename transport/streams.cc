#include "tilefeed/transport/streams.h"

#include <cassert>
#include <thread>
#include <utility>

namespace tilefeed::transport {

ReconnectingStream::ReconnectingStream(Context& context, StreamOptions options,
                                       std::optional<std::chrono::milliseconds> reconnect_window,
                                       std::function<void(const std::string&)> log)
    : context_(context),
      options_(std::move(options)),
      reconnect_window_(reconnect_window),
      log_(std::move(log)) {
  assert(options_.terms);
  lost_at_ = {options_.terms->seed, options_.terms->first_epoch, options_.terms->first_position,
              options_.terms->dataset.samples};
  if (reconnect_window_) {
    Reconnect("");
  } else {
    stream_.emplace(context_, options_);
  }
}

std::optional<ReceivedBatch> ReconnectingStream::Next() {
  while (!ended_) {
    try {
      return stream_->Next();
    } catch (const TransportError& e) {
      if (!reconnect_window_) throw;
      Reconnect(e.what());
    }
  }
  return std::nullopt;
}

bool ReconnectingStream::ended() const { return ended_ || (stream_ && stream_->ended()); }

std::size_t ReconnectingStream::batches_per_epoch() const {
  return stream_ ? stream_->batches_per_epoch() : 0;
}

loader::LoaderState ReconnectingStream::position() const {
  return stream_ ? stream_->position() : lost_at_;
}

// Opens a stream at the lost stream's position, retrying until the window closes.
void ReconnectingStream::Reconnect(const std::string& why) {
  if (stream_) lost_at_ = stream_->position();
  stream_.reset();
  if (lost_at_.epoch >= options_.terms->epochs) {
    ended_ = true;  // lost after the last epoch's end, before the bye: nothing is missing
    return;
  }
  options_.terms->first_epoch = lost_at_.epoch;
  options_.terms->first_position = lost_at_.position;
  if (!why.empty()) {
    log_(why + "; reconnecting at epoch " + std::to_string(lost_at_.epoch) + " position " +
         std::to_string(lost_at_.position));
  }
  const auto deadline = std::chrono::steady_clock::now() + *reconnect_window_;
  while (true) {
    try {
      stream_.emplace(context_, options_);
      return;
    } catch (const TransportError& e) {
      if (std::chrono::steady_clock::now() >= deadline) {
        throw TransportError(std::string(e.what()) + " (no reader came back within " +
                             std::to_string(reconnect_window_->count()) + " ms)");
      }
    }
    // A refusal comes at once: do not spin on it.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace tilefeed::transport
