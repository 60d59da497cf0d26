#pragma once

// Two BatchStreams built from the others (tilefeed/transport/batch_stream.h,
// tilefeed/transport/zmq_stream.h), for a trainer that owns its streams:
//
//   OwningLoaderStream  a LoaderStream that owns its Loader, for a stream made and dropped
//                       as a unit (a validation pass per epoch).
//   ReconnectingStream  a ZmqBatchStream opened on session terms that, given a reconnect
//                       window, replaces a lost reader (stopped, dead, replaced) by a new
//                       session at the lost stream's data position; without one, a loss is
//                       the ZmqBatchStream's TransportError.
//
// Thread safety: as BatchStream's contract. Next() and position() of a ReconnectingStream
// must be serialized by the caller (a trainer's IO tiles call them under their fetch lock):
// a reconnection replaces the stream they read.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tilefeed/loader/loader.h"
#include "tilefeed/transport/batch_stream.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/zmq_stream.h"

namespace tilefeed::transport {

class OwningLoaderStream final : public BatchStream {
 public:
  // REQUIRES: loader != nullptr.
  explicit OwningLoaderStream(std::unique_ptr<loader::Loader> loader)
      : loader_(std::move(loader)), stream_(*loader_) {}
  std::optional<ReceivedBatch> Next() override { return stream_.Next(); }
  bool ended() const override { return stream_.ended(); }
  std::size_t batches_per_epoch() const override { return stream_.batches_per_epoch(); }
  loader::LoaderState position() const override { return stream_.position(); }

 private:
  std::unique_ptr<loader::Loader> loader_;
  LoaderStream stream_;
};

class ReconnectingStream final : public BatchStream {
 public:
  // Connects to options.endpoint on options.terms (ZmqBatchStream's constructor). With a
  // `reconnect_window`, the first connection, and every one after a loss, is retried until
  // it succeeds or the window has passed since the loss; each loss is told to `log` as
  // "WHY; reconnecting at epoch E position P". Throws TransportError: the last attempt's,
  // with "(no reader came back within N ms)" added when a window closed.
  // REQUIRES: options.terms; `context` outlives the stream; `log` is callable when a
  // window is given.
  ReconnectingStream(Context& context, StreamOptions options,
                     std::optional<std::chrono::milliseconds> reconnect_window,
                     std::function<void(const std::string&)> log);

  // The next batch. A lost reader within the window is replaced by a session at this
  // stream's position; a loss after the last epoch's end (before the reader's bye) ends the
  // stream.
  std::optional<ReceivedBatch> Next() override;
  bool ended() const override;
  // 0 while no reader is connected.
  std::size_t batches_per_epoch() const override;
  // The connected stream's; between a loss and the reconnection, where the lost one stood
  // (at first: the terms' seed, first epoch and position and dataset size).
  loader::LoaderState position() const override;
  // Whether the connected reader sends through shared memory.
  // REQUIRES: a reader is connected (after construction, until ended()).
  bool shared_memory() const;

 private:
  void Reconnect(const std::string& why);

  Context& context_;
  StreamOptions options_;
  std::optional<std::chrono::milliseconds> reconnect_window_;
  std::function<void(const std::string&)> log_;
  loader::LoaderState lost_at_;  // the terms' position until a stream is lost
  bool ended_ = false;
  std::optional<ZmqBatchStream> stream_;
};

}  // namespace tilefeed::transport
