#pragma once

// Context::Impl, for the transport's .cc files only (it pulls in zmq.hpp).

#include <zmq.hpp>

#include "tilefeed/transport/context.h"

namespace tilefeed::transport {

struct Context::Impl {
  explicit Impl(int io_threads) : context(io_threads) {}
  zmq::context_t context;
};

}  // namespace tilefeed::transport
