#include "metrics/cli.h"

#include <stdexcept>

#include "loader/address.h"

namespace tilefeed::metrics {
namespace {

bool IsMetricsFlag(const std::string& name) {
  return name == "--metrics" || name == "--metrics-interval" || name == "--metrics-port" ||
         name == "--metrics-bind" || name == "--help";
}

// The command line's check of --metrics-port TEXT: what ListenAddress says is wrong with TEXT
// (the reason after "--metrics-port TEXT: "), or "" when it listens.
std::string PortProblem(const std::string& text) {
  Flags flags;
  flags.port = text;
  try {
    (void)ListenAddress(flags);
  } catch (const MetricsError& e) {
    const std::string what = e.what();
    const std::string named = "--metrics-port " + text + ": ";
    return "must be PORT or HOST:PORT to listen on: " +
           (what.rfind(named, 0) == 0 ? what.substr(named.size()) : what);
  }
  return {};
}

}  // namespace

std::string ListenAddress(const Flags& flags) {
  const bool host_given = flags.port.find(':') != std::string::npos;
  const std::string named = host_given || flags.bind.empty() ? "--metrics-port " + flags.port
                                                             : "--metrics-bind " + flags.bind;
  if (host_given && !flags.bind.empty()) {
    throw MetricsError("--metrics-port " + flags.port + " names a HOST and --metrics-bind " +
                       flags.bind + " another; give the address once");
  }
  std::string address = flags.port;
  if (!host_given) {
    const std::string host = flags.bind.empty() ? "127.0.0.1" : flags.bind;
    // An IPv6 address goes in brackets, as in a URL.
    const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
    address = (ipv6 ? "[" + host + "]" : host) + ":" + flags.port;
  }
  // The readers' parser and loopback rule (loader/address.h): a spelling a reader refuses,
  // this refuses with the same line. --metrics-bind is the word that allows another address.
  loader::HostPort parsed;
  try {
    parsed = loader::ParseHostPort(address, /*bind=*/true);
  } catch (const std::invalid_argument& e) {
    throw MetricsError(named + ": " + e.what());
  }
  if (flags.bind.empty() && !loader::IsLoopbackHost(parsed.host)) {
    throw MetricsError(named + ": " + loader::NotLoopback(parsed.host) +
                       "; --metrics-bind ADDR listens on ADDR, loopback or not");
  }
  const int port = parsed.port == "*" ? 0 : std::stoi(parsed.port);
  const int chosen = port == 0 ? 0 : port + flags.port_offset;
  if (chosen > 65535) {
    throw MetricsError("--metrics-port " + flags.port + " + local instance index " +
                       std::to_string(flags.port_offset) + " is above 65535");
  }
  std::string host = parsed.host == "*" ? "0.0.0.0" : parsed.host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(chosen);
}

void AddFlags(CLI::App& app, Flags& flags, bool with_port) {
  app.add_option("--metrics", flags.path,
                 "write the metrics stream (docs/metrics.md) to this file as JSON lines; "
                 "{instance} in the name is replaced by the instance index, and without it a "
                 "run of several instances writes FILE's name with .INDEX before the extension");
  app.add_option("--metrics-interval", flags.interval_seconds,
                 "seconds between the metrics' interval records (above 0)")
      ->capture_default_str();
  if (with_port) {
    app.add_option("--metrics-port", flags.port,
                   "serve the metrics at http://ADDR:PORT/metrics in the Prometheus text format "
                   "(PORT, or HOST:PORT with a loopback HOST: a reader's rule). The instances "
                   "of one host listen on PORT + their local index (poprun/mpirun); 0 picks "
                   "free ports. Each prints its URL on stderr")
        ->check(CLI::Validator([](std::string& text) { return PortProblem(text); }, "[HOST:]PORT"));
    app.add_option("--metrics-bind", flags.bind,
                   "the address --metrics-port PORT listens on instead of 127.0.0.1, loopback "
                   "or not (0.0.0.0: every interface; the endpoint has no authentication)");
  }
}

std::vector<std::pair<std::string, std::string>> OptionsOf(const CLI::App& app) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name();
    if (name.empty() || IsMetricsFlag(name)) continue;
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
  }
  return session;
}

}  // namespace tilefeed::metrics
