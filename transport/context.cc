#include "tilefeed/transport/context.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

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

namespace {

bool PortText(const std::string& port, bool bind) {
  if (bind && port == "*") return true;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const long value = std::stol(port);
  return value >= (bind ? 0 : 1) && value <= 65535;
}

// The IPv4 addresses `host` resolves to (getaddrinfo), empty when it does not.
std::vector<in_addr> ResolveIpv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<in_addr> out;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET)
      out.push_back(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr);
  }
  freeaddrinfo(found);
  return out;
}

bool IsLoopbackIpv4(const in_addr& address) { return (ntohl(address.s_addr) >> 24) == 127; }

}  // namespace

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
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) throw bad("not tcp://HOST:PORT");
  out.host = rest.substr(0, colon);
  out.port = rest.substr(colon + 1);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  if (out.host.empty() || out.host.find_first_of("/[] \t") != std::string::npos) {
    throw bad("HOST '" + rest.substr(0, colon) + "' is not a host name or address");
  }
  if (!PortText(out.port, bind)) {
    throw bad(bind ? "PORT must be between 1 and 65535 (or * for a free one)"
                   : "PORT must be between 1 and 65535");
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
  const std::vector<in_addr> found = ResolveIpv4(host);
  if (found.empty()) return std::string(text);  // an interface name, or ZeroMQ says why not
  char address[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &found.front(), address, sizeof(address));
  return "tcp://" + std::string(address) + ":" + endpoint.port;
}

bool IsLoopbackEndpoint(std::string_view text) {
  Endpoint endpoint;
  try {
    endpoint = ParseEndpoint(text, true);
  } catch (const std::invalid_argument&) {
    return false;
  }
  if (endpoint.scheme != "tcp") return true;
  const std::string& host = endpoint.host;
  in_addr numeric{};
  in6_addr numeric6{};
  if (inet_pton(AF_INET, host.c_str(), &numeric) == 1) return IsLoopbackIpv4(numeric);
  if (inet_pton(AF_INET6, host.c_str(), &numeric6) == 1) {
    return std::memcmp(&numeric6, &in6addr_loopback, sizeof(numeric6)) == 0;
  }
  if (host == "*") return false;
  const std::vector<in_addr> found = ResolveIpv4(host);
  if (found.empty()) return false;
  for (const in_addr& address : found) {
    if (!IsLoopbackIpv4(address)) return false;
  }
  return true;
}

}  // namespace tilefeed::transport
