#pragma once

// ReaderEndpoint: the reader's end of the transport (the reader is the process that decodes
// and serves batches: `tilefeed-serve`, or any program that makes one). It takes batches
// from a loader::Loader and sends them to one trainer, which receives them through a ZmqBatchStream
// (tilefeed/transport/streams.h). Two ways to move the payload:
//
// - Over ZeroMQ (tcp:// between hosts, ipc:// on one host): the payload message points
//   straight into the loader's slot (zero-copy); the slot returns to the loader when ZeroMQ
//   has sent the message and released it.
// - Through shared memory (same host, an `shm://NAME` endpoint): zero copies. The loader's batch
//   slots are a POSIX shared-memory segment (SharedSlots, given to the loader as its
//   LoaderOptions::slot_memory), so the workers decode straight into memory the trainer
//   maps; for each batch only a small control message (slot, frame header) crosses the
//   socket, the trainer reads the slot in place, and when it drops the batch its "slot
//   free" credit makes the endpoint return the slot to the loader. The segment is unlinked
//   as soon as both sides have mapped it; names left by killed processes are removed by
//   the next SharedSlots or the next trainer that maps a segment.
//
// Flow control is credit-based: the trainer grants credits, each batch spends one, so a
// slow trainer stops the reader (and through the loader's slots, the decode workers)
// instead of filling memory. With shared memory credits and slots are coupled: at most
// min(the trainer's credits, the loader's prefetch_depth) batches are in flight, and a
// trainer can hold at most prefetch_depth batches at once (the next one needs a slot
// back). Both sides send heartbeats; a silent peer is an error.
//
// Sessions: a reader made with SessionTerms and a SessionOpener (tilefeed-serve) serves only
// trainers whose hello states terms that agree with its own (tilefeed/transport/session.h); it
// opens a fresh loader for each session at the trainer's data position and, with
// keep_serving, waits for the next trainer when one leaves or fails, so a trainer that
// restarts from a checkpoint reconnects and continues. A hello that is malformed, states
// other terms or comes while another trainer is served is answered with an error that
// says why (and a line to `log`); it never takes the session, unless the trainer served
// has missed two heartbeats and the new hello agrees (the old one is taken for dead, e.g.
// killed and restarting from a checkpoint). A trainer that misbehaves (a credit it was not
// owed, a malformed message, silence) loses its session, not the reader. An ipc:// or
// shm:// endpoint that another live reader serves is refused, and the socket file is
// removed when the endpoint goes; over one, a trainer of another uid (SO_PEERCRED) is refused.
//
// Ownership: the endpoint borrows the Context and the Loader, which must outlive it.
// Thread safety: Run() is called once, from one thread; batches_sent() and endpoint() from
// any thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "tilefeed/loader/loader.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/session.h"

namespace tilefeed::transport {

// The loader's batch slots in a POSIX shared-memory segment, for the zero-copy same-host
// path. Make it before the loader, for the loader's options, and hand it to the loader:
//
//   loader::LoaderOptions options = ...;
//   options.slot_memory = SharedSlots::Create(options, job_id);
//   loader::Loader loader(std::move(source), options);
//   ReaderEndpoint reader(context, loader, {.endpoint = "shm://job"});
//
// The segment (named /tilefeed-<uid>-<job>-<pid>-<tag>, mode 0600) holds prefetch_depth
// slots laid out as the trainer expects (transport/shm.h). It is unlinked once a
// trainer has mapped it, or when this object goes; names of killed processes are removed by
// the next Create or the next trainer that maps a segment. Thread safety: Slot() is called
// by the Loader's constructor only; the rest by the ReaderEndpoint.
class SharedSlots final : public loader::SlotMemory {
 public:
  // Removes stale segments of this user, then creates one for `options`' batch shape.
  // Throws TransportError (shm_open/mmap failed, batches too large).
  static std::shared_ptr<SharedSlots> Create(const loader::LoaderOptions& options,
                                             std::string_view job_id);
  ~SharedSlots() override;  // unlinks the name if still there, unmaps

  // Throws std::invalid_argument for a loader whose options are not the ones of Create.
  Spans Slot(std::size_t slot, std::size_t slots, std::size_t samples,
             std::size_t image_bytes) override;

  const std::string& name() const;  // the segment's, e.g. "/tilefeed-1000-job7-4242-..."
  std::size_t slot_count() const;
  std::size_t image_bytes() const;  // per slot
  std::size_t max_samples() const;  // per slot
  std::byte* slot_data(std::size_t slot) const;
  // Removes the name (the mappings stay). Idempotent.
  void Unlink() noexcept;

  struct Impl;
  explicit SharedSlots(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

struct ReaderEndpointOptions {
  // Bound; "tcp://127.0.0.1:*" picks a free port. shm://NAME (tilefeed/transport/context.h):
  // the payload goes through shared memory (same host only; the loader must decode into
  // SharedSlots, LoaderOptions::slot_memory, else the constructor throws), the control socket
  // at ZmqEndpoint("shm://NAME"). Loopback unless told: any
  // other address should come with CURVE and an allow-list.
  // A tcp:// host name is resolved (ZeroMQ binds only addresses and interface names); a ';'
  // (ZeroMQ's SOURCE;DEST) is refused (ParseEndpoint, tilefeed/transport/context.h).
  std::string endpoint = "tcp://127.0.0.1:5555";
  // Refuse to serve unless what ZeroMQ actually bound (ZMQ_LAST_ENDPOINT) is loopback
  // (IsLoopbackEndpoint): the constructor unbinds and throws TransportError naming it.
  bool loopback_only = false;
  std::chrono::milliseconds heartbeat_interval{1000};  // send one when idle this long
  std::chrono::milliseconds peer_timeout{5000};        // trainer silent this long -> error
  // CURVE on: this reader's secret key file (transport/curve.h); trainers then need its
  // public key. "" = plaintext, for trusted networks only.
  std::string curve_secret_key_file{};
  // CURVE allow-list: the public keys (Z85, ReadCurvePublicKeys) of the trainers that may
  // connect; empty = any trainer that knows the reader's public key. Checked by a ZAP
  // handler on the context's inproc://zeromq.zap.01 (so one allow-listing endpoint per
  // Context); a refused trainer never gets past the handshake and on_refused gets a line
  // naming its address and key. REQUIRES: curve_secret_key_file is set.
  std::vector<std::string> curve_allowed_keys{};
  std::function<void(const std::string&)> on_refused{};
  // Connections this reader keeps open at once; each further one is shut down as it is
  // accepted (its peer sees the connection dropped) and `log` says so once, then every
  // 1000th. Out of descriptors, ZeroMQ would otherwise retry its accept at full speed.
  // 0 = half the file-descriptor limit (RLIMIT_NOFILE) less 16.
  std::size_t max_connections = 0;
  // After a trainer leaves or fails, wait for the next one instead of returning. Needs a
  // SessionOpener (a borrowed loader serves one session).
  bool keep_serving = false;
  // A line for each refused hello and each session that ends early; may be empty.
  std::function<void(const std::string&)> log{};
  // Called from Run()'s thread with the loader serving a session when the session starts,
  // and with nullptr when it ends, before that loader may be destroyed (for a tool that
  // samples the loader's metrics from another thread). May be empty.
  std::function<void(const loader::Loader*)> on_loader{};
};

// Opens the loader that serves one session, on the agreed terms (the trainer's position).
// A throw refuses the trainer with what(). With shared memory the loader must decode into
// a fresh SharedSlots (the previous session's name is gone).
using SessionOpener = std::function<std::unique_ptr<loader::Loader>(const SessionTerms& agreed)>;

enum class SendResult {
  kCompleted,  // the loader's epochs are all sent and the trainer said bye
  kPeerLeft,   // the trainer said bye first (never with keep_serving)
  kStopped,    // the stop token was triggered; the trainer was told it is an error
};

class ReaderEndpoint {
 public:
  // Binds the endpoint. Throws TransportError if it cannot be bound, is not loopback under
  // loopback_only, or the CURVE key file is unusable; std::invalid_argument for a malformed
  // endpoint or an shm:// one without SharedSlots.
  ReaderEndpoint(Context& context, loader::Loader& loader, ReaderEndpointOptions options);
  // Serves trainers that agree to `terms`, each from a loader that `open` makes. Throws as
  // above; std::invalid_argument for keep_serving without an opener.
  ReaderEndpoint(Context& context, ReaderEndpointOptions options, SessionTerms terms,
                 SessionOpener open);
  // Waits until ZeroMQ has released every zero-copy message, so no slot outlives the
  // endpoint.
  ~ReaderEndpoint();
  ReaderEndpoint(const ReaderEndpoint&) = delete;
  ReaderEndpoint& operator=(const ReaderEndpoint&) = delete;

  // Serves the first trainer whose hello is accepted until the loader's epochs are done,
  // the trainer leaves (with keep_serving: the next trainer's) or `stop` is triggered. On
  // return or throw the loader is stopped. Throws TransportError (without keep_serving: the
  // trainer went silent, a bad message) or loader::LoaderError (after telling the trainer).
  // REQUIRES: called at most once.
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
