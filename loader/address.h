#pragma once

// HOST:PORT, as every door that listens reads it: the readers' tcp:// endpoints
// (transport::ParseEndpoint) and the metrics port (metrics/cli.h). One parser and one loopback
// rule, so that a spelling one door refuses the other refuses with the same line. It is here
// because loader/ is the lowest folder that transport/ and metrics/ both link (metrics sits
// beside transport and links no transport code); it opens no socket. Not installed.
//
// Pure functions (host names are resolved with getaddrinfo); thread-safe.

#include <string>
#include <string_view>

namespace tilefeed::loader {

struct HostPort {
  std::string host;  // without brackets: a name, a numeric address, an interface name or "*"
  std::string port;  // decimal, or "*" (bind only)
};

// Parses "HOST:PORT" ("[IPv6]:PORT"). Throws std::invalid_argument with one line saying what
// is wrong: a ';' (ZeroMQ's SOURCE;DEST: the address after it would be used), no HOST:PORT,
// an empty or malformed HOST, or a PORT outside 1..65535 (0 or * allowed when `bind`).
HostPort ParseHostPort(std::string_view text, bool bind);

// The loopback rule: `host` is a 127.0.0.0/8 or ::1 address, or a name every address of which
// is one ("ip6-localhost": ::1). "*", other addresses, interface names and names that do not
// resolve are not.
bool IsLoopbackHost(const std::string& host);

// `host` as ZeroMQ binds it (addresses and interface names only): a name's first address, IPv4
// first, IPv6 in brackets; "*", an interface name or a name that does not resolve unchanged.
std::string NumericHost(const std::string& host);

// The line that refuses to listen on `host` without authentication: "HOST '*' is not
// loopback (...)", or for a name that resolves to nothing, that it does not. The door that says
// it goes on to say how to allow it.
std::string NotLoopback(const std::string& host);

}  // namespace tilefeed::loader
