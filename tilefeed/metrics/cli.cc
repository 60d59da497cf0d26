#include "tilefeed/metrics/cli.h"

namespace tilefeed::metrics {
namespace {

bool IsMetricsFlag(const std::string& name) {
  return name == "--metrics" || name == "--metrics-interval" || name == "--metrics-port" ||
         name == "--help";
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
                   "serve the metrics at http://HOST:PORT/metrics in the Prometheus text format "
                   "(PORT or HOST:PORT; port 0 picks a free one, printed on stderr)");
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
    session.exporter = std::make_unique<PrometheusExporter>(flags.port, tool, *session.writer);
    std::fprintf(stderr, "[%s] instance %d: Prometheus metrics at http://localhost:%d/metrics\n",
                 tool.c_str(), session.writer->instance(), session.exporter->port());
  }
  return session;
}

}  // namespace tilefeed::metrics
