#pragma once

// A ZeroMQ context: the I/O threads behind every socket of a ReaderEndpoint or ZmqBatchStream.
// Made once in `main` (or a test) and passed down; it must outlive every reader and stream
// made with it. Thread-safe: any number of readers and streams may share one.

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

// An endpoint split the way ZeroMQ reads it. tcp://HOST:PORT keeps HOST without brackets.
struct Endpoint {
  std::string scheme;  // "tcp", "ipc" or "shm"
  std::string host;    // tcp: a name, a numeric address, an interface name or "*"
  std::string port;    // tcp: decimal, or "*" (bind only)
  std::string path;    // ipc: the path; shm: the name
};

// Parses `endpoint` as a reader binds it (`bind`) or a stream connects to it. Throws
// std::invalid_argument with one line saying what is wrong: another scheme, a tcp endpoint
// without HOST:PORT, a PORT outside 1..65535 (0 or * only when binding), or a ';' anywhere
// (ZeroMQ's tcp://SOURCE;DEST syntax: it would bind or connect to the address after the ';',
// not the one a reader of the text sees first). HOST:PORT is read by the parser the metrics
// port's address is read by, so both refuse a spelling with the same line.
Endpoint ParseEndpoint(std::string_view endpoint, bool bind);

// The endpoint ZeroMQ is to bind for `endpoint`: a tcp:// HOST that is a host name
// ("localhost") resolved to its first IPv4 address, since ZeroMQ binds numeric addresses and
// interface names only; anything else as ZmqEndpoint gives it. REQUIRES: ParseEndpoint
// accepts it for binding.
std::string BindAddress(std::string_view endpoint);

// Whether `endpoint` can only be reached from this host: ipc:// and shm://, or tcp:// on a
// 127.0.0.0/8 or ::1 address (a host name counts when every IPv4 address it resolves to is
// one). "*", other addresses, interface names and names that do not resolve are not. The
// metrics port follows the same rule.
// Use it on ZMQ_LAST_ENDPOINT (what was actually bound) as well as on what was asked for.
bool IsLoopbackEndpoint(std::string_view endpoint);

class Context {
 public:
  // REQUIRES: io_threads >= 1. Throws TransportError if ZeroMQ cannot start.
  explicit Context(int io_threads = 1);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  struct Impl;  // holds the zmq::context_t; defined in transport/zmq_context.h
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::transport
