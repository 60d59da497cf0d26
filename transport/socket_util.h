#pragma once

// Small helpers over cppzmq shared by the reader and the stream. Internal.

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "transport/wire.h"

namespace tilefeed::transport::detail {

using Clock = std::chrono::steady_clock;

// The most parts any valid message has (identity + control + header + three payload parts).
inline constexpr std::size_t kMaxParts = 6;

inline std::span<const std::byte> Bytes(const zmq::message_t& message) {
  return {static_cast<const std::byte*>(message.data()), message.size()};
}

// Receives one whole multipart message without blocking. Returns false if none is waiting.
// Parts beyond kMaxParts are received and dropped, and `too_many` is set, so a hostile peer
// cannot make us hold an unbounded number of parts.
inline bool ReceiveParts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                         bool& too_many) {
  parts.clear();
  too_many = false;
  zmq::message_t part;
  if (!socket.recv(part, zmq::recv_flags::dontwait)) return false;
  while (true) {
    const bool more = part.more();
    if (parts.size() < kMaxParts) {
      parts.push_back(std::move(part));
    } else {
      too_many = true;
    }
    if (!more) return true;
    part = zmq::message_t();
    // The rest of a multipart message is already here: ZeroMQ delivers it atomically.
    (void)socket.recv(part, zmq::recv_flags::none);
  }
}

inline void SendControl(zmq::socket_t& socket, const Control& control, bool more = false) {
  const auto bytes = EncodeControl(control);
  socket.send(zmq::const_buffer(bytes.data(), bytes.size()),
              more ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

// Sends without blocking; false when ZeroMQ has no pipe to queue it on (for a connecting
// socket: its connection was refused for good, e.g. a CURVE handshake that the peer's ZAP
// handler rejected).
inline bool TrySendControl(zmq::socket_t& socket, const Control& control) {
  const auto bytes = EncodeControl(control);
  return socket.send(zmq::const_buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)
      .has_value();
}

// The connection `message` came over, as ZeroMQ names it ("" if it does not): tcp: the
// peer's address; ipc:// and shm://: the Unix socket's SO_PEERCRED, "HOST:UID:GID:PID".
inline std::string PeerAddress(zmq::message_t& message) {
  try {
    const char* text = message.gets("Peer-Address");
    return text != nullptr ? text : "";
  } catch (const zmq::error_t&) {
    return "";
  }
}

// "" when `message` came over ipc:// or shm:// from a process of this user, else a line naming
// its uid (PeerAddress's second field) and ours.
inline std::string OtherUser(zmq::message_t& message) {
  const std::string peer = PeerAddress(message);
  const std::size_t uid = peer.find(':') + 1;  // 0 when there is no ':'
  const std::size_t end = uid == 0 ? std::string::npos : peer.find(':', uid);
  const std::string theirs = end == std::string::npos ? "unknown" : peer.substr(uid, end - uid);
  const std::string ours = std::to_string(geteuid());
  if (theirs == ours) return "";
  return "peer uid " + theirs + ", this process's uid " + ours +
         " (over ipc:// and shm:// only the same user is served)";
}

// A PAIR socket that receives `socket`'s `events` (ZMQ_EVENT_*) from ZeroMQ's monitor.
// The inproc name is unique per call: a closed monitor's name stays taken until ZeroMQ
// reaps it. Throws zmq::error_t.
inline zmq::socket_t MonitorOf(zmq::context_t& context, zmq::socket_t& socket, int events) {
  std::random_device random;
  const std::string address =
      "inproc://tilefeed-monitor-" + std::to_string(random()) + "-" + std::to_string(random());
  if (zmq_socket_monitor(socket.handle(), address.c_str(), events) != 0) throw zmq::error_t();
  zmq::socket_t monitor(context, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(address);
  return monitor;
}

// "5.0" for 5 seconds: how error messages print durations.
inline std::string Seconds(Clock::duration duration) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", std::chrono::duration<double>(duration).count());
  return text;
}

// Milliseconds from now until `deadline`, at least 0: a zmq::poll timeout.
inline std::chrono::milliseconds Until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

}  // namespace tilefeed::transport::detail
