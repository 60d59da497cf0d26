// Internals of transport/reader_endpoint.cc's ReaderEndpoint, shared by the files that
// implement it: reader_endpoint.cc (setup, the loop, streaming batches) and
// reader_handshake.cc (the trainer's hello, refusals, the CURVE allow-list). The design
// note is at the top of reader_endpoint.cc. Not installed.

#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loader/ring.h"
#include "transport/connection_guard.h"
#include "transport/event_fd.h"
#include "transport/reader_endpoint.h"
#include "transport/shm.h"
#include "transport/socket_util.h"
#include "transport/wire.h"
#include "transport/zmq_context.h"

namespace tilefeed::transport {
namespace detail {

inline constexpr std::uint64_t kMaxCredits = 1024;

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
  bool Idle() {
    std::lock_guard lock(mutex_);
    return count_ == 0;
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

// One trainer's session: the loader that serves it (owned, or the borrowed one) and the
// zero-copy messages ZeroMQ still holds of its slots. A session that ends with messages
// still queued is retired until ZeroMQ has released them; only then may its loader go.
struct Session {
  std::unique_ptr<loader::Loader> owned;
  loader::Loader* loader = nullptr;
  InFlight in_flight;
};

}  // namespace detail

struct ReaderEndpoint::Impl {
  enum class State { kWaiting, kWelcomed, kStreaming, kFinishing };

  Impl(Context& context, ReaderEndpointOptions options)
      : options(std::move(options)),
        socket(context.impl().context, zmq::socket_type::router),
        ring(2) {}

  void Setup(Context& context);
  void Produce(std::stop_token token);
  bool LoaderEnded() const;
  void Send(const detail::Control& control, bool more = false);
  void SendPart(std::span<const std::byte> bytes, bool more);
  void Welcome(std::uint64_t credits_wanted, const std::optional<SessionTerms>& agreed);
  void Ready(std::uint64_t credits);
  void Credit(std::uint64_t value);
  bool CanSend() const;
  void SendBatch(loader::Batch batch);
  void SendError(const std::string& text);
  void AnswerZap();
  void Refuse(const std::string& id, zmq::message_t& first, const std::string& why);
  void Hello(const std::string& id, std::vector<zmq::message_t>& parts,
             const detail::Control& hello);
  std::string HelloRefusal(const std::vector<zmq::message_t>& parts, const detail::Control& hello,
                           std::optional<SessionTerms>& agreed) const;
  std::optional<SendResult> Handle(std::vector<zmq::message_t>& parts, bool too_many);
  std::optional<SendResult> PeerLeft();
  std::optional<SendResult> AfterFailure(std::vector<zmq::message_t>& parts, bool& too_many);
  void Stream();
  void KeepAlive();
  void EndSession();
  void ReapRetired(bool wait);
  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  [[noreturn]] void Fail(const std::string& reason) const {
    throw TransportError("trainer at " + peer_name + ": " + reason);
  }
  [[noreturn]] void SendFailed(const zmq::error_t& e) {
    // With router_mandatory, EHOSTUNREACH means the trainer's connection is gone; Run()
    // then looks for a bye that came before it went.
    if (e.num() == EHOSTUNREACH) peer_unreachable = true;
    Fail(std::string("send failed: ") + e.what());
  }

  const ReaderEndpointOptions options;
  zmq::socket_t socket;
  std::optional<zmq::socket_t> zap;              // CURVE allow-list: the ZAP handler's socket
  std::optional<detail::ConnectionGuard> guard;  // connections within the descriptor limit
  std::set<std::string> allowed_keys;            // 32-byte binary public keys
  std::set<std::string> refused_keys;            // logged once each (ZeroMQ retries)
  std::string bound_endpoint;
  std::string socket_path;  // ipc:// and shm://: the socket file this reader bound
  ino_t socket_inode = 0;
  detail::EventFd wake;
  loader::SpscRing<detail::Item> ring;
  std::jthread producer;
  std::atomic<std::uint64_t> sent{0};
  bool ran = false;
  std::uint64_t refusals = 0;

  // What sessions are made of.
  loader::Loader* borrowed = nullptr;  // the one-session constructor's loader
  std::optional<SessionTerms> terms;   // what this reader serves; none: any hello
  SessionOpener open;
  std::unique_ptr<detail::Session> session;
  std::vector<std::unique_ptr<detail::Session>> retired;

  // The session with one trainer; touched only by Run's thread.
  State state = State::kWaiting;
  std::string peer_id;
  std::string peer_name;
  bool peer_unreachable = false;  // a send failed because the trainer disconnected
  detail::Clock::time_point last_sent;
  detail::Clock::time_point last_heard;
  std::optional<detail::Item> pending;
  std::uint64_t end_epoch = 0;                     // the epoch after the last one ended
  std::uint64_t credits = 0;                       // inline: batches we may send now
  std::uint64_t granted = 0;                       // inline: credits the trainer granted in all
  bool checksums = true;                           // the trainer verifies payloads
  SharedSlots* shared = nullptr;                   // shared memory: the loader's slots
  std::optional<detail::SlotLayout> layout;        // shared memory, once welcomed
  std::uint64_t shared_credits = 0;                // shared memory: batches the trainer may hold
  std::vector<std::optional<loader::Batch>> held;  // shared memory: by slot, at the trainer
  std::uint64_t held_count = 0;
};

}  // namespace tilefeed::transport
