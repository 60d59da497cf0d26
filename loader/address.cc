#include "loader/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace tilefeed::loader {
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
    if (a->ai_family == AF_INET) {
      out.push_back(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr);
    }
  }
  freeaddrinfo(found);
  return out;
}

bool IsLoopbackIpv4(const in_addr& address) { return (ntohl(address.s_addr) >> 24) == 127; }

}  // namespace

HostPort ParseHostPort(std::string_view text_view, bool bind) {
  const std::string text(text_view);
  if (text.find(';') != std::string::npos) {
    throw std::invalid_argument(
        "';' is ZeroMQ's SOURCE;DEST syntax, which would use the address after it; give one "
        "address");
  }
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("not HOST:PORT");
  HostPort out;
  out.host = text.substr(0, colon);
  out.port = text.substr(colon + 1);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  if (out.host.empty() || out.host.find_first_of("/[] \t") != std::string::npos) {
    throw std::invalid_argument("HOST '" + text.substr(0, colon) +
                                "' is not a host name or address");
  }
  if (!PortText(out.port, bind)) {
    throw std::invalid_argument(bind ? "PORT must be between 1 and 65535 (or * for a free one)"
                                     : "PORT must be between 1 and 65535");
  }
  return out;
}

bool IsLoopbackHost(const std::string& host) {
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

std::string NotLoopback(const std::string& host) {
  return "HOST '" + host +
         "' is not loopback (127.0.0.0/8, ::1, or a name that resolves only to them): it would "
         "listen beyond this host, without authentication";
}

}  // namespace tilefeed::loader
