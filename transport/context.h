#pragma once

// A ZeroMQ context: the I/O threads behind every socket of a BatchSender or ZmqBatchStream.
// Made once in `main` (or a test) and passed down; it must outlive every sender and stream
// made with it. Thread-safe: any number of senders and streams may share one.

#include <memory>

namespace tilefeed::transport {

class Context {
 public:
  // REQUIRES: io_threads >= 1. Throws TransportError if ZeroMQ cannot start.
  explicit Context(int io_threads = 1);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  struct Impl;  // holds the zmq::context_t; defined in transport/detail/zmq_context.h
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::transport
