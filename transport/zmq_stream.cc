// Design note. One I/O thread owns the DEALER socket: it sends hello, maps the shared
// memory the reader offers, receives and checks batches into a queue, returns credits,
// sends heartbeats and watches the reader's. Next() takes from the queue under a mutex.
// Threads that give something back (Next() granting a credit, a ReceivedBatch returning a
// shared slot) record it under a lock and signal an eventfd that the I/O thread polls
// together with the socket, so only the I/O thread ever touches the socket.
//
// Memory: the queue holds at most `credits` batches (the reader spends one credit per
// batch and gets it back only when Next() hands a batch out, or with shared memory when the
// trainer drops it), so a slow trainer bounds what is buffered here and in flight. The
// credits are enforced here, not trusted to the reader: a batch beyond them is an error,
// and ZMQ_MAXMSGSIZE makes ZeroMQ drop a message larger than a batch before allocating it.
// A socket monitor reports a dropped connection, so a dead reader is an error at once.
//
// Each batch received, its checks and its owners are in zmq_stream_batches.cc; the types the
// two files share in transport/zmq_stream_impl.h.

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "tilefeed/transport/streams.h"
#include "transport/curve.h"
#include "transport/event_fd.h"
#include "transport/frame.h"
#include "transport/shm.h"
#include "transport/socket_util.h"
#include "transport/zmq_context.h"
#include "transport/zmq_stream_impl.h"

namespace tilefeed::transport {
namespace {

using detail::Clock;
using detail::Control;
using detail::Entry;
using detail::MessageType;

constexpr std::size_t kMaxCredits = 1024;
// Messages other than batch images (labels, indices, an error's text) stay below this.
constexpr std::int64_t kMinMessageLimit = std::int64_t{1} << 20;

}  // namespace

ZmqBatchStream::ZmqBatchStream(Context& context, StreamOptions options)
    : impl_(std::make_unique<Impl>(context, std::move(options))) {
  Impl& s = *impl_;
  (void)ParseEndpoint(s.options.endpoint, /*bind=*/false);
  if (s.options.credits == 0 || s.options.credits > kMaxCredits) {
    throw std::invalid_argument("StreamOptions::credits must be in [1, 1024]");
  }
  if (s.options.peer_timeout <= std::chrono::milliseconds(0) ||
      s.options.heartbeat_interval <= std::chrono::milliseconds(0)) {
    throw std::invalid_argument("StreamOptions: heartbeat_interval and peer_timeout must be > 0");
  }
  if (!s.options.curve_server_key_file.empty()) {
    const CurveKeyPair server = ReadCurveKeyFile(s.options.curve_server_key_file, false);
    const CurveKeyPair own = s.options.curve_client_key_file.empty()
                                 ? GenerateCurveKeyPair()
                                 : ReadCurveKeyFile(s.options.curve_client_key_file, true);
    s.socket.set(zmq::sockopt::curve_serverkey, server.public_key);
    s.socket.set(zmq::sockopt::curve_publickey, own.public_key);
    s.socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
  }
  try {
    s.socket.set(zmq::sockopt::linger, 0);
    // A stable identity, so the reader recognises us across a TCP reconnect.
    std::random_device random;
    const std::string id = "tilefeed-" + std::to_string(random()) + std::to_string(random());
    s.socket.set(zmq::sockopt::routing_id, id);
    // With terms, no message is larger than one batch's images: a frame announcing more is
    // refused by ZeroMQ before it allocates anything.
    std::int64_t limit = static_cast<std::int64_t>(kMaxFramePayload + kFrameHeaderSize);
    if (s.options.terms) {
      const SessionTerms& t = *s.options.terms;
      limit = std::max<std::int64_t>(
          kMinMessageLimit,
          static_cast<std::int64_t>(t.batch_size * t.image_size.Largest().bytes()));
    }
    s.socket.set(zmq::sockopt::maxmsgsize, limit);
    s.message_limit = limit;
    s.monitor.emplace(detail::MonitorOf(context.impl().context, s.socket, ZMQ_EVENT_DISCONNECTED));
    const std::string address = ZmqEndpoint(s.options.endpoint);
    s.socket.set(zmq::sockopt::ipv6, address.rfind("tcp://[", 0) == 0);
    s.socket.connect(address);
  } catch (const zmq::error_t& e) {
    throw TransportError("connect " + s.options.endpoint + ": " + e.what());
  }
  s.io = std::jthread([&s](std::stop_token token) { s.Loop(token); });
  std::unique_lock lock(s.mutex);
  s.changed.wait(lock, [&s] { return s.welcomed || !s.queue.empty(); });
  if (!s.welcomed) throw TransportError(s.queue.front().error);
}

ZmqBatchStream::~ZmqBatchStream() = default;

// Gives back what the trainer has consumed: inline credits, or shared slots.
void ZmqBatchStream::Impl::ReturnCredits() {
  std::size_t credits = 0;
  std::vector<std::uint32_t> slots;
  {
    std::lock_guard lock(mutex);
    std::swap(credits, credits_to_grant);
  }
  {
    std::lock_guard lock(shared->mutex);
    slots.swap(shared->returned_slots);
  }
  if (credits > 0) {
    outstanding += credits;
    granted += credits;
    Send(Control{MessageType::kCredit, credits});
  }
  for (const std::uint32_t slot : slots) {
    slot_busy[slot] = false;
    Send(Control{MessageType::kCredit, slot});
  }
}

void ZmqBatchStream::Impl::Loop(std::stop_token token) {
  last_heard = Clock::now();
  std::vector<zmq::message_t> parts;
  bool too_many = false;
  try {
    SendHello();
    while (!token.stop_requested()) {
      auto timeout = std::min(detail::Until(last_sent + options.heartbeat_interval),
                              detail::Until(last_heard + options.peer_timeout));
      if (was_waiting) timeout = std::min(timeout, detail::Until(data_since + DataTimeout()));
      zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, shared->wake.fd(), ZMQ_POLLIN, 0},
                                 {monitor->handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 3, timeout);
      if (items[1].revents != 0) shared->wake.Drain();
      if (token.stop_requested()) break;
      const bool disconnected = items[2].revents != 0 && Disconnected();
      // Messages that came before the connection dropped (a bye) are still read first.
      while (detail::ReceiveParts(socket, parts, too_many)) {
        last_heard = Clock::now();
        if (!Handle(parts, too_many)) return;
      }
      // ZeroMQ drops a connection whose peer announces a message over the limit, before
      // reading it: an oversized frame looks like this, also before the welcome (a
      // connection refused by a reader out of descriptors does too). A failed CURVE
      // handshake drops it as well, before the welcome: that one is left to the timeout,
      // whose line says what to check (SilenceHint).
      const bool curve_handshake = !options.curve_server_key_file.empty() && !Welcomed();
      if (disconnected && !curve_handshake) {
        throw TransportError(peer + " dropped the connection" +
                             (Welcomed() ? "" : " before welcoming us") +
                             " (it stopped, died or refused us, or sent an oversized frame: a "
                             "message over this trainer's limit of " +
                             std::to_string(message_limit) + " bytes, one agreed batch)");
      }
      // A batch handed out may have been read as zeros from a vanished page: never go on.
      CheckSegment();
      ReturnCredits();
      // Time counts against the reader only while it could send.
      const bool waiting = Welcomed() && ReaderHoldsCredit();
      if (!waiting || !was_waiting) data_since = Clock::now();
      was_waiting = waiting;
      // Silence first: a reader silent past both bounds is silent, not one that answers
      // heartbeats without data (both are due at once when data_timeout <= peer_timeout).
      const Clock::duration silence = Clock::now() - last_heard;
      if (silence > options.peer_timeout) {
        Fail(peer + " silent for " + detail::Seconds(silence) + " s" + SilenceHint());
        return;
      }
      if (waiting && Clock::now() - data_since > DataTimeout()) {
        Fail(peer + " sent no batch for " + detail::Seconds(Clock::now() - data_since) +
             " s although it held credits (data timeout " + detail::Seconds(DataTimeout()) +
             " s): it answers heartbeats but delivers no data");
        return;
      }
      if (Clock::now() - last_sent >= options.heartbeat_interval) {
        Send(Control{MessageType::kHeartbeat});
      }
    }
    // Destroyed: tell the reader, best effort. A short linger lets ZeroMQ deliver the bye
    // after the socket is closed (linger 0 would drop it, and the reader would see a
    // trainer vanish instead of leave).
    socket.set(
        zmq::sockopt::linger,
        static_cast<int>(std::min(options.peer_timeout, std::chrono::milliseconds(1000)).count()));
    (void)detail::TrySendControl(socket, Control{MessageType::kBye});
  } catch (const TransportError& e) {
    Fail(e.what());
  } catch (const zmq::error_t& e) {
    Fail(peer + ": " + e.what());
  }
}

bool ZmqBatchStream::Impl::Handle(std::vector<zmq::message_t>& parts, bool too_many) {
  const std::optional<Control> control =
      parts.empty() ? std::nullopt : detail::ParseControl(detail::Bytes(parts[0]));
  if (!control || too_many) throw TransportError(peer + ": malformed message");
  bool welcomed_now = false;
  {
    std::lock_guard lock(mutex);
    welcomed_now = welcomed;
  }
  if (!welcomed_now && options.endpoint.rfind("tcp://", 0) != 0) {
    if (const std::string other = detail::OtherUser(parts[0]); !other.empty()) {
      throw TransportError(peer + " is not this user's: " + other);
    }
  }
  if (!welcomed_now && control->type != MessageType::kWelcome &&
      control->type != MessageType::kError && control->type != MessageType::kHeartbeat) {
    throw TransportError(peer + ": message before welcome");
  }
  switch (control->type) {
    case MessageType::kWelcome:
      if (welcomed_now) throw TransportError(peer + ": second welcome");
      HandleWelcome(*control, parts);
      return true;
    case MessageType::kBatch: {
      data_since = Clock::now();
      ReceivedBatch batch = MakeBatch(*control, parts);
      if (!last_batch_epoch || *last_batch_epoch != batch.epoch()) epoch_batches = 0;
      last_batch_epoch = batch.epoch();
      ++epoch_batches;
      Push(Entry{Entry::kBatch, std::move(batch), {}});
      return true;
    }
    case MessageType::kEpochEnd:
      if (last_epoch_end && control->a <= *last_epoch_end) {
        throw TransportError(peer + ": end of epoch " + std::to_string(control->a) +
                             " after the end of epoch " + std::to_string(*last_epoch_end));
      }
      if (options.terms && control->a != EpochUnderWay()) {
        throw TransportError(peer + ": end of epoch " + std::to_string(control->a) +
                             " during epoch " + std::to_string(EpochUnderWay()));
      }
      if (const std::optional<std::uint64_t> agreed = AgreedBatches(control->a);
          agreed && BatchesOf(control->a) != *agreed) {
        throw TransportError(peer + " ended epoch " + std::to_string(control->a) + " after " +
                             std::to_string(BatchesOf(control->a)) + " of its " +
                             std::to_string(*agreed) + " batches");
      }
      data_since = Clock::now();
      last_epoch_end = control->a;
      Push(Entry{Entry::kEpochEnd, std::nullopt, {}});
      return true;
    case MessageType::kHeartbeat:
      return true;
    case MessageType::kBye:
      CheckEnd(*control);
      Push(Entry{Entry::kEnd, std::nullopt, {}, control->a});
      // Acknowledge: every batch before the bye has arrived.
      (void)detail::TrySendControl(socket, Control{MessageType::kBye});
      return false;
    case MessageType::kError: {
      const std::string text = parts.size() > 1 ? parts[1].to_string() : "unknown error";
      Fail(peer + ": " + text.substr(0, 4096));
      return false;
    }
    default:
      throw TransportError(peer + ": unexpected message type " +
                           std::to_string(static_cast<int>(control->type)));
  }
}

void ZmqBatchStream::Impl::HandleWelcome(const Control& control,
                                         std::vector<zmq::message_t>& parts) {
  if (parts.size() < 2) throw TransportError(peer + ": welcome without session terms");
  if (control.b == 0 && IsShmEndpoint(options.endpoint)) {
    throw TransportError(peer + " offers no shared memory, which shm:// asks for");
  }
  std::optional<SessionTerms> echoed;
  if (options.terms) {
    echoed = ParseSessionTerms(detail::Bytes(parts[1]));
    if (!echoed) throw TransportError(peer + ": welcome without well-formed session terms");
    const SessionTerms& mine = *options.terms;
    std::optional<std::string> differs = Disagreement(mine, *echoed);
    if (!differs && (echoed->first_epoch != mine.first_epoch ||
                     echoed->first_position != mine.first_position)) {
      differs = "data position: trainer epoch " + std::to_string(mine.first_epoch) + " position " +
                std::to_string(mine.first_position) + ", reader epoch " +
                std::to_string(echoed->first_epoch) + " position " +
                std::to_string(echoed->first_position);
    }
    if (differs) throw TransportError(peer + " serves other data: " + *differs);
  }
  std::size_t credits = options.credits;
  if (control.b != 0) {
    layout = detail::SlotLayout::Checked(control.b, control.c, control.d);
    if (!layout || parts.size() != 3) throw TransportError(peer + ": bad shared-memory offer");
    const std::string name = parts[2].to_string();
    if (name.rfind("/tilefeed-", 0) != 0 || name.find('/', 1) != std::string::npos) {
      throw TransportError(peer + ": bad shared-memory name");
    }
    // Names left by a reader killed before any trainer mapped its slots go now.
    detail::RemoveStaleSegments();
    shared->segment = detail::ShmSegment::Open(name, layout->total_bytes());
    // Mapped: drop the name, so a crash of either side from now on leaves nothing behind.
    shared->segment.Unlink();
    slot_busy.assign(layout->slot_count, false);
    credits = layout->slot_count;
  }
  batches_per_epoch = control.a;
  if (echoed) {
    // A reader that names no dataset is held to this trainer's (its order, its size).
    dataset_size =
        echoed->dataset.samples != 0 ? echoed->dataset.samples : options.terms->dataset.samples;
    const std::optional<std::uint64_t> full = AgreedBatches(echoed->first_epoch + 1);
    if (full && *full != batches_per_epoch) {
      throw TransportError(peer + " announces " + std::to_string(batches_per_epoch) +
                           " batches per epoch; the agreed terms give " + std::to_string(*full));
    }
  }
  outstanding = layout ? 0 : credits;
  granted = outstanding;
  Send(Control{MessageType::kReady, credits});
  {
    std::lock_guard lock(mutex);
    // The echo carries the reader's dataset identity even when this trainer knows none.
    if (echoed) {
      position = {echoed->seed, echoed->first_epoch, echoed->first_position,
                  echoed->dataset.samples};
      instances = echoed->slice_count;
    }
    welcomed = true;
  }
  changed.notify_all();
}

// As the reader's Loader::state() moves: a batch adds its samples for every instance (up to
// the dataset size, which an epoch's padded last batches would pass), an end starts the next
// epoch. Without terms (dataset size 0, one instance) a batch of another epoch starts it.
void ZmqBatchStream::Impl::Advance(const Entry& entry) {
  switch (entry.kind) {
    case Entry::kBatch: {
      if (entry.batch->epoch() != position.epoch) {
        position = {position.seed, entry.batch->epoch(), 0, position.dataset_size};
      }
      const std::uint64_t after = position.position + entry.batch->size() * instances;
      position.position =
          position.dataset_size == 0 ? after : std::min(after, position.dataset_size);
      return;
    }
    case Entry::kEpochEnd:
      position.epoch++;
      position.position = 0;
      return;
    case Entry::kEnd:
      position.epoch = entry.end_epoch;
      position.position = 0;
      return;
    case Entry::kError:
      return;
  }
}

std::optional<ReceivedBatch> ZmqBatchStream::Next() {
  Impl& s = *impl_;
  std::unique_lock lock(s.mutex);
  s.changed.wait(lock, [&s] { return !s.queue.empty(); });
  Entry& entry = s.queue.front();
  s.Advance(entry);
  switch (entry.kind) {
    case Entry::kError:
      throw TransportError(entry.error);  // stays queued: every later call throws it too
    case Entry::kEnd:
      return std::nullopt;  // stays queued: the stream has ended
    case Entry::kEpochEnd:
      s.queue.pop_front();
      return std::nullopt;
    case Entry::kBatch:
      break;
  }
  // Queued before the reader shrank the segment, its pixels may now read as zeros.
  s.CheckSegment();
  ReceivedBatch batch = std::move(*entry.batch);
  s.queue.pop_front();
  --s.queued_batches;
  if (!s.layout) {
    ++s.credits_to_grant;
    s.shared->wake.Signal();
  }
  return batch;
}

bool ZmqBatchStream::ended() const {
  std::lock_guard lock(impl_->mutex);
  return !impl_->queue.empty() && impl_->queue.front().kind == Entry::kEnd;
}

std::size_t ZmqBatchStream::batches_per_epoch() const { return impl_->batches_per_epoch; }

loader::LoaderState ZmqBatchStream::position() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->position;
}

std::size_t ZmqBatchStream::queued() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->queued_batches;
}

}  // namespace tilefeed::transport
