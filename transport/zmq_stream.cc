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

#include "tilefeed/transport/zmq_stream.h"

#include <algorithm>
#include <cassert>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "tilefeed/transport/curve.h"
#include "tilefeed/transport/frame.h"
#include "transport/event_fd.h"
#include "transport/shm.h"
#include "transport/socket_util.h"
#include "transport/zmq_context.h"

namespace tilefeed::transport {
namespace {

using detail::Clock;
using detail::Control;
using detail::MessageType;

constexpr std::size_t kMaxCredits = 1024;
// Messages other than batch images (labels, indices, an error's text) stay below this.
constexpr std::int64_t kMinMessageLimit = std::int64_t{1} << 20;

// State shared with ReceivedBatch owners, which may outlive the stream.
struct Shared {
  detail::EventFd wake;
  std::mutex mutex;
  std::vector<std::uint32_t> returned_slots;  // guarded by mutex
  detail::ShmSegment segment;                 // set once, before any batch exists
};

// Keeps a batch's ZeroMQ messages, and aligned copies of labels and indices if a message's
// data was not aligned for them.
class MessageOwner final : public ReceivedBatch::Owner {
 public:
  explicit MessageOwner(std::vector<zmq::message_t> parts) : parts_(std::move(parts)) {}

  const zmq::message_t& part(std::size_t i) const { return parts_[i]; }

  template <typename T>
  std::span<const T> View(std::size_t i, std::vector<T>& copy) const {
    const zmq::message_t& message = parts_[i];
    const std::size_t count = message.size() / sizeof(T);
    if (reinterpret_cast<std::uintptr_t>(message.data()) % alignof(T) == 0) {
      return {static_cast<const T*>(message.data()), count};
    }
    copy.resize(count);
    std::memcpy(copy.data(), message.data(), count * sizeof(T));
    return copy;
  }

  std::vector<std::int32_t> labels_copy;
  std::vector<std::uint64_t> indices_copy;

 private:
  std::vector<zmq::message_t> parts_;
};

// Returns a shared-memory slot to the reader when the trainer drops the batch. Labels and
// indices are copied out of the slot: the reader can still write the slot, so values
// checked in place could change after the check.
class SlotOwner final : public ReceivedBatch::Owner {
 public:
  SlotOwner(std::shared_ptr<Shared> shared, std::uint32_t slot)
      : shared_(std::move(shared)), slot_(slot) {}
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> indices;
  ~SlotOwner() override {
    {
      std::lock_guard lock(shared_->mutex);
      shared_->returned_slots.push_back(slot_);
    }
    shared_->wake.Signal();
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::uint32_t slot_;
};

struct Entry {
  enum Kind { kBatch, kEpochEnd, kEnd, kError };
  Kind kind = kBatch;
  std::optional<ReceivedBatch> batch;
  std::string error;
  std::uint64_t end_epoch = 0;  // kEnd: the epoch after the last, as the bye names it
};

}  // namespace

struct ZmqBatchStream::Impl {
  Impl(Context& context, StreamOptions options)
      : options(std::move(options)),
        socket(context.impl().context, zmq::socket_type::dealer),
        shared(std::make_shared<Shared>()),
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
  void HandleWelcome(const Control& control, std::vector<zmq::message_t>& parts);
  ReceivedBatch MakeBatch(const Control& control, std::vector<zmq::message_t>& parts);
  void CheckBatch(const FrameHeader& header, std::span<const std::int32_t> labels,
                  std::span<const std::uint64_t> indices) const;
  void CheckEnd(const Control& bye) const;
  // With shared memory: throws if the reader shrank the segment (detail/shm.h's guard).
  void CheckSegment() const {
    if (!layout || !shared->segment.Shrunk()) return;
    throw TransportError(peer + " cut its shared-memory segment " + shared->segment.name() +
                         " to " + std::to_string(shared->segment.FileBytes()) + " of the " +
                         std::to_string(shared->segment.size()) +
                         " bytes it announced: the batches there are gone");
  }
  // With terms: batch numbering, sample indices in range and once per epoch.
  void CheckOrder(const FrameHeader& header, std::span<const std::uint64_t> indices);
  // With terms and a known dataset size: the batches epoch `epoch` has for this slice.
  std::optional<std::uint64_t> AgreedBatches(std::uint64_t epoch) const;
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
  void Advance(const Entry& entry);
  void WatchConnection(zmq::context_t& context);
  // Ends the monitoring before `monitor` closes. libzmq sends each event from the context's
  // I/O thread with a blocking send on its end of the monitor pair: an event after our end
  // has closed (a connection that drops while the closed socket lingers) would block that
  // thread for good, and with it every socket of the Context (the next stream never
  // connects, and the Context's destruction never returns). libzmq issue 3575.
  void StopWatching() noexcept { (void)zmq_socket_monitor(socket.handle(), nullptr, 0); }
  void Push(Entry entry) {
    {
      std::lock_guard lock(mutex);
      if (entry.kind == Entry::kBatch) ++queued_batches;
      queue.push_back(std::move(entry));
    }
    changed.notify_all();
  }
  void Fail(const std::string& message) { Push(Entry{Entry::kError, std::nullopt, message}); }
  // Never blocks: a DEALER without a pipe would wait forever. No pipe means the connection
  // is gone for good (ZeroMQ keeps a connecting socket's pipe across reconnects).
  void Send(const Control& control) {
    last_sent = Clock::now();
    if (!detail::TrySendControl(socket, control)) {
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
      throw TransportError(peer + why);
    }
  }
  void SendHello() {
    last_sent = Clock::now();
    const auto hello = detail::EncodeControl(
        {MessageType::kHello, options.credits, options.verify_checksums ? 1u : 0u});
    bool sent = false;
    if (options.terms) {
      const EncodedSessionTerms terms = EncodeSessionTerms(*options.terms);
      sent = socket.send(zmq::buffer(hello), zmq::send_flags::sndmore | zmq::send_flags::dontwait)
                 .has_value() &&
             socket.send(zmq::buffer(terms), zmq::send_flags::dontwait).has_value();
    } else {
      sent = socket.send(zmq::buffer(hello), zmq::send_flags::dontwait).has_value();
    }
    if (!sent) throw TransportError(peer + " refused or dropped the connection");
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
  std::shared_ptr<Shared> shared;
  const std::string peer;  // "reader at <endpoint>", for messages

  // Set by the I/O thread before `welcomed` is published under the mutex.
  std::size_t batches_per_epoch = 0;
  std::optional<detail::SlotLayout> layout;

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::deque<Entry> queue;           // guarded by mutex
  std::size_t queued_batches = 0;    // guarded by mutex
  bool welcomed = false;             // guarded by mutex
  loader::LoaderState position;      // guarded by mutex; set at the welcome, then by Next()
  std::uint64_t instances = 1;       // guarded by mutex; the agreed slice count
  std::size_t credits_to_grant = 0;  // guarded by mutex; inline mode

  // I/O thread only.
  Clock::time_point last_sent;
  Clock::time_point last_heard;
  std::vector<bool> slot_busy;
  std::uint64_t outstanding = 0;  // inline: credits granted and not yet spent by a batch
  std::uint64_t granted = 0;      // inline: every credit granted so far, for the error line
  std::optional<std::uint64_t> last_epoch_end;
  std::optional<std::uint64_t> last_batch_epoch;
  std::uint64_t epoch_batches = 0;  // batches of last_batch_epoch received
  std::uint64_t dataset_size = 0;   // the echoed terms'; 0 = unknown
  std::int64_t message_limit = 0;   // ZMQ_MAXMSGSIZE: a larger message drops the connection
  std::vector<bool> seen;           // sample indices of the epoch under way
  Clock::time_point data_since;     // the last data, or when the reader got a credit back
  bool was_waiting = false;         // the reader held a credit at the last look

  std::jthread io;  // last: stopped first
};

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
      limit = std::max<std::int64_t>(kMinMessageLimit, static_cast<std::int64_t>(t.batch_size) *
                                                           t.image_size * t.image_size * 3);
    }
    s.socket.set(zmq::sockopt::maxmsgsize, limit);
    s.message_limit = limit;
    s.WatchConnection(context.impl().context);
    s.socket.connect(ZmqEndpoint(s.options.endpoint));
  } catch (const zmq::error_t& e) {
    throw TransportError("connect " + s.options.endpoint + ": " + e.what());
  }
  s.io = std::jthread([&s](std::stop_token token) { s.Loop(token); });
  std::unique_lock lock(s.mutex);
  s.changed.wait(lock, [&s] { return s.welcomed || !s.queue.empty(); });
  if (!s.welcomed) throw TransportError(s.queue.front().error);
}

ZmqBatchStream::~ZmqBatchStream() = default;

void ZmqBatchStream::Impl::WatchConnection(zmq::context_t& context) {
  // Unique per stream: a closed stream's inproc name stays taken until ZeroMQ reaps it.
  std::random_device random;
  const std::string address = "inproc://tilefeed-stream-monitor-" + std::to_string(random()) + "-" +
                              std::to_string(random());
  if (zmq_socket_monitor(socket.handle(), address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
    throw zmq::error_t();
  }
  monitor.emplace(context, zmq::socket_type::pair);
  monitor->set(zmq::sockopt::linger, 0);
  monitor->connect(address);
}

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
      std::fill(seen.begin(), seen.end(), false);
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

// The stream ends only as agreed: the bye (which stands for the last epoch's end) names
// the agreed end epoch and comes after a whole last epoch (a partial one only when the
// session began inside it).
void ZmqBatchStream::Impl::CheckEnd(const Control& bye) const {
  if (!options.terms) return;
  const SessionTerms& t = *options.terms;
  const std::uint64_t last = t.epochs - 1;
  const bool began_inside = last == t.first_epoch && t.first_position > 0;
  const std::optional<std::uint64_t> agreed = AgreedBatches(last);
  const bool complete =
      t.epochs > 0 && bye.a == t.epochs && last_batch_epoch && *last_batch_epoch == last &&
      (agreed ? epoch_batches == *agreed : began_inside || epoch_batches == batches_per_epoch);
  if (!complete) {
    throw TransportError(peer + " ended the stream early: " +
                         (last_batch_epoch ? std::to_string(epoch_batches) + " batches of epoch " +
                                                 std::to_string(*last_batch_epoch)
                                           : std::string("no batch")) +
                         ", end epoch " + std::to_string(bye.a) + "; agreed: all " +
                         std::to_string(batches_per_epoch) +
                         " batches of every epoch up to epoch " + std::to_string(last));
  }
}

void ZmqBatchStream::Impl::HandleWelcome(const Control& control,
                                         std::vector<zmq::message_t>& parts) {
  if (parts.size() < 2) throw TransportError(peer + ": welcome without session terms");
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
    dataset_size = echoed->dataset.samples;
    // One bit per sample for the once-per-epoch check; beyond 2^32 samples it is not kept.
    if (dataset_size <= (std::uint64_t{1} << 32)) seen.assign(dataset_size, false);
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

ReceivedBatch ZmqBatchStream::Impl::MakeBatch(const Control& control,
                                              std::vector<zmq::message_t>& parts) {
  if (parts.size() < 2) throw TransportError(peer + ": batch without a frame header");
  const FrameHeader header = ParseFrameHeader(detail::Bytes(parts[1]), peer);
  if (layout) {
    if (parts.size() != 2) throw TransportError(peer + ": shared-memory batch with payload");
    if (control.a >= layout->slot_count || slot_busy[control.a]) {
      throw TransportError(peer + ": batch in shared slot " + std::to_string(control.a) +
                           " that is not free");
    }
    if (header.image_bytes() > layout->image_bytes || header.size > layout->max_samples) {
      throw TransportError("frame from " + peer + ": batch larger than its shared slot");
    }
    CheckSegment();
    const auto slot = static_cast<std::uint32_t>(control.a);
    const std::byte* base = shared->segment.data() + slot * layout->stride();
    const std::span<const std::uint8_t> images(reinterpret_cast<const std::uint8_t*>(base),
                                               header.image_bytes());
    const std::span<const std::int32_t> labels(
        reinterpret_cast<const std::int32_t*>(base + layout->label_offset()), header.size);
    const std::span<const std::uint64_t> indices(
        reinterpret_cast<const std::uint64_t*>(base + layout->index_offset()), header.size);
    slot_busy[slot] = true;
    // From here on the owner returns the slot, also if a check below throws.
    auto owner = std::make_unique<SlotOwner>(shared, slot);
    owner->labels.assign(labels.begin(), labels.end());
    owner->indices.assign(indices.begin(), indices.end());
    if (options.verify_checksums) VerifyPayload(header, images, labels, indices, peer);
    CheckSegment();  // a read above may have met a vanished page (it read zeros)
    const std::span<const std::int32_t> own_labels = owner->labels;
    const std::span<const std::uint64_t> own_indices = owner->indices;
    CheckBatch(header, own_labels, own_indices);
    CheckOrder(header, own_indices);
    return ReceivedBatch(header.meta(), images, own_labels, own_indices, std::move(owner));
  }
  if (outstanding == 0) {
    throw TransportError(peer + " sent batch " + std::to_string(header.index) + " of epoch " +
                         std::to_string(header.epoch) + " without a credit (" +
                         std::to_string(granted) + " granted, all spent)");
  }
  --outstanding;
  if (parts.size() != 5)
    throw TransportError(peer + ": batch with " + std::to_string(parts.size()) + " parts");
  if (parts[2].size() != header.image_bytes() || parts[3].size() != header.label_bytes() ||
      parts[4].size() != header.index_bytes()) {
    throw TransportError("frame from " + peer + ": payload parts do not match the header");
  }
  // The owner holds the messages: the views below point into them, not into `parts`.
  auto owner = std::make_unique<MessageOwner>(std::move(parts));
  parts.clear();
  const std::span<const std::uint8_t> images(
      static_cast<const std::uint8_t*>(owner->part(2).data()), owner->part(2).size());
  const std::span<const std::int32_t> labels = owner->View<std::int32_t>(3, owner->labels_copy);
  const std::span<const std::uint64_t> indices = owner->View<std::uint64_t>(4, owner->indices_copy);
  if (options.verify_checksums) VerifyPayload(header, images, labels, indices, peer);
  CheckBatch(header, labels, indices);
  CheckOrder(header, indices);
  return ReceivedBatch(header.meta(), images, labels, indices, std::move(owner));
}

std::optional<std::uint64_t> ZmqBatchStream::Impl::AgreedBatches(std::uint64_t epoch) const {
  if (!options.terms || dataset_size == 0) return std::nullopt;
  const SessionTerms& t = *options.terms;
  if (t.batch_size == 0 || t.slice_count == 0) return std::nullopt;
  // As loader::EpochOrder and the Loader count them: the slice's share of what is left of
  // the epoch (all of it but in the epoch the session entered), padded or dropped, then
  // cut into batches.
  const std::uint64_t start = epoch == t.first_epoch ? std::min(t.first_position, dataset_size) : 0;
  const std::uint64_t remaining = dataset_size - start;
  const std::uint64_t count = t.slice_count;
  const std::uint64_t per_slice =
      t.remainder == 0 ? remaining / count + (remaining % count != 0) : remaining / count;
  return per_slice / t.batch_size + (!t.drop_last && per_slice % t.batch_size != 0);
}

void ZmqBatchStream::Impl::CheckOrder(const FrameHeader& header,
                                      std::span<const std::uint64_t> indices) {
  if (!options.terms) return;
  auto where = [&] {
    return peer + " sent batch " + std::to_string(header.index) + " of epoch " +
           std::to_string(header.epoch);
  };
  const std::uint64_t due = BatchesOf(header.epoch);
  if (header.index != due) {
    throw TransportError(where() + " where batch " + std::to_string(due) +
                         " was due (batches come in order, each once)");
  }
  if (const std::optional<std::uint64_t> agreed = AgreedBatches(header.epoch);
      agreed && header.index >= *agreed) {
    throw TransportError(where() + "; the epoch has " + std::to_string(*agreed) + " batches");
  }
  if (dataset_size == 0) return;
  std::uint64_t repeats = 0;
  for (const std::uint64_t index : indices) {
    if (index >= dataset_size) {
      throw TransportError(where() + " with sample index " + std::to_string(index) +
                           "; the dataset has " + std::to_string(dataset_size) + " samples");
    }
    if (seen.empty()) continue;
    if (seen[index]) ++repeats;
    seen[index] = true;
  }
  // A bad sample's substitute is a sample of the slice delivered again; nothing else is.
  if (repeats > header.substituted) {
    throw TransportError(where() + " with " + std::to_string(repeats) +
                         " sample(s) already delivered in this epoch (" +
                         std::to_string(header.substituted) + " substituted)");
  }
}

// What the frame checks cannot know: the agreed shape and the trainer's class count.
void ZmqBatchStream::Impl::CheckBatch(const FrameHeader& header,
                                      std::span<const std::int32_t> labels,
                                      std::span<const std::uint64_t> indices) const {
  auto where = [&] {
    return "batch " + std::to_string(header.index) + " of epoch " + std::to_string(header.epoch);
  };
  if (options.terms) {
    const SessionTerms& t = *options.terms;
    if (header.epoch != EpochUnderWay()) {
      throw TransportError(peer + " sent " + where() + " during epoch " +
                           std::to_string(EpochUnderWay()));
    }
    if (header.size > t.batch_size || header.height != t.image_size ||
        header.width != t.image_size || header.channels != 3) {
      throw TransportError(peer + " sent " + where() + " with " + std::to_string(header.size) +
                           " samples of " + std::to_string(header.height) + "x" +
                           std::to_string(header.width) + "x" + std::to_string(header.channels) +
                           "; the agreed batch is at most " + std::to_string(t.batch_size) +
                           " samples of " + std::to_string(t.image_size) + "x" +
                           std::to_string(t.image_size) + "x3");
    }
  }
  if (options.classes == 0) return;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || static_cast<std::uint32_t>(labels[i]) >= options.classes) {
      throw TransportError(peer + " sent sample " + std::to_string(indices[i]) + " (" + where() +
                           ") with label " + std::to_string(labels[i]) + "; this trainer has " +
                           std::to_string(options.classes) + " classes");
    }
  }
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

bool ZmqBatchStream::shared_memory() const { return impl_->layout.has_value(); }

std::size_t ZmqBatchStream::queued() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->queued_batches;
}

}  // namespace tilefeed::transport
