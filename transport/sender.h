#pragma once

// BatchSender: the reader side of the transport. It takes batches from a loader::Loader and
// sends them to one trainer, which receives them through a ZmqBatchStream
// (transport/zmq_stream.h). Two ways to move the payload:
//
// - Over ZeroMQ (tcp:// between hosts, ipc:// on one host): the payload message points
//   straight into the loader's slot (zero-copy); the slot returns to the loader when ZeroMQ
//   has sent the message and released it.
// - Through shared memory (same host, `shared_memory`): the sender copies each finished
//   batch into a slot of a POSIX shared-memory ring that the trainer reads in place; only
//   small control messages cross the socket. The segment is unlinked as soon as both sides
//   have mapped it, and names left by killed processes are removed by the next sender.
//
// Flow control is credit-based: the trainer grants credits, each batch spends one, so a
// slow trainer stops the sender (and through the loader's slots, the decode workers)
// instead of filling memory. Both sides send heartbeats; a silent peer is an error.
//
// Ownership: the sender borrows the Context and the Loader, which must outlive it.
// Thread safety: Run() is called once, from one thread; batches_sent() and endpoint() from
// any thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>

#include "loader/loader.h"
#include "transport/context.h"

namespace tilefeed::transport {

struct SenderOptions {
  std::string endpoint = "tcp://*:5555";  // bound; "tcp://127.0.0.1:*" picks a free port
  bool shared_memory = false;             // payload through a /dev/shm ring (same host only)
  std::string job_id = "0";               // names the shared-memory segment ([A-Za-z0-9_.])
  std::size_t max_shared_slots = 16;      // shared_memory: cap on the trainer's credits
  std::chrono::milliseconds heartbeat_interval{1000};  // send one when idle this long
  std::chrono::milliseconds peer_timeout{5000};        // trainer silent this long -> error
  // CURVE on: this reader's secret key file (transport/curve.h); trainers then need its
  // public key. "" = plaintext, for trusted networks only.
  std::string curve_secret_key_file{};
};

enum class SendResult {
  kCompleted,  // the loader's epochs are all sent and the trainer said bye
  kPeerLeft,   // the trainer said bye first
  kStopped,    // the stop token was triggered
};

class BatchSender {
 public:
  // Binds the endpoint. Throws TransportError if it cannot be bound or the CURVE key file
  // is unusable.
  BatchSender(Context& context, loader::Loader& loader, SenderOptions options);
  // Waits until ZeroMQ has released every zero-copy message, so no slot outlives the
  // sender.
  ~BatchSender();
  BatchSender(const BatchSender&) = delete;
  BatchSender& operator=(const BatchSender&) = delete;

  // Serves the first trainer that says hello until the loader's epochs are done, the
  // trainer leaves or `stop` is triggered. On return or throw the loader is stopped.
  // Throws TransportError (the trainer went silent, a bad message) or loader::LoaderError
  // (after telling the trainer). REQUIRES: called at most once.
  SendResult Run(std::stop_token stop = {});

  // The bound endpoint with the actual port, e.g. "tcp://127.0.0.1:40123".
  std::string endpoint() const;
  // Batches handed to ZeroMQ so far.
  std::uint64_t batches_sent() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::transport
