#pragma once

// A ZeroMQ context: the I/O threads behind every socket of a BatchSender or ZmqBatchStream.
// Made once in `main` (or a test) and passed down; it must outlive every sender and stream
// made with it. Thread-safe: any number of senders and streams may share one.

#include <memory>
#include <string>
#include <string_view>

namespace tilefeed::transport {

// Endpoints name how batches travel: tcp://HOST:PORT (ZeroMQ, between hosts), ipc://PATH
// (ZeroMQ on one host) or shm://NAME (one host, payload in shared memory, control over
// ZeroMQ ipc://). shm://NAME's control socket is ipc://DIR/tilefeed-<uid>-NAME.sock with
// DIR = $XDG_RUNTIME_DIR or else /tmp, so a reader and a trainer of one user agree on it.
bool IsShmEndpoint(std::string_view endpoint);
// The ZeroMQ endpoint for `endpoint`: shm://NAME as above, anything else unchanged. Throws
// std::invalid_argument for a NAME that is empty or not [A-Za-z0-9_.-].
std::string ZmqEndpoint(std::string_view endpoint);

class Context {
 public:
  // REQUIRES: io_threads >= 1. Throws TransportError if ZeroMQ cannot start.
  explicit Context(int io_threads = 1);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  struct Impl;  // holds the zmq::context_t; defined in tilefeed/transport/detail/zmq_context.h
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::transport
