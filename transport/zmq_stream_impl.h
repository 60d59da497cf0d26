// Internals of transport/zmq_stream.cc's ZmqBatchStream, shared by the files that implement
// it: zmq_stream.cc (the connection, the I/O loop, the queue) and zmq_stream_batches.cc
// (each batch received, checked against the agreed terms and handed out). The design note
// is at the top of zmq_stream.cc. Not installed.

#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tilefeed/transport/streams.h"
#include "transport/event_fd.h"
#include "transport/frame.h"
#include "transport/shm.h"
#include "transport/socket_util.h"
#include "transport/wire.h"
#include "transport/zmq_context.h"

namespace tilefeed::transport {
namespace detail {

// State shared with ReceivedBatch owners, which may outlive the stream.
struct Shared {
  detail::EventFd wake;
  std::mutex mutex;
  std::vector<std::uint32_t> returned_slots;  // guarded by mutex
  detail::ShmSegment segment;                 // set once, before any batch exists
};

struct Entry {
  enum Kind { kBatch, kEpochEnd, kEnd, kError };
  Kind kind = kBatch;
  std::optional<ReceivedBatch> batch;
  std::string error;
  std::uint64_t end_epoch = 0;  // kEnd: the epoch after the last, as the bye names it
};

}  // namespace detail

struct ZmqBatchStream::Impl {
  Impl(Context& context, StreamOptions options)
      : options(std::move(options)),
        socket(context.impl().context, zmq::socket_type::dealer),
        shared(std::make_shared<detail::Shared>()),
        peer("reader at " + this->options.endpoint) {}

  ~Impl() {
    if (io.joinable()) {
      io.request_stop();
      shared->wake.Signal();
      io.join();
    }
    StopWatching();
  }

  void Loop(std::stop_token token);
  void ReturnCredits();
  // Handles one message; returns false when the session is over.
  bool Handle(std::vector<zmq::message_t>& parts, bool too_many);
  void HandleWelcome(const detail::Control& control, std::vector<zmq::message_t>& parts);
  ReceivedBatch MakeBatch(const detail::Control& control, std::vector<zmq::message_t>& parts);
  void CheckBatch(const FrameHeader& header, std::span<const std::int32_t> labels,
                  std::span<const std::uint64_t> indices) const;
  void CheckEnd(const detail::Control& bye) const;
  // With shared memory: throws if the reader shrank the segment (detail/shm.h's guard).
  void CheckSegment() const {
    if (!layout || !shared->segment.Shrunk()) return;
    throw TransportError(peer + " cut its shared-memory segment " + shared->segment.name() +
                         " to " + std::to_string(shared->segment.FileBytes()) + " of the " +
                         std::to_string(shared->segment.size()) +
                         " bytes it announced: the batches there are gone");
  }
  // With terms: batch numbering; with a dataset size too, each position's sample index is
  // the agreed epoch order's (or, counted as substituted, one of the 64 after it).
  void CheckOrder(const FrameHeader& header, std::span<const std::uint64_t> indices);
  // With terms and a known dataset size: the batches epoch `epoch` has for this slice.
  std::optional<std::uint64_t> AgreedBatches(std::uint64_t epoch) const;
  // With terms and a dataset size: this slice's order of `epoch` (shuffle false: its size).
  loader::EpochOrder OrderOf(std::uint64_t epoch, bool shuffle) const;
  // Batches of `epoch` received so far.
  std::uint64_t BatchesOf(std::uint64_t epoch) const {
    return last_batch_epoch && *last_batch_epoch == epoch ? epoch_batches : 0;
  }
  std::chrono::milliseconds DataTimeout() const {
    return options.data_timeout > std::chrono::milliseconds(0) ? options.data_timeout
                                                               : 60 * options.heartbeat_interval;
  }
  // Whether the reader holds a credit (inline) or a free slot (shared memory) it could use.
  bool ReaderHoldsCredit() const {
    if (!layout) return outstanding > 0;
    return std::find(slot_busy.begin(), slot_busy.end(), false) != slot_busy.end();
  }
  // With terms: the epoch whose batches come now (the first, or the one after the last end).
  std::uint64_t EpochUnderWay() const {
    return last_epoch_end ? *last_epoch_end + 1 : options.terms->first_epoch;
  }
  // Moves `position` past what Next() hands out. REQUIRES: mutex held.
  void Advance(const detail::Entry& entry);
  // Ends the monitoring before `monitor` closes. libzmq sends each event from the context's
  // I/O thread with a blocking send on its end of the monitor pair: an event after our end
  // has closed (a connection that drops while the closed socket lingers) would block that
  // thread for good, and with it every socket of the Context (the next stream never
  // connects, and the Context's destruction never returns). libzmq issue 3575.
  void StopWatching() noexcept { (void)zmq_socket_monitor(socket.handle(), nullptr, 0); }
  void Push(detail::Entry entry) {
    {
      std::lock_guard lock(mutex);
      if (entry.kind == detail::Entry::kBatch) ++queued_batches;
      queue.push_back(std::move(entry));
    }
    changed.notify_all();
  }
  void Fail(const std::string& message) {
    Push(detail::Entry{detail::Entry::kError, std::nullopt, message});
  }
  // Never blocks: a DEALER without a pipe would wait forever. No pipe means the connection
  // is gone for good (ZeroMQ keeps a connecting socket's pipe across reconnects).
  void Send(const detail::Control& control) {
    last_sent = detail::Clock::now();
    if (!detail::TrySendControl(socket, control)) throw Refused();
  }
  // A send that found no connection: the reader refused or dropped it, during the CURVE
  // handshake (its allow-list) while we are not yet welcomed.
  TransportError Refused() const {
    std::string why = " refused or dropped the connection";
    if (!options.curve_server_key_file.empty() && !Welcomed()) {
      why += " during the CURVE handshake (";
      why += options.curve_client_key_file.empty()
                 ? std::string(
                       "this trainer has no key file, so it used a fresh key; a reader "
                       "that allow-lists trainers refuses it")
                 : "is the public key of " + options.curve_client_key_file +
                       " on the reader's allow-list?";
      why += ")";
    }
    return TransportError(peer + why);
  }
  void SendHello() {
    last_sent = detail::Clock::now();
    const auto hello = detail::EncodeControl(
        {detail::MessageType::kHello, options.credits, options.verify_checksums ? 1u : 0u});
    bool sent = false;
    if (options.terms) {
      const EncodedSessionTerms terms = EncodeSessionTerms(*options.terms);
      sent = socket.send(zmq::buffer(hello), zmq::send_flags::sndmore | zmq::send_flags::dontwait)
                 .has_value() &&
             socket.send(zmq::buffer(terms), zmq::send_flags::dontwait).has_value();
    } else {
      sent = socket.send(zmq::buffer(hello), zmq::send_flags::dontwait).has_value();
    }
    if (!sent) throw Refused();
  }
  // Reads the monitor's events; true if one was a disconnection.
  bool Disconnected() {
    bool disconnected = false;
    std::vector<zmq::message_t> event;
    bool too_many = false;
    while (detail::ReceiveParts(*monitor, event, too_many)) {
      std::uint16_t id = 0;
      if (!event.empty() && event[0].size() >= 2) std::memcpy(&id, event[0].data(), 2);
      if (id == ZMQ_EVENT_DISCONNECTED) disconnected = true;
    }
    return disconnected;
  }
  // Why a reader may be silent, when CURVE is on and it never welcomed us.
  std::string SilenceHint() const {
    std::string hint;
    if (!options.curve_server_key_file.empty() && !Welcomed()) {
      // A CURVE handshake with the wrong server key fails without a word to us: the
      // reader cannot decrypt our hello and drops the connection; ZeroMQ retries.
      hint = " and never welcomed us (CURVE is on: is the public key in " +
             options.curve_server_key_file +
             " the reader's, does the reader use CURVE, and if it allow-lists trainers, is " +
             (options.curve_client_key_file.empty()
                  ? std::string("this trainer's key on it? This trainer has no key file, so "
                                "it uses a fresh key that no allow-list holds)")
                  : "the public key of " + options.curve_client_key_file + " on it?)");
    }
    return hint;
  }
  bool Welcomed() const {
    std::lock_guard lock(mutex);
    return welcomed;
  }

  const StreamOptions options;
  zmq::socket_t socket;
  std::optional<zmq::socket_t> monitor;  // ZMQ_EVENT_DISCONNECTED of `socket`
  std::shared_ptr<detail::Shared> shared;
  const std::string peer;  // "reader at <endpoint>", for messages

  // Set by the I/O thread before `welcomed` is published under the mutex.
  std::size_t batches_per_epoch = 0;
  std::optional<detail::SlotLayout> layout;

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::deque<detail::Entry> queue;   // guarded by mutex
  std::size_t queued_batches = 0;    // guarded by mutex
  bool welcomed = false;             // guarded by mutex
  loader::LoaderState position;      // guarded by mutex; set at the welcome, then by Next()
  std::uint64_t instances = 1;       // guarded by mutex; the agreed slice count
  std::size_t credits_to_grant = 0;  // guarded by mutex; inline mode

  // I/O thread only.
  detail::Clock::time_point last_sent;
  detail::Clock::time_point last_heard;
  std::vector<bool> slot_busy;
  std::uint64_t outstanding = 0;  // inline: credits granted and not yet spent by a batch
  std::uint64_t granted = 0;      // inline: every credit granted so far, for the error line
  std::optional<std::uint64_t> last_epoch_end;
  std::optional<std::uint64_t> last_batch_epoch;
  std::uint64_t epoch_batches = 0;          // batches of last_batch_epoch received
  std::uint64_t dataset_size = 0;           // the echoed terms'; 0 = unknown
  std::int64_t message_limit = 0;           // ZMQ_MAXMSGSIZE: a larger message drops the connection
  std::optional<loader::EpochOrder> order;  // with terms and a dataset size: order_epoch's
  std::uint64_t order_epoch = 0;
  detail::Clock::time_point data_since;  // the last data, or when the reader got a credit back
  bool was_waiting = false;              // the reader held a credit at the last look

  std::jthread io;  // last: stopped first
};

}  // namespace tilefeed::transport
