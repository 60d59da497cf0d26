#pragma once

// The streams a trainer reads besides a LoaderStream (tilefeed/transport/batch_stream.h):
// ZmqBatchStream, from a reader in another process or on another host, and two built from
// the others, for a trainer that owns its streams:
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
//
// ZmqBatchStream: the trainer side of the transport, a BatchStream fed by a ReaderEndpoint
// (transport/reader_endpoint.h) in another process or on another host. It connects to the
// reader's endpoint (tcp:// or ipc://), grants `credits` batches, and receives them on a background
// I/O thread that also sends heartbeats and watches the reader's. Each received frame is
// checked (transport/frame.h) before it is handed out. The payload comes as ZeroMQ messages
// (the ReceivedBatch views them without a copy) or, for shm://, through a shared-memory ring
// (the ReceivedBatch views the slot in place; destroying it returns the slot): a reader at a
// shm:// name that offers no shared memory is refused.
//
// A reader silent for longer than peer_timeout makes Next() throw TransportError("reader
// at <endpoint> silent for 5.0 s"), and so does a dropped connection, at once; a reader's
// bye ends the stream (ended() true). Nothing from the reader is trusted: a batch it had no
// credit for, a frame that fails a check, a label outside [0, classes), a batch of another
// epoch than the one under way (with terms) is an error. With terms, each epoch must have
// the shape the terms give: the welcome announces the batch count the dataset size, slice,
// batch size, remainder and drop-last give; batches come numbered 0, 1, 2, ... and an
// epoch ends after exactly its count (fewer only in an epoch entered mid-way, as its start
// gives); every sample index lies below the dataset size and comes at most once per epoch
// on this slice (a bad sample's substitute, counted in the frame, excepted). A reader that
// holds credits and sends nothing for data_timeout is an error too. With CURVE, a reader whose key
// is not the one in curve_server_key_file, or one that does not allow our key, never welcomes us:
// the constructor throws after peer_timeout, naming the key files.
//
// position() starts at the agreed terms' seed, first epoch and position and dataset size,
// adds each batch's samples times the instance count (at most up to the dataset size), and
// moves to the next epoch at each epoch end and to the end epoch at the bye: what the
// reader's own Loader::state() says after the same batches. Without terms the stream knows
// no seed, dataset or instance count: it counts its own samples from epoch 0 (seed and
// dataset_size 0).
//
// Thread safety: Next() may be called from several threads (serialized); a ReceivedBatch
// may be destroyed from any thread, also after the stream is gone.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tilefeed/loader/loader.h"
#include "tilefeed/transport/batch_stream.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/session.h"

namespace tilefeed::transport {

struct StreamOptions {
  std::string endpoint;     // the reader's, e.g. "tcp://reader-host:5555"
  std::size_t credits = 4;  // batches in flight or queued here; bounds memory
  // Check each payload's XXH3-64 (costs one read of it). Told to the reader in the hello:
  // with false the reader does not compute checksums either.
  bool verify_checksums = true;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds peer_timeout{5000};  // reader silent this long -> error
  // CURVE on: a key file with the reader's public key (transport/curve.h); the stream then
  // talks only to the holder of its secret, encrypted. This trainer's own key pair is made
  // fresh unless curve_client_key_file is set. "" = plaintext, for trusted networks only.
  std::string curve_server_key_file{};
  // CURVE: this trainer's own key file (with secret=, mode 0600), for a reader that
  // allow-lists trainers' public keys; "" = a fresh key pair, which such a reader refuses.
  std::string curve_client_key_file{};
  // The session terms this trainer states in its hello (tilefeed/transport/session.h). With terms,
  // a reader that serves other data refuses us, the welcome's echo is checked, messages
  // over one batch's image bytes are refused by ZeroMQ before any allocation, and the
  // stream ends only with a bye after epoch terms.epochs - 1 (any other end is an error).
  std::optional<SessionTerms> terms{};
  // Labels must lie in [0, classes); a batch with another label is an error naming the
  // sample. 0 = not checked.
  std::uint32_t classes = 0;
  // The longest this stream waits for a batch (or an epoch end, or the bye) while the reader
  // holds credits it could spend: past it the stream fails naming the reader, even though
  // the reader still answers heartbeats. Time the trainer holds every credit itself does
  // not count. 0 = 60 heartbeat intervals (60 s with the 1 s default).
  std::chrono::milliseconds data_timeout{0};
};

class ZmqBatchStream final : public BatchStream {
 public:
  // Connects and waits for the reader's welcome. Throws TransportError if it does not come
  // within peer_timeout or is malformed, the shared memory cannot be mapped, or the CURVE
  // key file is unusable.
  // REQUIRES: options.credits >= 1; `context` outlives the stream.
  ZmqBatchStream(Context& context, StreamOptions options);
  // Says bye to the reader and stops the I/O thread.
  ~ZmqBatchStream() override;
  ZmqBatchStream(const ZmqBatchStream&) = delete;
  ZmqBatchStream& operator=(const ZmqBatchStream&) = delete;

  std::optional<ReceivedBatch> Next() override;
  bool ended() const override;
  std::size_t batches_per_epoch() const override;
  loader::LoaderState position() const override;

  // Batches received and not yet returned by Next() (a snapshot).
  std::size_t queued() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

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
