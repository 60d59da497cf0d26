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
// endpoint's destructor can wait until none is left: a slot must not be released after the
// Loader is gone.
//
// Shared memory: the loader's slots are the shared segment (SharedSlots), so a batch is
// already where the trainer reads it. SendBatch sends the slot number and the frame header
// and keeps the loader::Batch in `held` until the trainer's credit for that slot comes back;
// dropping it then returns the slot to the loader, whose workers may write it again. Nothing
// is copied.
//
// The trainer's arrival (hello, refusals, ZAP) is in reader_handshake.cc, SharedSlots in
// shared_slots.cc; the types they share with this file in transport/reader_endpoint_impl.h.

#include "transport/reader_endpoint.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "loader/ring.h"
#include "transport/connection_guard.h"
#include "transport/curve.h"
#include "transport/event_fd.h"
#include "transport/frame.h"
#include "transport/reader_endpoint_impl.h"
#include "transport/shm.h"
#include "transport/socket_util.h"
#include "transport/zmq_context.h"

namespace tilefeed::transport {
namespace {

using detail::Clock;
using detail::Control;
using detail::MessageType;

using detail::InFlight;
using detail::Item;
using detail::kMaxCredits;

constexpr std::chrono::hours kLongWait(24);

struct ZeroCopyHint {
  loader::Batch batch;
  InFlight* in_flight;
  // Set (release) by the sending thread once it has read all it reads of the batch, read
  // (acquire) by ReleaseBatch before the slot goes back. ZeroMQ's hand-over of the message
  // already orders the two, but inside libzmq, where ThreadSanitizer cannot see: without
  // this edge it takes the loader refilling the slot for a race with the reader's reads.
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

// True if a live process accepts connections on the Unix socket at `path`: binding there
// would silently take its socket (ZeroMQ unlinks the file first).
bool SocketServed(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path[0] == '@' || path.size() >= sizeof(address.sun_path)) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const bool served =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return served;
}

}  // namespace

ReaderEndpoint::ReaderEndpoint(Context& context, loader::Loader& loader,
                               ReaderEndpointOptions options)
    : impl_(std::make_unique<Impl>(context, std::move(options))) {
  Impl& s = *impl_;
  if (s.options.keep_serving) {
    throw std::invalid_argument("ReaderEndpointOptions::keep_serving needs a SessionOpener");
  }
  if (IsShmEndpoint(s.options.endpoint) &&
      dynamic_cast<SharedSlots*>(loader.options().slot_memory.get()) == nullptr) {
    throw std::invalid_argument(
        "ReaderEndpointOptions: an shm:// endpoint: the loader must decode into "
        "transport::SharedSlots "
        "(LoaderOptions::slot_memory = SharedSlots::Create(...))");
  }
  s.borrowed = &loader;
  s.Setup(context);
}

ReaderEndpoint::ReaderEndpoint(Context& context, ReaderEndpointOptions options, SessionTerms terms,
                               SessionOpener open)
    : impl_(std::make_unique<Impl>(context, std::move(options))) {
  Impl& s = *impl_;
  if (!open) throw std::invalid_argument("ReaderEndpoint: no SessionOpener");
  s.terms = std::move(terms);
  s.open = std::move(open);
  s.Setup(context);
}

void ReaderEndpoint::Impl::Setup(Context& context) {
  if (options.peer_timeout <= std::chrono::milliseconds(0) ||
      options.heartbeat_interval <= std::chrono::milliseconds(0)) {
    throw std::invalid_argument(
        "ReaderEndpointOptions: heartbeat_interval and peer_timeout must be > 0");
  }
  if (!options.curve_secret_key_file.empty()) {
    const CurveKeyPair keys = ReadCurveKeyFile(options.curve_secret_key_file, true);
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  }
  if (!options.curve_allowed_keys.empty()) {
    if (options.curve_secret_key_file.empty()) {
      throw std::invalid_argument(
          "ReaderEndpointOptions: curve_allowed_keys needs curve_secret_key_file");
    }
    for (const std::string& key : options.curve_allowed_keys) {
      std::string binary(32, '\0');
      if (key.size() != 40 ||
          zmq_z85_decode(reinterpret_cast<std::uint8_t*>(binary.data()), key.c_str()) == nullptr) {
        throw std::invalid_argument("ReaderEndpointOptions: allowed CURVE key '" + key +
                                    "' is not 40 Z85 characters");
      }
      allowed_keys.insert(std::move(binary));
    }
    // ZAP (RFC 27): libzmq asks this socket about every CURVE handshake of the context's
    // sockets that set a ZAP domain; Run() answers.
    try {
      zap.emplace(context.impl().context, zmq::socket_type::rep);
      zap->set(zmq::sockopt::linger, 0);
      zap->bind("inproc://zeromq.zap.01");
    } catch (const zmq::error_t& e) {
      throw TransportError(std::string("CURVE allow-list: cannot bind the ZAP handler (one "
                                       "allow-listing endpoint per Context): ") +
                           e.what());
    }
    socket.set(zmq::sockopt::zap_domain, "tilefeed");
  }
  guard.emplace(context.impl().context, socket, detail::ConnectionCap(options.max_connections),
                options.log);
  const std::string zmq_endpoint = ZmqEndpoint(options.endpoint);
  if (zmq_endpoint.rfind("ipc://", 0) == 0) {
    socket_path = zmq_endpoint.substr(6);
    if (SocketServed(socket_path)) {
      throw TransportError("bind " + options.endpoint + ": another reader serves it (" +
                           socket_path + " accepts connections)");
    }
  }
  try {
    socket.set(zmq::sockopt::linger, 0);
    // Sending to a trainer that is gone fails instead of silently dropping the batch.
    socket.set(zmq::sockopt::router_mandatory, 1);
    // The trainer only sends small control messages (a hello with its terms is the largest).
    socket.set(zmq::sockopt::maxmsgsize, std::int64_t{4096});
    socket.set(zmq::sockopt::ipv6, zmq_endpoint.rfind("tcp://[", 0) == 0);
    socket.bind(zmq_endpoint);
    bound_endpoint = socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError("bind " + options.endpoint + ": " + e.what());
  }
  // What ZeroMQ bound, not what the text seemed to say, decides.
  if (options.loopback_only && !IsLoopbackEndpoint(bound_endpoint)) {
    guard->StopWatching();
    socket.close();
    throw TransportError("bind " + options.endpoint + ": ZeroMQ bound " + bound_endpoint +
                         ", which is not loopback");
  }
  struct stat st {};
  if (!socket_path.empty() && stat(socket_path.c_str(), &st) == 0) socket_inode = st.st_ino;
}

ReaderEndpoint::~ReaderEndpoint() {
  Impl& s = *impl_;
  s.EndSession();
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
  s.guard->StopWatching();  // before the socket closes and lingers
  s.socket.close();
  s.ReapRetired(/*wait=*/true);
  // The socket file goes with us, if it is still ours.
  struct stat st {};
  if (!s.socket_path.empty() && stat(s.socket_path.c_str(), &st) == 0 &&
      st.st_ino == s.socket_inode) {
    unlink(s.socket_path.c_str());
  }
}

std::string ReaderEndpoint::endpoint() const { return impl_->bound_endpoint; }

std::uint64_t ReaderEndpoint::batches_sent() const {
  return impl_->sent.load(std::memory_order_relaxed);
}

void ReaderEndpoint::Impl::EndSession() {
  if (session) {
    if (options.on_loader) options.on_loader(nullptr);
    producer.request_stop();
    session->loader->Stop();  // unblocks a producer inside Next()
    if (producer.joinable()) producer.join();
    pending.reset();
    while (ring.TryPop()) {
    }
    held.clear();
    held_count = 0;
    if (shared != nullptr) shared->Unlink();
    retired.push_back(std::move(session));
    ReapRetired(/*wait=*/false);
  }
  shared = nullptr;
  layout.reset();
  state = State::kWaiting;
  peer_id.clear();
  peer_unreachable = false;
  credits = granted = 0;
}

void ReaderEndpoint::Impl::ReapRetired(bool wait) {
  std::erase_if(retired, [wait](const std::unique_ptr<detail::Session>& old) {
    if (wait) old->in_flight.WaitForZero();
    return old->in_flight.Idle();
  });
}

bool ReaderEndpoint::Impl::LoaderEnded() const {
  const loader::Loader& loader = *session->loader;
  const loader::LoaderOptions& o = loader.options();
  return o.epochs != 0 && loader.state().epoch >= loader.first_epoch() + o.epochs;
}

void ReaderEndpoint::Impl::Produce(std::stop_token token) {
  loader::Loader& loader = *session->loader;
  bool after_epoch_end = false;
  std::uint64_t epoch = loader.first_epoch();
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
        // Two ends in a row: a stopped loader (an epoch always holds a batch). The end
        // stands for the last epoch's end too; the bye names the epoch after it.
        item.kind = Item::kEnd;
        item.epoch = epoch + 1;
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
    // PushFor moves from `item` only when it succeeds, so a retry pushes it whole.
    while (!ring.PushFor(std::move(item), kLongWait, token)) {  // NOLINT(bugprone-use-after-move)
      if (token.stop_requested()) return;
    }
    wake.Signal();
    if (kind == Item::kEnd || kind == Item::kError) return;
  }
}

void ReaderEndpoint::Impl::Send(const Control& control, bool more) {
  try {
    socket.send(zmq::buffer(peer_id), zmq::send_flags::sndmore);
    detail::SendControl(socket, control, more);
  } catch (const zmq::error_t& e) {
    SendFailed(e);
  }
  last_sent = Clock::now();
}

void ReaderEndpoint::Impl::SendPart(std::span<const std::byte> bytes, bool more) {
  try {
    socket.send(zmq::const_buffer(bytes.data(), bytes.size()),
                more ? zmq::send_flags::sndmore : zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    SendFailed(e);
  }
}

// The welcome echoes the agreed terms (an empty part when this reader states none).
void ReaderEndpoint::Impl::Welcome(std::uint64_t credits_wanted,
                                   const std::optional<SessionTerms>& agreed) {
  Control welcome{MessageType::kWelcome, session->loader->batches_per_epoch()};
  if (shared != nullptr) {
    layout = detail::SlotLayout{shared->slot_count(), shared->image_bytes(), shared->max_samples()};
    shared_credits = std::clamp<std::uint64_t>(credits_wanted, 1, layout->slot_count);
    welcome.b = layout->slot_count;
    welcome.c = layout->image_bytes;
    welcome.d = layout->max_samples;
  }
  Send(welcome, /*more=*/true);
  EncodedSessionTerms encoded;
  std::span<const std::byte> terms_part;
  if (agreed) {
    encoded = EncodeSessionTerms(*agreed);
    terms_part = encoded;
  }
  SendPart(terms_part, /*more=*/shared != nullptr);
  if (shared != nullptr) SendPart(std::as_bytes(std::span(shared->name())), false);
}

void ReaderEndpoint::Impl::Ready(std::uint64_t wanted) {
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

void ReaderEndpoint::Impl::Credit(std::uint64_t value) {
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

bool ReaderEndpoint::Impl::CanSend() const {
  return layout ? held_count < shared_credits : credits > 0;
}

void ReaderEndpoint::Impl::SendBatch(loader::Batch batch) {
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
    auto* hint = new ZeroCopyHint{std::move(batch), &session->in_flight};
    hint->handed_over.store(true, std::memory_order_release);  // the batch is not read below
    session->in_flight.Add();
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

std::optional<SendResult> ReaderEndpoint::Impl::Handle(std::vector<zmq::message_t>& parts,
                                                       bool too_many) {
  if (parts.size() < 2) return std::nullopt;
  const std::string id = parts[0].to_string();
  const std::optional<Control> control = detail::ParseControl(detail::Bytes(parts[1]));
  if (state == State::kWaiting || id != peer_id) {
    if (const std::string other = socket_path.empty() ? "" : detail::OtherUser(parts[1]);
        !other.empty()) {
      Refuse(id, parts[1], other);
    } else if (!control) {
      Refuse(id, parts[1],
             "a malformed first message: " + detail::WhyNotControl(detail::Bytes(parts[1])));
    } else if (too_many) {
      Refuse(id, parts[1],
             "a message of more than " + std::to_string(detail::kMaxParts) + " parts");
    } else if (control->type == MessageType::kHello) {
      // A trainer that missed two heartbeats is taken for dead (a killed trainer restarting
      // from its checkpoint comes back before the timeout); a live one keeps its session.
      const Clock::duration silence = Clock::now() - last_heard;
      std::optional<SessionTerms> agreed;
      if (state != State::kWaiting && silence > 2 * options.heartbeat_interval &&
          HelloRefusal(parts, *control, agreed).empty()) {
        Log("trainer at " + peer_name + " silent for " + detail::Seconds(silence) +
            " s; an agreeing trainer says hello and takes over");
        SendError("silent for " + detail::Seconds(silence) + " s; another trainer took over");
        EndSession();
      }
      if (state == State::kWaiting) {
        Hello(id, parts, *control);
      } else {
        Refuse(id, parts[1], "this reader already serves a trainer at " + peer_name);
      }
    } else if (control->type != MessageType::kBye) {  // a former trainer's bye needs nothing
      Refuse(id, parts[1],
             "no session: a trainer says hello first (this reader restarted, or served "
             "another trainer)");
    }
    return std::nullopt;
  }
  if (!control || too_many) Fail("malformed message");
  last_heard = Clock::now();
  switch (control->type) {
    case MessageType::kReady:
      if (state != State::kWelcomed) Fail("unexpected ready");
      Ready(control->a);
      state = State::kStreaming;
      break;
    case MessageType::kCredit:
      if (state == State::kWelcomed) Fail("credit before ready");
      Credit(control->a);
      break;
    case MessageType::kHeartbeat:
      break;
    case MessageType::kBye:
      if (state == State::kFinishing) return SendResult::kCompleted;
      return PeerLeft();
    default:
      Fail("unexpected message type " + std::to_string(static_cast<int>(control->type)));
  }
  return std::nullopt;
}

std::optional<SendResult> ReaderEndpoint::Impl::PeerLeft() {
  if (!options.keep_serving) return SendResult::kPeerLeft;
  Log("trainer at " + peer_name + " left before the end; waiting for the next trainer");
  EndSession();
  return std::nullopt;
}

// Called while a TransportError is being handled: rethrows it, or ends the session.
std::optional<SendResult> ReaderEndpoint::Impl::AfterFailure(std::vector<zmq::message_t>& parts,
                                                             bool& too_many) {
  if (peer_unreachable) {
    // A trainer says bye and closes its socket; it can be gone before we have read the bye,
    // which is then still queued here. Leaving after a bye is no error.
    while (detail::ReceiveParts(socket, parts, too_many)) {
      if (parts.size() < 2 || parts[0].to_string() != peer_id) continue;
      const std::optional<Control> control = detail::ParseControl(detail::Bytes(parts[1]));
      if (control && control->type == MessageType::kBye) {
        if (state == State::kFinishing) return SendResult::kCompleted;
        return PeerLeft();
      }
    }
  }
  if (!options.keep_serving || state == State::kWaiting) throw;
  try {
    throw;
  } catch (const TransportError& e) {
    Log(std::string(e.what()) + "; waiting for the next trainer");
    SendError(e.what());
  }
  EndSession();
  return std::nullopt;
}

void ReaderEndpoint::Impl::Stream() {
  while (state == State::kStreaming) {
    if (!pending) pending = ring.TryPop();
    if (!pending) return;
    if (pending->kind == Item::kBatch) {
      if (!CanSend()) return;
      SendBatch(std::move(pending->batch));
    } else if (pending->kind == Item::kEpochEnd) {
      Send(Control{MessageType::kEpochEnd, pending->epoch});
      end_epoch = pending->epoch + 1;
    } else if (pending->kind == Item::kEnd) {
      // The bye names the end epoch; the trainer's bye comes after every batch has arrived.
      Send(Control{MessageType::kBye, pending->epoch});
      state = State::kFinishing;
    } else {
      SendError(pending->error);
      throw loader::LoaderError(pending->error);
    }
    pending.reset();
  }
}

void ReaderEndpoint::Impl::KeepAlive() {
  if (state == State::kWaiting) return;
  const Clock::duration silence = Clock::now() - last_heard;
  if (silence > options.peer_timeout) {
    throw TransportError("trainer at " + peer_name + " silent for " + detail::Seconds(silence) +
                         " s");
  }
  if (Clock::now() - last_sent >= options.heartbeat_interval) {
    Send(Control{MessageType::kHeartbeat});
  }
}

SendResult ReaderEndpoint::Run(std::stop_token stop) {
  Impl& s = *impl_;
  assert(!s.ran && "ReaderEndpoint::Run is called once");
  s.ran = true;
  // On every way out the session ends, which stops its loader and producer.
  struct EndOnExit {
    Impl& s;
    ~EndOnExit() { s.EndSession(); }
  } end_on_exit{s};
  std::stop_callback wake_on_stop(stop, [&s] { s.wake.Signal(); });
  std::vector<zmq::message_t> parts;
  bool too_many = false;
  while (true) {
    if (stop.stop_requested()) {
      // Not a bye: a trainer must not take a stopped reader for a finished one.
      if (s.state != Impl::State::kWaiting) {
        s.SendError("stopped before the end of the stream (SIGINT/SIGTERM or a stop request)");
      }
      return SendResult::kStopped;
    }
    std::chrono::milliseconds timeout =
        s.retired.empty() ? std::chrono::hours(1) : std::chrono::milliseconds(100);
    if (s.state != Impl::State::kWaiting) {
      timeout = std::min({timeout, detail::Until(s.last_sent + s.options.heartbeat_interval),
                          detail::Until(s.last_heard + s.options.peer_timeout)});
    }
    zmq::pollitem_t items[] = {{s.socket.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, s.wake.fd(), ZMQ_POLLIN, 0},
                               {s.guard->monitor().handle(), 0, ZMQ_POLLIN, 0},
                               {s.zap ? s.zap->handle() : nullptr, -1, ZMQ_POLLIN, 0}};
    zmq::poll(items, s.zap ? 4 : 3, timeout);
    if (items[1].revents != 0) s.wake.Drain();
    if (items[2].revents != 0) s.guard->Drain();
    if (s.zap && items[3].revents != 0) s.AnswerZap();
    try {
      while (detail::ReceiveParts(s.socket, parts, too_many)) {
        if (const std::optional<SendResult> result = s.Handle(parts, too_many)) return *result;
      }
      s.Stream();
      s.KeepAlive();
    } catch (const TransportError&) {
      if (const std::optional<SendResult> result = s.AfterFailure(parts, too_many)) return *result;
    }
    s.ReapRetired(/*wait=*/false);
  }
}

}  // namespace tilefeed::transport
