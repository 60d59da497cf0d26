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
// ZeroMQ ipc://). Over ipc:// and shm:// both sides serve only a peer of their own uid
// (SO_PEERCRED); another user's process is refused with one line naming both uids.
bool IsShmEndpoint(std::string_view endpoint);
// The endpoint ZeroMQ binds or connects for `endpoint`: shm://NAME is
// ipc://DIR/tilefeed-<uid>/NAME.sock with DIR = $XDG_RUNTIME_DIR or else /tmp, that directory
// made 0700 if missing; a tcp:// host name is its first address (IPv4 first, IPv6 in
// brackets: ZeroMQ binds only addresses and interface names); anything else unchanged.
// Throws std::invalid_argument as ParseEndpoint, TransportError (one line naming its path,
// owner and mode) when the shm:// directory is another user's or others may write it.
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

// Whether `endpoint` can only be reached from this host: ipc:// and shm://, or tcp:// on a
// 127.0.0.0/8 or ::1 address or a name every address of which is one (the metrics port's
// rule too). Use it on ZMQ_LAST_ENDPOINT (what was bound) as well as on what was asked for.
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
