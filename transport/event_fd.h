#pragma once

// An eventfd used to wake a thread that sits in zmq::poll: other threads Signal(), the
// poller includes fd() in its poll set and Drain()s it. Internal.

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::transport::detail {

class EventFd {
 public:
  EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw TransportError(std::string("eventfd: ") + std::strerror(errno));
  }
  ~EventFd() { close(fd_); }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  int fd() const noexcept { return fd_; }
  // Async-signal-safe and thread-safe; never blocks (a saturated counter stays readable).
  void Signal() const noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof(one));
  }
  void Drain() const noexcept {
    std::uint64_t value = 0;
    [[maybe_unused]] const ssize_t n = read(fd_, &value, sizeof(value));
  }

 private:
  const int fd_;
};

}  // namespace tilefeed::transport::detail
