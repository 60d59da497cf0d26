// The endpoint is a small HTTP/1.1 server of its own, not prometheus-cpp's Exposer: civetweb
// as Debian 12 builds it for prometheus-cpp 1.1 crashes the whole process on a request for
// any path it has no handler for ("GET /", "GET /favicon.ico"), and cannot answer 405. One
// thread polls every open connection at once (at most 64; a new one past that closes the
// oldest), reads each request head (431 past 8 KiB), answers with Connection: close, and
// closes a connection 5 s after it opened whatever it sent. The body is the text exposition
// format, written here (Exposition).

#include "metrics/prometheus.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stop_token>
#include <thread>
#include <vector>

#include "loader/address.h"
#include "loader/file_io.h"

namespace tilefeed::metrics {
namespace {

using loader::detail::UniqueFd;

// One metric of the text exposition format 0.0.4 (Prometheus' "Exposition formats"): its
// HELP and TYPE lines, then its one sample with the tool's labels.
struct Metric {
  const char* name;
  const char* help;  // no backslash or newline: written as is
  bool counter;      // counter, else gauge
  double value;
};

// A label value with the format's three escapes: backslash, double quote, newline.
std::string LabelValue(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// A sample value as Go's ParseFloat reads it: NaN, +Inf, -Inf, or the shortest-exact
// decimal (17 significant digits round-trip any double).
std::string SampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// The exposition of the Writer's Totals at this moment: nothing is stored between scrapes,
// so the endpoint can never disagree with the JSON lines.
std::string Exposition(const Writer& writer, const std::string& tool) {
  const Totals t = writer.totals();
  const Metric metrics[] = {
      {"tilefeed_images_total", "Images consumed", true, double(t.images)},
      {"tilefeed_batches_total", "Batches handed out by the loader", true, double(t.batches)},
      {"tilefeed_steps_total", "Steps (or batches) the consumer finished", true, double(t.step)},
      {"tilefeed_read_bytes_total", "Encoded bytes read from the dataset", true,
       double(t.bytes_read)},
      {"tilefeed_input_wait_seconds_total", "Consumer time blocked waiting for input", true,
       t.wait_seconds},
      {"tilefeed_busy_seconds_total", "Consumer time in its own work", true, t.busy_seconds},
      {"tilefeed_read_seconds_total", "Loader worker time reading, summed over workers", true,
       t.read_seconds},
      {"tilefeed_decode_seconds_total", "Loader worker time decoding, summed over workers", true,
       t.decode_seconds},
      {"tilefeed_resize_seconds_total", "Loader worker time resizing, summed over workers", true,
       t.resize_seconds},
      {"tilefeed_bad_samples_total", "Samples reported bad", true, double(t.bad_samples)},
      {"tilefeed_elapsed_seconds", "Seconds since the metrics started", false, t.elapsed_seconds},
      {"tilefeed_epoch", "The epoch the consumer is in", false, double(t.epoch)},
      {"tilefeed_ring_slots", "Prefetch ring capacity in batches", false, double(t.ring_slots)},
      {"tilefeed_rss_bytes", "Resident memory", false, t.rss_mib * (1 << 20)},
      {"tilefeed_open_fds", "Open file descriptors", false, double(t.open_fds)},
  };
  const std::string labels = "{tilefeed_instance=\"" + std::to_string(writer.instance()) +
                             "\",tool=\"" + LabelValue(tool) + "\"}";
  std::string out;
  for (const Metric& m : metrics) {
    out += std::string("# HELP ") + m.name + " " + m.help + "\n";
    out += std::string("# TYPE ") + m.name + (m.counter ? " counter\n" : " gauge\n");
    out += m.name + labels + " " + SampleValue(m.value) + "\n";
  }
  return out;
}

// The response goes out in one non-blocking send: a few KiB, under any socket's send buffer;
// a client that has left gets nothing more.
void Send(int fd, const std::string& data) {
  ::send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

std::string Response(int status, const char* reason, const std::string& body, bool with_body,
                     const char* extra = "", const char* type = "text/plain; charset=utf-8") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "Connection: close\r\n\r\n" + (with_body ? body : std::string());
}

// The answer to a complete request head.
std::string Answer(const std::string& head, const Writer& writer, const std::string& tool) {
  std::istringstream line(head.substr(0, head.find("\r\n")));
  std::string method, target, version;
  line >> method >> target >> version;
  if (method.empty() || target.empty() || !version.starts_with("HTTP/")) {
    return Response(400, "Bad Request", "bad request\n", true);
  }
  const bool head_only = method == "HEAD";
  if (target.substr(0, target.find('?')) != "/metrics") {
    return Response(404, "Not Found", "not found: the metrics are at /metrics\n", !head_only);
  }
  if (method != "GET" && !head_only) {
    return Response(405, "Method Not Allowed", "method not allowed: GET /metrics\n", true,
                    "Allow: GET, HEAD\r\n");
  }
  return Response(200, "OK", Exposition(writer, tool), !head_only, "",
                  "text/plain; version=0.0.4; charset=utf-8");
}

constexpr std::size_t kMaxHead = 8192;
constexpr std::size_t kMaxConnections = 64;
constexpr std::chrono::seconds kDeadline{5};

// One client: the request head so far, and when it is closed whatever it does.
struct Connection {
  UniqueFd fd;
  std::string head;
  std::chrono::steady_clock::time_point deadline;
  bool answered = false;  // then what it sends is read and dropped until it closes
};

// Reads what `c` sent and answers once its head is complete (431 past 8 KiB); then shuts
// down the sending side, so that the client reads the answer before the close. Closes
// `c.fd` when the client has closed.
void Serve(Connection& c, const Writer& writer, const std::string& tool) {
  char buffer[4096];
  const ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) c.fd = UniqueFd();
  if (n <= 0 || c.answered) return;
  c.head.append(buffer, static_cast<std::size_t>(n));
  const std::size_t end = std::min(c.head.find("\r\n\r\n"), c.head.size());
  if (end == c.head.size() && end <= kMaxHead) return;  // the rest of the head is to come
  Send(c.fd.get(), end > kMaxHead ? Response(431, "Request Header Fields Too Large",
                                             "request header fields too large: over 8 KiB\n", true)
                                  : Answer(c.head, writer, tool));
  c.answered = true;
  ::shutdown(c.fd.get(), SHUT_WR);
}

// A listening socket on "HOST:PORT" ("[IPv6]:PORT", as ListenAddress writes it). Throws
// MetricsError.
UniqueFd Listen(const std::string& address, int& port) {
  const auto fail = [&](const std::string& why) {
    return MetricsError("cannot serve Prometheus metrics on " + address + ": " + why);
  };
  const loader::HostPort parsed = loader::ParseHostPort(address, /*bind=*/true);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(parsed.host.c_str(), parsed.port.c_str(), &hints, &found);
  if (rc != 0) throw fail(::gai_strerror(rc));
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, ::freeaddrinfo);
  UniqueFd socket(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (socket.get() < 0) throw fail(loader::detail::ErrnoMessage(errno));
  const int on = 1;
  ::setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (::bind(socket.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(socket.get(), 64) != 0) {
    throw fail(loader::detail::ErrnoMessage(errno));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(socket.get(), reinterpret_cast<sockaddr*>(&bound), &length);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return socket;
}

}  // namespace

struct PrometheusExporter::Impl {
  std::string host;
  int port = 0;
  UniqueFd listener;
  std::jthread server;  // last: stopped and joined first
};

PrometheusExporter::PrometheusExporter(const std::string& address, const std::string& tool,
                                       const Writer& writer)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = address.substr(0, address.rfind(':'));
  impl_->listener = Listen(address, impl_->port);
  impl_->server =
      std::jthread([listener = impl_->listener.get(), &writer, tool](const std::stop_token& stop) {
        std::vector<Connection> open;  // oldest first
        std::vector<pollfd> polled;
        while (!stop.stop_requested()) {
          polled.assign(1, pollfd{listener, POLLIN, 0});
          for (const Connection& c : open) polled.push_back({c.fd.get(), POLLIN, 0});
          // 100 ms: how soon a stop or a passed deadline is seen.
          if (::poll(polled.data(), polled.size(), 100) < 0) continue;
          for (std::size_t i = 0; i < open.size(); ++i) {
            if (polled[i + 1].revents != 0) Serve(open[i], writer, tool);
          }
          const auto now = std::chrono::steady_clock::now();
          std::erase_if(open, [now](const Connection& c) { return !c.fd || now > c.deadline; });
          while (polled[0].revents != 0) {
            UniqueFd client(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
            if (!client) break;
            // The cap: the oldest connection makes room, so silent clients cannot keep a
            // scrape out.
            if (open.size() == kMaxConnections) open.erase(open.begin());
            open.push_back({std::move(client), {}, now + kDeadline});
          }
        }
      });
}

PrometheusExporter::~PrometheusExporter() = default;

int PrometheusExporter::port() const { return impl_->port; }

std::string PrometheusExporter::address() const {
  return impl_->host + ":" + std::to_string(port());
}

}  // namespace tilefeed::metrics
