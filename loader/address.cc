#include "loader/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
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

// The numeric addresses `host` names (getaddrinfo: a numeric host is itself), IPv4 first;
// empty when it names none.
std::vector<std::string> Addresses(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<std::string> out;
  if (host == "*" || getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return out;
  for (const int family : {AF_INET, AF_INET6}) {
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char text[NI_MAXHOST];
      if (a->ai_family == family && getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text),
                                                nullptr, 0, NI_NUMERICHOST) == 0) {
        out.emplace_back(text);
      }
    }
  }
  freeaddrinfo(found);
  return out;
}

bool IsLoopbackAddress(const std::string& numeric) {
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, numeric.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return inet_pton(AF_INET6, numeric.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

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
  const std::vector<std::string> found = Addresses(host);
  return !found.empty() && std::all_of(found.begin(), found.end(), IsLoopbackAddress);
}

std::string NumericHost(const std::string& host) {
  const std::vector<std::string> found = Addresses(host);
  if (found.empty()) return host;
  return found[0].find(':') == std::string::npos ? found[0] : "[" + found[0] + "]";
}

std::string NotLoopback(const std::string& host) {
  if (host != "*" && Addresses(host).empty()) {
    return "HOST '" + host + "' resolves to no address here, so it is not known to be loopback";
  }
  return "HOST '" + host +
         "' is not loopback (127.0.0.0/8, ::1, or a name that resolves only to them): it would "
         "listen beyond this host, without authentication";
}

}  // namespace tilefeed::loader
