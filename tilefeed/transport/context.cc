#include "tilefeed/transport/context.h"

#include <unistd.h>

#include <cassert>
#include <cstdlib>
#include <stdexcept>

#include "tilefeed/transport/batch_stream.h"
#include "tilefeed/transport/detail/zmq_context.h"

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

bool IsShmEndpoint(std::string_view endpoint) { return endpoint.rfind("shm://", 0) == 0; }

std::string ZmqEndpoint(std::string_view endpoint) {
  if (!IsShmEndpoint(endpoint)) return std::string(endpoint);
  const std::string_view name = endpoint.substr(6);
  const bool ok = !name.empty() && name.size() <= 64 &&
                  name.find_first_not_of(
                      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789_.-") == std::string_view::npos;
  if (!ok) {
    throw std::invalid_argument("endpoint " + std::string(endpoint) +
                                ": the name after shm:// must be 1-64 of [A-Za-z0-9_.-]");
  }
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string out = "ipc://";
  out.append(runtime != nullptr && *runtime == '/' ? runtime : "/tmp");
  out.append("/tilefeed-").append(std::to_string(getuid())).append(1, '-');
  out.append(name).append(".sock");
  return out;
}

}  // namespace tilefeed::transport
