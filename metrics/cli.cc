#include "metrics/cli.h"

namespace tilefeed::metrics {
namespace {

bool IsMetricsFlag(const std::string& name) {
  return name == "--metrics" || name == "--metrics-interval" || name == "--metrics-port" ||
         name == "--metrics-bind" || name == "--help";
}

// "HOST:PORT" to listen on: --metrics-port's host or --metrics-bind, and its port plus the
// local offset when it is not 0.
std::string ListenAddress(const Flags& flags) {
  const std::size_t colon = flags.port.rfind(':');
  std::string host = colon == std::string::npos ? flags.bind : flags.port.substr(0, colon);
  const int port =
      std::stoi(colon == std::string::npos ? flags.port : flags.port.substr(colon + 1));
  const int chosen = port == 0 ? 0 : port + flags.port_offset;
  if (chosen > 65535) {
    throw MetricsError("--metrics-port " + flags.port + " + local instance index " +
                       std::to_string(flags.port_offset) + " is above 65535");
  }
  // An IPv6 address goes in brackets, as in a URL.
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return host + ":" + std::to_string(chosen);
}

}  // namespace

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
                   "(PORT or HOST:PORT). The instances of one host listen on PORT + their "
                   "local index (poprun/mpirun); 0 picks free ports. Each prints its URL on "
                   "stderr");
    app.add_option("--metrics-bind", flags.bind,
                   "the address --metrics-port PORT listens on (0.0.0.0: every interface)")
        ->capture_default_str();
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
