// The endpoint is a small HTTP/1.1 server of its own, not prometheus-cpp's Exposer: civetweb
// as Debian 12 builds it for prometheus-cpp 1.1 crashes the whole process on a request for
// any path it has no handler for ("GET /", "GET /favicon.ico"), and cannot answer 405. It
// serves one connection at a time on one thread (a scrape is one short request): it reads
// the request head (at most 8 KiB, 5 s), answers with Connection: close, and goes back to
// accept. The body is the text exposition format, written here (Exposition).

#include "metrics/prometheus.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
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
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
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

void SendAll(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away: nothing to tell it
    done += static_cast<std::size_t>(n);
  }
}

std::string Response(int status, const char* reason, const std::string& type,
                     const std::string& body, bool with_body, const char* extra = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "Connection: close\r\n\r\n" + (with_body ? body : std::string());
}

// The request head (up to the blank line, at most 8 KiB), or what came of it within 5 s;
// empty when `stop` is requested first, so that a silent client never delays a stop by more
// than the 100 ms poll.
std::string ReadHead(int fd, const std::stop_token& stop) {
  std::string head;
  char buffer[2048];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192) {
    if (stop.stop_requested() || std::chrono::steady_clock::now() > deadline) break;
    pollfd readable{fd, POLLIN, 0};
    if (::poll(&readable, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    head.append(buffer, static_cast<std::size_t>(n));
  }
  return stop.stop_requested() ? std::string() : head;
}

// Reads one request head and answers it.
void Answer(int fd, const Writer& writer, const std::string& tool, const std::stop_token& stop) {
  const timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  const std::string head = ReadHead(fd, stop);
  if (stop.stop_requested()) return;
  std::istringstream line(head.substr(0, head.find("\r\n")));
  std::string method, target, version;
  line >> method >> target >> version;
  const std::string text = "text/plain; charset=utf-8";
  if (method.empty() || target.empty() || !version.starts_with("HTTP/")) {
    SendAll(fd, Response(400, "Bad Request", text, "bad request\n", true));
    return;
  }
  const bool head_only = method == "HEAD";
  if (target.substr(0, target.find('?')) != "/metrics") {
    SendAll(fd, Response(404, "Not Found", text, "not found: the metrics are at /metrics\n",
                         !head_only));
  } else if (method != "GET" && !head_only) {
    SendAll(fd, Response(405, "Method Not Allowed", text, "method not allowed: GET /metrics\n",
                         true, "Allow: GET, HEAD\r\n"));
  } else {
    SendAll(fd, Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                         Exposition(writer, tool), !head_only));
  }
}

// A listening socket on "HOST:PORT" ("[IPv6]:PORT", read by the readers' parser). Throws
// MetricsError.
UniqueFd Listen(const std::string& address, int& port) {
  const auto fail = [&](const std::string& why) {
    return MetricsError("cannot serve Prometheus metrics on " + address + ": " + why);
  };
  loader::HostPort parsed;
  try {
    parsed = loader::ParseHostPort(address, /*bind=*/true);
  } catch (const std::invalid_argument& e) {
    throw fail(e.what());
  }
  const std::string host = parsed.host == "*" ? std::string() : parsed.host;
  const std::string service = parsed.port == "*" ? "0" : parsed.port;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) throw fail(::gai_strerror(rc));
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, ::freeaddrinfo);
  UniqueFd socket(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (socket.get() < 0) throw fail(loader::detail::ErrnoMessage(errno));
  const int on = 1;
  ::setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (::bind(socket.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(socket.get(), 16) != 0) {
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
  const Writer* writer = nullptr;
  std::string tool;
  std::jthread server;  // last: stopped and joined first
};

PrometheusExporter::PrometheusExporter(const std::string& address, const std::string& tool,
                                       const Writer& writer)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = address.substr(0, address.rfind(':'));
  impl_->writer = &writer;
  impl_->tool = tool;
  impl_->listener = Listen(address, impl_->port);
  impl_->server = std::jthread([impl = impl_.get()](std::stop_token stop) {
    while (!stop.stop_requested()) {
      pollfd ready{impl->listener.get(), POLLIN, 0};
      if (::poll(&ready, 1, 100) <= 0) continue;  // 100 ms: how soon a stop is seen
      const UniqueFd client(::accept4(impl->listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (client.get() >= 0) Answer(client.get(), *impl->writer, impl->tool, stop);
    }
  });
}

PrometheusExporter::~PrometheusExporter() = default;

int PrometheusExporter::port() const { return impl_->port; }

std::string PrometheusExporter::address() const {
  return impl_->host + ":" + std::to_string(port());
}

}  // namespace tilefeed::metrics
