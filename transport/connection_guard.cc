#include "transport/connection_guard.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "transport/socket_util.h"

namespace tilefeed::transport::detail {
namespace {

constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_DISCONNECTED;

std::uint64_t DescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return limit.rlim_cur;
}

}  // namespace

std::size_t ConnectionCap(std::size_t requested) {
  if (requested != 0) return requested;
  const std::uint64_t half = DescriptorLimit() / 2;
  return static_cast<std::size_t>(std::max<std::uint64_t>(1, half > 16 ? half - 16 : 1));
}

ConnectionGuard::ConnectionGuard(zmq::context_t& context, zmq::socket_t& socket, std::size_t cap,
                                 std::function<void(const std::string&)> log)
    : socket_(socket.handle()),
      monitor_(detail::MonitorOf(context, socket, kEvents)),
      cap_(cap),
      log_(std::move(log)) {}

void ConnectionGuard::StopWatching() noexcept {
  if (socket_ == nullptr) return;
  (void)zmq_socket_monitor(socket_, nullptr, 0);
  socket_ = nullptr;
}

void ConnectionGuard::Drain() {
  // Read everything first: a disconnect later in the batch means that descriptor may have
  // been reused already, and must not be shut down on behalf of the older connection.
  std::vector<Event> events;
  while (true) {
    zmq::message_t head;
    if (!monitor_.recv(head, zmq::recv_flags::dontwait)) break;
    const bool more = head.more();
    if (more) {
      zmq::message_t address;  // the endpoint; always follows the head
      (void)monitor_.recv(address, zmq::recv_flags::none);
    }
    if (head.size() < 6) continue;
    Event event;
    std::memcpy(&event.id, head.data(), 2);
    std::memcpy(&event.value, static_cast<const char*>(head.data()) + 2, 4);
    events.push_back(event);
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& event = events[i];
    if (event.id == ZMQ_EVENT_ACCEPTED) {
      const bool closed_since =
          std::any_of(events.begin() + static_cast<std::ptrdiff_t>(i) + 1, events.end(),
                      [&](const Event& later) {
                        return later.id == ZMQ_EVENT_DISCONNECTED && later.value == event.value;
                      });
      Accepted(event.value, closed_since);
    } else if (event.id == ZMQ_EVENT_DISCONNECTED) {
      std::erase(open_, event.value);
      if (event.value == protected_fd_) protected_fd_ = -1;
    } else if (event.id == ZMQ_EVENT_ACCEPT_FAILED) {
      AcceptFailed(event.value);
    }
  }
}

void ConnectionGuard::Accepted(int fd, bool closed_since) {
  if (closed_since) return;
  if (open_.size() >= cap_) {
    Refuse(fd, std::to_string(open_.size()) + " are open, the most this reader takes with its " +
                   "limit of " + std::to_string(DescriptorLimit()) +
                   " file descriptors (ulimit -n)");
    return;
  }
  open_.push_back(fd);
}

void ConnectionGuard::AcceptFailed(int error) {
  if (error != EMFILE && error != ENFILE) return;  // libzmq retries others itself
  // Make room: the newest connection that is not the trainer's goes, and the retried
  // accept then finds a descriptor (and, at the cap, is refused in turn).
  const auto newest =
      std::find_if(open_.rbegin(), open_.rend(), [this](int fd) { return fd != protected_fd_; });
  if (newest != open_.rend()) {
    const int fd = *newest;
    open_.erase(std::next(newest).base());
    Refuse(fd, std::string("out of file descriptors (accept: ") + std::strerror(error) + ") with " +
                   std::to_string(open_.size() + 1) + " connections open");
  } else if (!told_accept_failed_ && log_) {
    log_(std::string("accept: ") + std::strerror(error) +
         ": no connection to shut down; raise the file-descriptor limit (ulimit -n)");
  }
  told_accept_failed_ = true;
}

void ConnectionGuard::Refuse(int fd, const std::string& why) {
  // The peer sees its connection dropped during the ZeroMQ handshake.
  (void)shutdown(fd, SHUT_RDWR);
  ++refused_;
  if (!log_) return;
  if (refused_ == 1) {
    log_("refused connections: " + why + "; later refusals are counted");
  } else if (refused_ % 1000 == 0) {
    log_("refused connections: " + std::to_string(refused_) + " so far");
  }
}

}  // namespace tilefeed::transport::detail
