#include "transport/context.h"

#include <cassert>

#include "transport/batch_stream.h"
#include "transport/detail/zmq_context.h"

namespace tilefeed::transport {

Context::Context(int io_threads) {
  assert(io_threads >= 1);
  try {
    impl_ = std::make_unique<Impl>(io_threads);
  } catch (const zmq::error_t& e) {
    throw TransportError(std::string("zmq context: ") + e.what());
  }
}

// zmq::context_t's destructor terminates the context; every socket is closed by then.
Context::~Context() = default;

}  // namespace tilefeed::transport
