#pragma once

// Keeps a bound ZeroMQ socket from running out of file descriptors. Internal.
//
// libzmq accepts every TCP or IPC connection that reaches a bound socket, one descriptor
// each, and has no connection limit. Out of descriptors, its accept fails with EMFILE while
// the listening socket stays readable, and its I/O thread retries at full speed: a flood of
// idle connections made a reader spin a core. The guard watches the socket's monitor
// events and shuts down (shutdown(2), never close(2): the descriptor stays libzmq's, which
// then closes it) each connection accepted beyond a cap, the newest first, so descriptors
// remain for the loader and the trainer being served. If an accept still fails for want
// of descriptors, the newest connection that is not the served trainer's is shut down too,
// so the retry succeeds and is refused.
//
// Monitor events are read after the fact: a descriptor may have been closed and reused by a
// newer connection between the event and its handling. The guard skips a connection whose
// disconnect it has already seen; the window left is the time between libzmq closing one
// descriptor and accepting another on the same number, which only refuses that newer one.
//
// Thread safety: one thread (the reader's Run loop) uses a guard.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace tilefeed::transport::detail {

// 0 asks for the default: half the file-descriptor limit (RLIMIT_NOFILE), less 16, at least 1.
std::size_t ConnectionCap(std::size_t requested);

class ConnectionGuard {
 public:
  // Starts monitoring `socket` (before it binds). `log` gets the first refusal's line and
  // a count every 1000 refusals; may be empty.
  ConnectionGuard(zmq::context_t& context, zmq::socket_t& socket, std::size_t cap,
                  std::function<void(const std::string&)> log);
  ~ConnectionGuard() { StopWatching(); }
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Ends the monitoring of the socket; call it before the socket closes (after that, the
  // destructor does). libzmq sends each event from the context's I/O thread with a blocking
  // send to the monitor: an event once the monitor has closed (a connection that drops
  // while the closed socket lingers) would block that thread for good, and with it the
  // Context's destruction (libzmq issue 3575). Idempotent.
  void StopWatching() noexcept;

  // The monitor socket, to poll for ZMQ_POLLIN.
  zmq::socket_t& monitor() { return monitor_; }
  // Handles every event waiting on the monitor. Never blocks.
  void Drain();
  // The served trainer's connection (ZMQ_SRCFD of its messages; -1: none). It is never
  // shut down to make room.
  void set_protected_fd(int fd) { protected_fd_ = fd; }
  std::size_t cap() const { return cap_; }
  std::uint64_t refused() const { return refused_; }

 private:
  struct Event {
    std::uint16_t id = 0;
    std::int32_t value = 0;
  };
  void Accepted(int fd, bool closed_since);
  void AcceptFailed(int error);
  void Refuse(int fd, const std::string& why);

  void* socket_;  // the monitored socket's handle; nullptr once StopWatching() ran
  zmq::socket_t monitor_;
  const std::size_t cap_;
  std::function<void(const std::string&)> log_;
  std::vector<int> open_;  // accepted and not yet disconnected, oldest first
  int protected_fd_ = -1;
  std::uint64_t refused_ = 0;
  bool told_accept_failed_ = false;
};

}  // namespace tilefeed::transport::detail
