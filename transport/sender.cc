// Design note. Run() is one loop on the caller's thread that owns the ROUTER socket: it
// polls the socket and an eventfd, handles the trainer's messages, sends batches while it
// holds credits, and keeps the heartbeat. A producer thread pulls batches from the Loader
// (whose Next() blocks while decoding) into a small SpscRing and signals the eventfd, so the
// loop never blocks on decode and heartbeats keep flowing. Without credits the loop stops
// taking from the ring, the producer blocks on the full ring, the loader's slots stay held
// and its workers wait: back-pressure reaches the decoders.
//
// Zero-copy: a batch's image message is built with zmq_msg_init_data over the loader
// slot; the loader::Batch rides along as the free function's hint and is destroyed when
// ZeroMQ releases the message, on a ZeroMQ I/O thread. That only returns the slot
// (Loader::Release takes a mutex and is thread-safe). InFlight counts such messages so the
// sender's destructor can wait until none is left: a slot must not be released after the
// Loader is gone.
//
// Shared memory: the loader's slots are the shared segment (SharedSlots), so a batch is
// already where the trainer reads it. SendBatch sends the slot number and the frame header
// and keeps the loader::Batch in `held` until the trainer's credit for that slot comes back;
// dropping it then returns the slot to the loader, whose workers may write it again. Nothing
// is copied.

#include "transport/sender.h"

#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "loader/ring.h"
#include "transport/curve.h"
#include "transport/detail/event_fd.h"
#include "transport/detail/shm.h"
#include "transport/detail/socket_util.h"
#include "transport/detail/zmq_context.h"
#include "transport/frame.h"

namespace tilefeed::transport {
namespace {

using detail::Clock;
using detail::Control;
using detail::MessageType;

constexpr std::uint64_t kMaxCredits = 1024;
constexpr std::chrono::hours kLongWait(24);

// What the producer thread hands to the loop, in order.
struct Item {
  enum Kind { kBatch, kEpochEnd, kEnd, kError };
  Kind kind = kBatch;
  loader::Batch batch;
  std::uint64_t epoch = 0;
  std::string error;
};

// Zero-copy messages that ZeroMQ still holds.
class InFlight {
 public:
  void Add() {
    std::lock_guard lock(mutex_);
    ++count_;
  }
  void Done() noexcept {
    std::lock_guard lock(mutex_);
    --count_;
    // Notify under the lock: the waiter may destroy this object as soon as it sees zero.
    if (count_ == 0) zero_.notify_all();
  }
  void WaitForZero() {
    std::unique_lock lock(mutex_);
    zero_.wait(lock, [this] { return count_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable zero_;
  std::size_t count_ = 0;
};

struct ZeroCopyHint {
  loader::Batch batch;
  InFlight* in_flight;
  // Set (release) by the sending thread once it has read all it reads of the batch, read
  // (acquire) by ReleaseBatch before the slot goes back. ZeroMQ's hand-over of the message
  // already orders the two, but inside libzmq, where ThreadSanitizer cannot see: without
  // this edge it takes the loader refilling the slot for a race with the sender's reads.
  std::atomic<bool> handed_over{false};
};

// Runs on a ZeroMQ I/O thread: returns the slot to the loader and nothing else.
void ReleaseBatch(void* /*data*/, void* hint) noexcept {
  auto* zero_copy = static_cast<ZeroCopyHint*>(hint);
  (void)zero_copy->handed_over.load(std::memory_order_acquire);
  InFlight* in_flight = zero_copy->in_flight;
  delete zero_copy;
  in_flight->Done();
}

BatchMeta MetaOf(const loader::Batch& batch) {
  return BatchMeta{batch.epoch(), batch.index(),    batch.size(),  batch.height(),
                   batch.width(), batch.channels(), batch.layout()};
}

}  // namespace

struct BatchSender::Impl {
  Impl(Context& context, loader::Loader& loader, SenderOptions options)
      : loader(loader),
        options(std::move(options)),
        socket(context.impl().context, zmq::socket_type::router),
        ring(2) {}

  void Produce(std::stop_token token);
  bool LoaderEnded() const;
  void Send(const Control& control, bool more = false);
  void Welcome(std::uint64_t credits_wanted);
  void Ready(std::uint64_t credits);
  void Credit(std::uint64_t value);
  bool CanSend() const;
  void SendBatch(loader::Batch batch);
  void SendError(const std::string& text);
  void AnswerZap();
  [[noreturn]] void Fail(const std::string& reason) const {
    throw TransportError("trainer at " + peer_name + ": " + reason);
  }
  [[noreturn]] void SendFailed(const zmq::error_t& e) {
    // With router_mandatory, EHOSTUNREACH means the trainer's connection is gone; Run()
    // then looks for a bye that came before it went.
    if (e.num() == EHOSTUNREACH) peer_unreachable = true;
    Fail(std::string("send failed: ") + e.what());
  }

  loader::Loader& loader;
  const SenderOptions options;
  zmq::socket_t socket;
  std::optional<zmq::socket_t> zap;    // CURVE allow-list: the ZAP handler's socket
  std::set<std::string> allowed_keys;  // 32-byte binary public keys
  std::set<std::string> refused_keys;  // logged once each (ZeroMQ retries)
  std::string bound_endpoint;
  detail::EventFd wake;
  loader::SpscRing<Item> ring;
  std::jthread producer;
  InFlight in_flight;
  std::atomic<std::uint64_t> sent{0};
  bool ran = false;

  // The session with one trainer; touched only by Run's thread.
  std::string peer_id;
  std::string peer_name;
  bool peer_unreachable = false;  // a send failed because the trainer disconnected
  Clock::time_point last_sent;
  std::uint64_t credits = 0;                       // inline: batches we may send now
  std::uint64_t granted = 0;                       // inline: credits the trainer granted in all
  bool checksums = true;                           // the trainer verifies payloads
  SharedSlots* shared = nullptr;                   // shared memory: the loader's slots
  std::optional<detail::SlotLayout> layout;        // shared memory, once welcomed
  std::uint64_t shared_credits = 0;                // shared memory: batches the trainer may hold
  std::vector<std::optional<loader::Batch>> held;  // shared memory: by slot, at the trainer
  std::uint64_t held_count = 0;
};

BatchSender::BatchSender(Context& context, loader::Loader& loader, SenderOptions options)
    : impl_(std::make_unique<Impl>(context, loader, std::move(options))) {
  Impl& s = *impl_;
  if (s.options.peer_timeout <= std::chrono::milliseconds(0) ||
      s.options.heartbeat_interval <= std::chrono::milliseconds(0)) {
    throw std::invalid_argument("SenderOptions: heartbeat_interval and peer_timeout must be > 0");
  }
  if (s.options.shared_memory || IsShmEndpoint(s.options.endpoint)) {
    s.shared = dynamic_cast<SharedSlots*>(loader.options().slot_memory.get());
    if (s.shared == nullptr) {
      throw std::invalid_argument(
          "SenderOptions::shared_memory: the loader must decode into transport::SharedSlots "
          "(LoaderOptions::slot_memory = SharedSlots::Create(...))");
    }
  }
  if (!s.options.curve_secret_key_file.empty()) {
    const CurveKeyPair keys = ReadCurveKeyFile(s.options.curve_secret_key_file, true);
    s.socket.set(zmq::sockopt::curve_server, 1);
    s.socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  }
  if (!s.options.curve_allowed_keys.empty()) {
    if (s.options.curve_secret_key_file.empty()) {
      throw std::invalid_argument("SenderOptions: curve_allowed_keys needs curve_secret_key_file");
    }
    for (const std::string& key : s.options.curve_allowed_keys) {
      std::string binary(32, '\0');
      if (key.size() != 40 ||
          zmq_z85_decode(reinterpret_cast<std::uint8_t*>(binary.data()), key.c_str()) == nullptr) {
        throw std::invalid_argument("SenderOptions: allowed CURVE key '" + key +
                                    "' is not 40 Z85 characters");
      }
      s.allowed_keys.insert(std::move(binary));
    }
    // ZAP (RFC 27): libzmq asks this socket about every CURVE handshake of the context's
    // sockets that set a ZAP domain; Run() answers.
    try {
      s.zap.emplace(context.impl().context, zmq::socket_type::rep);
      s.zap->set(zmq::sockopt::linger, 0);
      s.zap->bind("inproc://zeromq.zap.01");
    } catch (const zmq::error_t& e) {
      throw TransportError(std::string("CURVE allow-list: cannot bind the ZAP handler (one "
                                       "allow-listing sender per Context): ") +
                           e.what());
    }
    s.socket.set(zmq::sockopt::zap_domain, "tilefeed");
  }
  try {
    s.socket.set(zmq::sockopt::linger, 0);
    // Sending to a trainer that is gone fails instead of silently dropping the batch.
    s.socket.set(zmq::sockopt::router_mandatory, 1);
    // The trainer only sends small control messages.
    s.socket.set(zmq::sockopt::maxmsgsize, std::int64_t{4096});
    s.socket.bind(ZmqEndpoint(s.options.endpoint));
    s.bound_endpoint = s.socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError("bind " + s.options.endpoint + ": " + e.what());
  }
}

BatchSender::~BatchSender() {
  Impl& s = *impl_;
  if (s.producer.joinable()) {
    s.producer.request_stop();
    s.loader.Stop();
    s.producer.join();
  }
  if (s.shared != nullptr) s.shared->Unlink();
  // Closing the socket makes ZeroMQ send or drop the queued messages; their free functions run
  // on its I/O thread, and we wait for the last one before the loader may go. The linger is
  // not 0: libzmq 4.3.4 aborts (session_base.cpp:260, clean_pipes) when a linger-0 close drops
  // the rest of a multipart batch that the engine had started to write just as the trainer
  // disconnects. With a linger the pipe keeps the rest; a trainer that is gone releases
  // everything at once, a stalled one within peer_timeout.
  try {
    s.socket.set(zmq::sockopt::linger, static_cast<int>(s.options.peer_timeout.count()));
  } catch (const zmq::error_t&) {
  }
  s.socket.close();
  s.in_flight.WaitForZero();
}

std::string BatchSender::endpoint() const { return impl_->bound_endpoint; }

std::uint64_t BatchSender::batches_sent() const {
  return impl_->sent.load(std::memory_order_relaxed);
}

bool BatchSender::Impl::LoaderEnded() const {
  const loader::LoaderOptions& o = loader.options();
  return o.epochs != 0 && loader.state().epoch >= o.first_epoch + o.epochs;
}

void BatchSender::Impl::Produce(std::stop_token token) {
  bool after_epoch_end = false;
  std::uint64_t epoch = loader.options().first_epoch;
  while (!token.stop_requested()) {
    Item item;
    try {
      std::optional<loader::Batch> batch = loader.Next();
      if (token.stop_requested()) return;
      if (batch) {
        epoch = batch->epoch();
        item.batch = std::move(*batch);
        after_epoch_end = false;
      } else if (LoaderEnded() || after_epoch_end) {
        // Two ends in a row: a stopped loader (an epoch always holds a batch).
        item.kind = Item::kEnd;
      } else {
        item.kind = Item::kEpochEnd;
        item.epoch = epoch;
        after_epoch_end = true;
      }
    } catch (const std::exception& e) {
      item.kind = Item::kError;
      item.error = e.what();
    }
    const Item::Kind kind = item.kind;
    while (!ring.PushFor(std::move(item), kLongWait, token)) {
      if (token.stop_requested()) return;
    }
    wake.Signal();
    if (kind == Item::kEnd || kind == Item::kError) return;
  }
}

void BatchSender::Impl::Send(const Control& control, bool more) {
  try {
    socket.send(zmq::buffer(peer_id), zmq::send_flags::sndmore);
    detail::SendControl(socket, control, more);
  } catch (const zmq::error_t& e) {
    SendFailed(e);
  }
  last_sent = Clock::now();
}

void BatchSender::Impl::Welcome(std::uint64_t credits_wanted) {
  Control welcome{MessageType::kWelcome, loader.batches_per_epoch()};
  if (shared == nullptr) {
    Send(welcome);
    return;
  }
  layout = detail::SlotLayout{shared->slot_count(), shared->image_bytes(), shared->max_samples()};
  shared_credits = std::clamp<std::uint64_t>(credits_wanted, 1, layout->slot_count);
  welcome.b = layout->slot_count;
  welcome.c = layout->image_bytes;
  welcome.d = layout->max_samples;
  Send(welcome, /*more=*/true);
  try {
    socket.send(zmq::buffer(shared->name()), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    SendFailed(e);
  }
}

void BatchSender::Impl::Ready(std::uint64_t wanted) {
  if (layout) {
    // Both sides have the segment mapped now: the name is no longer needed.
    shared->Unlink();
    held.clear();
    held.resize(layout->slot_count);
    held_count = 0;
    return;
  }
  if (wanted == 0 || wanted > kMaxCredits) Fail("bad credit count " + std::to_string(wanted));
  credits = granted = wanted;
}

void BatchSender::Impl::Credit(std::uint64_t value) {
  if (layout) {
    if (value >= layout->slot_count || !held[value]) {
      Fail("returned shared slot " + std::to_string(value) + " that it does not hold");
    }
    held[value].reset();  // back to the loader, whose workers may now write the slot again
    --held_count;
    return;
  }
  if (value == 0 || value > granted - credits) {
    Fail("returned " + std::to_string(value) + " credits, holds " +
         std::to_string(granted - credits));
  }
  credits += value;
}

bool BatchSender::Impl::CanSend() const {
  return layout ? held_count < shared_credits : credits > 0;
}

void BatchSender::Impl::SendBatch(loader::Batch batch) {
  const BatchMeta meta = MetaOf(batch);
  if (layout) {
    // The loader decoded the batch into its slot, which is the shared slot of that number.
    const std::size_t slot = batch.slot();
    assert(slot < held.size() && !held[slot]);
    assert(reinterpret_cast<const std::byte*>(batch.images().data()) == shared->slot_data(slot));
    const FrameHeader header =
        MakeFrameHeader(meta, batch.images(), batch.labels(), batch.sample_indices(), checksums);
    const EncodedFrameHeader encoded = EncodeFrameHeader(header);
    Send(Control{MessageType::kBatch, slot}, /*more=*/true);
    try {
      socket.send(zmq::buffer(encoded), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      SendFailed(e);
    }
    held[slot] = std::move(batch);
    ++held_count;
  } else {
    const FrameHeader header =
        MakeFrameHeader(meta, batch.images(), batch.labels(), batch.sample_indices(), checksums);
    const EncodedFrameHeader encoded = EncodeFrameHeader(header);
    // Labels and indices are small: copies. The images are not.
    zmq::message_t labels(batch.labels().data(), batch.labels().size_bytes());
    zmq::message_t indices(batch.sample_indices().data(), batch.sample_indices().size_bytes());
    void* data = batch.images().data();
    const std::size_t size = batch.images().size();
    auto* hint = new ZeroCopyHint{std::move(batch), &in_flight};
    hint->handed_over.store(true, std::memory_order_release);  // the batch is not read below
    in_flight.Add();
    std::optional<zmq::message_t> images;
    try {
      images.emplace(data, size, &ReleaseBatch, hint);
    } catch (...) {
      ReleaseBatch(nullptr, hint);
      throw;
    }
    Send(Control{MessageType::kBatch}, /*more=*/true);
    try {
      socket.send(zmq::buffer(encoded), zmq::send_flags::sndmore);
      socket.send(*images, zmq::send_flags::sndmore);
      socket.send(labels, zmq::send_flags::sndmore);
      socket.send(indices, zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      SendFailed(e);
    }
    --credits;
  }
  sent.fetch_add(1, std::memory_order_relaxed);
}

// Answers one ZAP request: 200 for an allowed CURVE key, 400 (and a line) for any other.
void BatchSender::Impl::AnswerZap() {
  std::vector<zmq::message_t> request;
  while (true) {
    zmq::message_t part;
    if (!zap->recv(part, zmq::recv_flags::dontwait)) return;
    const bool more = part.more();
    request.push_back(std::move(part));
    if (!more) break;
  }
  // version, request id, domain, address, identity, mechanism, credentials...
  auto text = [&](std::size_t i) { return i < request.size() ? request[i].to_string() : ""; };
  const std::string mechanism = text(5);
  const std::string key = text(6);
  const bool allowed = request.size() >= 7 && text(0) == "1.0" && mechanism == "CURVE" &&
                       allowed_keys.count(key) != 0;
  if (!allowed && options.on_refused && refused_keys.insert(key).second) {
    std::string z85(41, '\0');
    if (key.size() == 32) {
      zmq_z85_encode(z85.data(), reinterpret_cast<const std::uint8_t*>(key.data()), 32);
      z85.resize(40);
    } else {
      z85 = "(none)";
    }
    std::string line = "refused a trainer at ";
    line.append(text(3).empty() ? "?" : text(3))
        .append(": its CURVE public key ")
        .append(z85)
        .append(" is not on the allow-list");
    options.on_refused(line);
  }
  const char* reply[] = {
      "1.0", nullptr, allowed ? "200" : "400", allowed ? "OK" : "key not allowed", "", ""};
  try {
    for (std::size_t i = 0; i < 6; ++i) {
      const zmq::send_flags flags = i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (i == 1) {
        zap->send(zmq::buffer(text(1)), flags);
      } else {
        zap->send(zmq::buffer(std::string_view(reply[i])), flags);
      }
    }
  } catch (const zmq::error_t&) {
  }
}

void BatchSender::Impl::SendError(const std::string& text) {
  try {
    Send(Control{MessageType::kError}, /*more=*/true);
    socket.send(zmq::buffer(text), zmq::send_flags::none);
  } catch (const TransportError&) {
    // The trainer is gone too; the loader's error is what Run reports.
  } catch (const zmq::error_t&) {
  }
}

SendResult BatchSender::Run(std::stop_token stop) {
  Impl& s = *impl_;
  assert(!s.ran && "BatchSender::Run is called once");
  s.ran = true;
  // On every way out the loader is stopped, which unblocks a producer inside Next().
  struct StopProducer {
    Impl& s;
    ~StopProducer() {
      s.producer.request_stop();
      s.loader.Stop();
      s.producer.join();
    }
  } stop_producer{s};
  s.producer = std::jthread([&s](std::stop_token token) { s.Produce(token); });
  std::stop_callback wake_on_stop(stop, [&s] { s.wake.Signal(); });

  enum class State { kWaiting, kWelcomed, kStreaming, kFinishing } state = State::kWaiting;
  Clock::time_point last_heard = Clock::now();
  std::optional<Item> pending;
  std::vector<zmq::message_t> parts;
  bool too_many = false;
  try {
    while (true) {
      if (stop.stop_requested()) {
        if (state != State::kWaiting) {
          try {
            s.Send(Control{MessageType::kBye});
          } catch (const TransportError&) {
          }
        }
        return SendResult::kStopped;
      }
      std::chrono::milliseconds timeout = std::chrono::hours(1);
      if (state != State::kWaiting) {
        timeout = std::min(detail::Until(s.last_sent + s.options.heartbeat_interval),
                           detail::Until(last_heard + s.options.peer_timeout));
      }
      zmq::pollitem_t items[] = {{s.socket.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, s.wake.fd(), ZMQ_POLLIN, 0},
                                 {s.zap ? s.zap->handle() : nullptr, -1, ZMQ_POLLIN, 0}};
      zmq::poll(items, s.zap ? 3 : 2, timeout);
      if (items[1].revents != 0) s.wake.Drain();
      if (s.zap && items[2].revents != 0) s.AnswerZap();

      while (detail::ReceiveParts(s.socket, parts, too_many)) {
        if (parts.size() < 2) continue;
        const std::string id = parts[0].to_string();
        const std::optional<Control> control = detail::ParseControl(detail::Bytes(parts[1]));
        if (state == State::kWaiting) {
          if (!control || control->type != MessageType::kHello) continue;
          s.peer_id = id;
          const char* address = nullptr;
          try {
            address = parts[1].gets("Peer-Address");
          } catch (const zmq::error_t&) {
          }
          s.peer_name = address != nullptr && *address != '\0' ? address : s.bound_endpoint;
          last_heard = Clock::now();
          s.checksums = control->b != 0;
          s.Welcome(control->a);
          state = State::kWelcomed;
          continue;
        }
        if (id != s.peer_id) {
          // Another trainer: this sender serves one. Tell it, so it does not wait.
          if (control && control->type == MessageType::kHello) {
            const std::string text = "reader at " + s.bound_endpoint + " already serves a trainer";
            try {
              s.socket.send(zmq::buffer(id), zmq::send_flags::sndmore);
              detail::SendControl(s.socket, Control{MessageType::kError}, true);
              s.socket.send(zmq::buffer(text), zmq::send_flags::none);
            } catch (const zmq::error_t&) {
            }
          }
          continue;
        }
        if (!control || too_many) s.Fail("malformed message");
        last_heard = Clock::now();
        switch (control->type) {
          case MessageType::kReady:
            if (state != State::kWelcomed) s.Fail("unexpected ready");
            s.Ready(control->a);
            state = State::kStreaming;
            break;
          case MessageType::kCredit:
            if (state == State::kWelcomed) s.Fail("credit before ready");
            s.Credit(control->a);
            break;
          case MessageType::kHeartbeat:
            break;
          case MessageType::kBye:
            return state == State::kFinishing ? SendResult::kCompleted : SendResult::kPeerLeft;
          default:
            s.Fail("unexpected message type " + std::to_string(static_cast<int>(control->type)));
        }
      }

      while (state == State::kStreaming) {
        if (!pending) pending = s.ring.TryPop();
        if (!pending) break;
        if (pending->kind == Item::kBatch) {
          if (!s.CanSend()) break;
          s.SendBatch(std::move(pending->batch));
        } else if (pending->kind == Item::kEpochEnd) {
          s.Send(Control{MessageType::kEpochEnd, pending->epoch});
        } else if (pending->kind == Item::kEnd) {
          // Wait for the trainer's bye: it comes after every batch has arrived.
          s.Send(Control{MessageType::kBye});
          state = State::kFinishing;
        } else {
          s.SendError(pending->error);
          throw loader::LoaderError(pending->error);
        }
        pending.reset();
      }

      if (state != State::kWaiting) {
        const Clock::duration silence = Clock::now() - last_heard;
        if (silence > s.options.peer_timeout) {
          throw TransportError("trainer at " + s.peer_name + " silent for " +
                               detail::Seconds(silence) + " s");
        }
        if (Clock::now() - s.last_sent >= s.options.heartbeat_interval) {
          s.Send(Control{MessageType::kHeartbeat});
        }
      }
    }
  } catch (const TransportError&) {
    if (!s.peer_unreachable) throw;
    // A trainer says bye and closes its socket; it can be gone before we have read the bye,
    // which is then still queued here. Leaving after a bye is no error.
    while (detail::ReceiveParts(s.socket, parts, too_many)) {
      if (parts.size() < 2 || parts[0].to_string() != s.peer_id) continue;
      const std::optional<Control> control = detail::ParseControl(detail::Bytes(parts[1]));
      if (control && control->type == MessageType::kBye) {
        return state == State::kFinishing ? SendResult::kCompleted : SendResult::kPeerLeft;
      }
    }
    throw;
  }
}

struct SharedSlots::Impl {
  detail::SlotLayout layout;
  detail::ShmSegment segment;
};

SharedSlots::SharedSlots(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SharedSlots::~SharedSlots() { impl_->segment.Unlink(); }
const std::string& SharedSlots::name() const { return impl_->segment.name(); }
std::size_t SharedSlots::slot_count() const { return impl_->layout.slot_count; }
std::size_t SharedSlots::image_bytes() const { return impl_->layout.image_bytes; }
std::size_t SharedSlots::max_samples() const { return impl_->layout.max_samples; }
std::byte* SharedSlots::slot_data(std::size_t slot) const {
  return impl_->segment.data() + slot * impl_->layout.stride();
}
void SharedSlots::Unlink() noexcept { impl_->segment.Unlink(); }

std::shared_ptr<SharedSlots> SharedSlots::Create(const loader::LoaderOptions& options,
                                                 std::string_view job_id) {
  const std::uint64_t image_bytes =
      std::uint64_t{options.batch_size} * options.image_size * options.image_size * 3;
  const std::optional<detail::SlotLayout> layout =
      detail::SlotLayout::Checked(options.prefetch_depth, image_bytes, options.batch_size);
  if (!layout) {
    throw TransportError("shared memory: " + std::to_string(options.prefetch_depth) + " slots of " +
                         std::to_string(image_bytes) +
                         " image bytes are out of bounds for a shared-memory ring");
  }
  // Names left by killed processes of this user are removed here, before adding ours.
  detail::RemoveStaleSegments();
  detail::ShmSegment segment =
      detail::ShmSegment::Create(detail::MakeSegmentName(job_id), layout->total_bytes());
  return std::make_shared<SharedSlots>(std::make_unique<Impl>(Impl{*layout, std::move(segment)}));
}

loader::SlotMemory::Spans SharedSlots::Slot(std::size_t slot, std::size_t slots,
                                            std::size_t samples, std::size_t image_bytes) {
  const detail::SlotLayout& layout = impl_->layout;
  if (slots != layout.slot_count || slot >= slots || samples > layout.max_samples ||
      image_bytes * samples > layout.image_bytes) {
    throw std::invalid_argument(
        "SharedSlots: made for other loader options (prefetch_depth, batch_size, image_size)");
  }
  std::byte* base = slot_data(slot);
  return Spans{
      {reinterpret_cast<std::uint8_t*>(base), layout.image_bytes},
      {reinterpret_cast<std::int32_t*>(base + layout.label_offset()), layout.max_samples},
      {reinterpret_cast<std::uint64_t*>(base + layout.index_offset()), layout.max_samples}};
}

}  // namespace tilefeed::transport
