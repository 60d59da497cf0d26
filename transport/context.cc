#include "tilefeed/transport/context.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cassert>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <utility>

#include "loader/address.h"
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
    if (out.scheme == "shm") (void)ZmqEndpoint(endpoint);  // checks the name
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

std::string BindAddress(std::string_view text) {
  const Endpoint endpoint = ParseEndpoint(text, true);
  if (endpoint.scheme != "tcp") return ZmqEndpoint(text);
  in_addr numeric{};
  in6_addr numeric6{};
  const std::string& host = endpoint.host;
  if (host == "*" || inet_pton(AF_INET, host.c_str(), &numeric) == 1 ||
      inet_pton(AF_INET6, host.c_str(), &numeric6) == 1) {
    return std::string(text);
  }
  // ZeroMQ binds numeric addresses and interface names only: a name goes as its first IPv4
  // address.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) {
    return std::string(text);  // an interface name, or ZeroMQ says why not
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  char address[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr, address,
            sizeof(address));
  return "tcp://" + std::string(address) + ":" + endpoint.port;
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
