#pragma once

// The metrics group flag of every long-running tool and driver, --metrics
// file=PATH,interval=SECONDS[,port=[HOST:]PORT,bind=ADDR] (the shared option table's
// loader::kMetrics), into metrics::Flags. Header-only; tools/ is a folder of executables.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "loader/option_specs.h"
#include "metrics/cli.h"
#include "tools/option_flags.h"

namespace tilefeed::tools {

// file= and interval= (interval above 0, the spec's range); with `with_port` also port= and
// bind=, checked together by metrics::ListenAddress as they are parsed: the readers' address
// rules, and bind= only with port=.
inline void AddMetricsFlags(CLI::App& app, metrics::Flags& flags, bool with_port = false) {
  const auto& k = loader::kMetricsKeys;
  std::vector keys{BindKey(k[0], flags.path), BindKey(k[1], flags.interval_seconds)};
  if (!with_port) {
    AddGroupOption(app, loader::kMetrics, std::move(keys));
    return;
  }
  keys.push_back(BindKey(k[2], flags.port));
  keys.push_back(BindKey(k[3], flags.bind));
  AddGroupOption(app, loader::kMetrics, std::move(keys), [&flags]() -> std::string {
    if (flags.port.empty() && flags.bind.empty()) return {};
    try {
      (void)metrics::ListenAddress(flags);
    } catch (const metrics::MetricsError& e) {
      return e.what();
    }
    return {};
  });
}

}  // namespace tilefeed::tools
