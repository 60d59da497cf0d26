#include "tilefeed/transport/context.h"

#include <unistd.h>

#include <cassert>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <utility>

#include "loader/address.h"
#include "loader/file_io.h"
#include "tilefeed/transport/batch_stream.h"
#include "transport/zmq_context.h"

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

namespace {

// shm://NAME's directory, DIR/tilefeed-<uid>: made 0700 if missing, and refused unless this
// user owns it and no one else may write it (else another user could bind NAME first).
std::string PrivateDirectory() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = std::string(runtime != nullptr && *runtime == '/' ? runtime : "/tmp") +
                    "/tilefeed-" + std::to_string(geteuid());
  if (const auto problem = loader::detail::PrivateDirectoryProblem(dir)) {
    throw TransportError("shm:// directory " + dir + ": refusing it " + *problem +
                         "; another user could serve there: it must be this user's (uid " +
                         std::to_string(geteuid()) + ") and writable by no one else");
  }
  return dir;
}

}  // namespace

std::string ZmqEndpoint(std::string_view text) {
  const Endpoint endpoint = ParseEndpoint(text, /*bind=*/true);
  if (endpoint.scheme == "shm")
    return "ipc://" + PrivateDirectory() + "/" + endpoint.path + ".sock";
  if (endpoint.scheme != "tcp") return std::string(text);
  return "tcp://" + loader::NumericHost(endpoint.host) + ":" + endpoint.port;
}

Endpoint ParseEndpoint(std::string_view text, bool bind) {
  const std::string endpoint(text);
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("endpoint '" + endpoint + "': " + why);
  };
  if (endpoint.find(';') != std::string::npos) {
    throw bad(
        "';' is ZeroMQ's SOURCE;DEST syntax, which would use the address after it; give one "
        "address");
  }
  const std::size_t scheme_end = endpoint.find("://");
  if (scheme_end == std::string::npos) {
    throw bad("not tcp://HOST:PORT, ipc://PATH or shm://NAME");
  }
  Endpoint out;
  out.scheme = endpoint.substr(0, scheme_end);
  const std::string rest = endpoint.substr(scheme_end + 3);
  if (out.scheme == "ipc" || out.scheme == "shm") {
    if (rest.empty()) throw bad("no " + std::string(out.scheme == "ipc" ? "path" : "name"));
    out.path = rest;
    if (out.scheme == "shm" &&
        (rest.size() > 64 ||
         rest.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                "OPQRSTUVWXYZ0123456789_.-") != std::string::npos)) {
      throw bad("the name after shm:// must be 1-64 of [A-Za-z0-9_.-]");
    }
    return out;
  }
  if (out.scheme != "tcp") {
    throw bad("scheme " + out.scheme + ":// is not tcp://, ipc:// or shm://");
  }
  // HOST:PORT is read by the one parser the metrics port reads its address with.
  try {
    loader::HostPort address = loader::ParseHostPort(rest, bind);
    out.host = std::move(address.host);
    out.port = std::move(address.port);
  } catch (const std::invalid_argument& e) {
    throw bad(e.what());
  }
  return out;
}

bool IsLoopbackEndpoint(std::string_view text) {
  Endpoint endpoint;
  try {
    endpoint = ParseEndpoint(text, true);
  } catch (const std::invalid_argument&) {
    return false;
  }
  return endpoint.scheme != "tcp" || loader::IsLoopbackHost(endpoint.host);
}

}  // namespace tilefeed::transport
