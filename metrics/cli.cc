#include "metrics/cli.h"

#include <stdexcept>

#include "loader/address.h"

namespace tilefeed::metrics {

std::string ListenAddress(const Flags& flags) {
  const bool host_given = flags.port.find(':') != std::string::npos;
  const std::string named =
      "--metrics " +
      (host_given || flags.bind.empty() ? "port=" + flags.port : "bind=" + flags.bind);
  if (flags.port.empty()) throw MetricsError(named + " needs port=PORT, the port it listens on");
  if (host_given && !flags.bind.empty()) {
    throw MetricsError(named + " names a HOST and bind=" + flags.bind +
                       " another; give the address once");
  }
  std::string address = flags.port;
  if (!host_given) {
    const std::string host = flags.bind.empty() ? "127.0.0.1" : flags.bind;
    // An IPv6 address goes in brackets, as in a URL.
    const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
    address = (ipv6 ? "[" + host + "]" : host) + ":" + flags.port;
  }
  // The readers' parser and loopback rule (loader/address.h): a spelling a reader refuses,
  // this refuses with the same line. bind= is the word that allows another address.
  loader::HostPort parsed;
  try {
    parsed = loader::ParseHostPort(address, /*bind=*/true);
  } catch (const std::invalid_argument& e) {
    throw MetricsError(named + ": " + e.what());
  }
  if (flags.bind.empty() && !loader::IsLoopbackHost(parsed.host)) {
    throw MetricsError(named + ": " + loader::NotLoopback(parsed.host) +
                       "; bind=ADDR with port=PORT listens on ADDR, loopback or not");
  }
  const int port = parsed.port == "*" ? 0 : std::stoi(parsed.port);
  const int chosen = port == 0 ? 0 : port + flags.port_offset;
  if (chosen > 65535) {
    throw MetricsError("--metrics port=" + flags.port + " + local instance index " +
                       std::to_string(flags.port_offset) + " is above 65535");
  }
  std::string host = parsed.host == "*" ? "0.0.0.0" : parsed.host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(chosen);
}

std::vector<std::pair<std::string, std::string>> OptionsOf(const CLI::App& app) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name();
    if (name.empty() || name == "--metrics" || name == "--help") continue;
    std::string value;
    if (option->count() > 0) {
      for (const std::string& result : option->results()) {
        if (!value.empty()) value += ',';
        value += result;
      }
    } else {
      value = option->get_default_str();
    }
    out.emplace_back(name, value);
  }
  return out;
}

Session Open(const Flags& flags, RunInfo info) {
  Session session;
  if (flags.path.empty() && flags.port.empty()) return session;
  WriterOptions options;
  options.interval_seconds = flags.interval_seconds;
  if (flags.path.empty()) {
    // Prometheus alone: the figures are kept, the lines go nowhere.
    options.path = "/dev/null";
    options.progress_line = false;
  } else {
    options.path = flags.path;
  }
  const std::string tool = info.tool;
  session.writer = std::make_unique<Writer>(options, std::move(info));
  if (!flags.port.empty()) {
    const std::string address = ListenAddress(flags);
    session.exporter = std::make_unique<PrometheusExporter>(address, tool, *session.writer);
    std::fprintf(stderr, "[%s] instance %d: Prometheus metrics at http://%s/metrics\n",
                 tool.c_str(), session.writer->instance(), session.exporter->address().c_str());
    if (!loader::IsLoopbackHost(loader::ParseHostPort(address, true).host)) {
      std::fprintf(stderr,
                   "[%s] warning: the metrics endpoint listens beyond this host "
                   "(--metrics bind=%s), without authentication\n",
                   tool.c_str(), flags.bind.c_str());
    }
  }
  return session;
}

}  // namespace tilefeed::metrics
