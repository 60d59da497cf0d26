#pragma once

// Old spellings of options, kept so that existing scripts keep working. Each old spelling
// sets the same value as the option that replaced it, excludes it, is listed apart in
// --help (and not in the new option's line), and, once parsing succeeded, is named in one warning
// line on stderr:
//
//   tools::DeprecatedFlags deprecated;
//   CLI::Option* timeout = app.add_option("--timeout", seconds, "...");
//   deprecated.AddMilliseconds(app, timeout, "--timeout-ms", seconds);
//   if (const auto rc = tools::ParseArgs(app, argc, argv, "tilefeed-serve")) return *rc;
//   deprecated.Warn("tilefeed-serve");
//   // tilefeed-serve: warning: --timeout-ms is deprecated; use --timeout 60 (seconds)
//
// A bad value of an old spelling is refused like the new option's, before any warning.
// Header-only; tools/ is a folder of executables, not a library.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/cli_checks.h"

namespace tilefeed::tools {

class DeprecatedFlags {
 public:
  // The --help section that lists the old spellings. (CLI11 hides an option of group "", but
  // then names it "" in its errors too.)
  static constexpr const char* kGroup = "Deprecated spellings";

  // `old_name` takes whole milliseconds (at least 1) for `current`, which takes seconds
  // into `seconds`. Returns the old option.
  CLI::Option* AddMilliseconds(CLI::App& app, CLI::Option* current, const std::string& old_name,
                               double& seconds) {
    CLI::Option* old = app.add_option_function<long long>(
                              old_name, [&seconds](long long ms) { seconds = double(ms) / 1000; },
                              "deprecated: " + current->get_name() + " in seconds")
                           ->check(AtLeast(1))
                           ->group(kGroup);
    Add(current, old, [&seconds] { return detail::NumberText(seconds) + " (seconds)"; });
    return old;
  }

  // `old_name` is another name of `current`: it sets `value` to the same text, checked by
  // `check` (the one `current` has).
  CLI::Option* AddAlias(CLI::App& app, CLI::Option* current, const std::string& old_name,
                        std::string& value, const CLI::Validator& check) {
    CLI::Option* old = app.add_option(old_name, value, "deprecated: " + current->get_name())
                           ->check(check)
                           ->group(kGroup);
    Add(current, old, [&value] { return value; });
    return old;
  }

  // One line on stderr for each old spelling the command line used.
  void Warn(std::string_view tool) const {
    for (const Alias& alias : aliases_) {
      if (alias.old->count() == 0) continue;
      std::fprintf(stderr, "%.*s: warning: %s is deprecated; use %s %s\n",
                   static_cast<int>(tool.size()), tool.data(), alias.old->get_name().c_str(),
                   alias.current->get_name().c_str(), alias.value_text().c_str());
    }
  }

 private:
  struct Alias {
    CLI::Option* current;
    CLI::Option* old;
    std::function<std::string()> value_text;  // the value, as the new option writes it
  };

  void Add(CLI::Option* current, CLI::Option* old, std::function<std::string()> value_text) {
    old->excludes(current);
    current->remove_excludes(old);  // CLI11 excludes both ways; the new option's help line
                                    // would name the old one
    aliases_.push_back({current, old, std::move(value_text)});
  }

  std::vector<Alias> aliases_;
};

}  // namespace tilefeed::tools
