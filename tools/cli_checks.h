#pragma once

// Argument checks shared by the tools and the benchmark drivers: range validators for
// numeric options, port checks for endpoints, and the one parse call that turns any
// command-line error into one line and exit code 2.
//
//   app.add_option("--batch-size", args.batch_size, "...")->check(tools::AtLeast(1));
//   app.add_option("--tolerance", c.tolerance, "...")->check(tools::Between(0.0, 1.0));
//   if (const std::optional<int> rc = tools::ParseArgs(app, argc, argv, "train")) return *rc;
//
// A bad value is reported as "TOOL: --batch-size must be at least 1, got -1".
//
// The validators read the text before CLI11 converts it. That matters for unsigned
// options: CLI11 2.1 converts "-1" with strtoull, which wraps it to 2^64 - 1 (a job that
// "trains forever"); here it is refused as below the minimum. Integer bounds (AtLeast(1))
// also refuse "1.5"; floating bounds (AtLeast(0.0)) take any finite number.
// Header-only; tools/ is a folder of executables, not a library.

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tilefeed/transport/context.h"

namespace tilefeed::tools {

// `list` split at each `separator` ("a,,b" gives an empty entry; "" gives one).
inline std::vector<std::string> SplitList(const std::string& list, char separator) {
  std::vector<std::string> out;
  for (std::size_t begin = 0;;) {
    const std::size_t end = list.find(separator, begin);
    out.push_back(list.substr(begin, end == std::string::npos ? end : end - begin));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

namespace detail {

// `text` as CLI11 will read it (integers in base 0, like its strtoll/strtoull), or nullopt
// when it is not one. Values beyond 64 bits come back as +-huge, so range checks refuse
// them rather than CLI11's conversion.
inline std::optional<long double> ParseNumberText(const std::string& text, bool integral) {
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return std::nullopt;
  const char* begin = text.c_str() + first;
  char* end = nullptr;
  errno = 0;
  long double value = 0;
  if (!integral) {
    value = std::strtold(begin, &end);
    if (!std::isfinite(value)) return std::nullopt;
  } else if (*begin == '-') {
    const long long v = std::strtoll(begin, &end, 0);
    value = errno == ERANGE ? -HUGE_VALL : static_cast<long double>(v);
  } else {
    const unsigned long long v = std::strtoull(begin, &end, 0);
    value = errno == ERANGE ? HUGE_VALL : static_cast<long double>(v);
  }
  if (end == begin || *end != '\0') return std::nullopt;
  return value;
}

template <typename T>
std::string NumberText(T value) {
  std::ostringstream out;
  // 1e6 reads 1000000, a float 0.02f reads 0.02 (not 0.0199999995529652)
  out << std::setprecision(std::is_same_v<T, float> ? 7 : 15) << value;
  return out.str();
}

// A validator of [min, max] (either side optional) for numbers of T's kind. Its message
// starts with "must", which ParseArgs joins to the option's name.
template <typename T>
CLI::Validator RangeCheck(std::optional<T> min, std::optional<T> max, bool min_exclusive,
                          const std::string& description) {
  static_assert(std::is_arithmetic_v<T>);
  constexpr bool kIntegral = std::is_integral_v<T>;
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::optional<long double> value = ParseNumberText(text, kIntegral);
        if (!value) {
          return std::string(kIntegral ? "must be an integer" : "must be a number") + ", got '" +
                 text + "'";
        }
        // Beyond 64 bits (or a double): CLI11's conversion would clamp it to the maximum.
        using Widest = std::conditional_t<kIntegral, unsigned long long, double>;
        if (*value > static_cast<long double>(std::numeric_limits<Widest>::max())) {
          return "must be at most " + NumberText(std::numeric_limits<Widest>::max()) + ", got " +
                 text;
        }
        const bool low = min && (min_exclusive ? *value <= static_cast<long double>(*min)
                                               : *value < static_cast<long double>(*min));
        const bool high = max && *value > static_cast<long double>(*max);
        if (!low && !high) return {};
        return "must be " + description + ", got " + text;
      },
      description);
}

// The first endpoint of the comma-separated `list` that ZeroMQ would not read as it is
// written (transport::ParseEndpoint's line), or "" when every one is fine.
inline std::string EndpointProblem(const std::string& list, bool bind) {
  for (const std::string& endpoint : bind ? std::vector{list} : SplitList(list, ',')) {
    try {
      (void)transport::ParseEndpoint(endpoint, bind);
    } catch (const std::invalid_argument& e) {
      return std::string("must be tcp://HOST:PORT, ipc://PATH or shm://NAME: ") + e.what();
    }
  }
  return {};
}

}  // namespace detail

// Numbers of min's kind (integers for an integer min) no smaller than `min`.
template <typename T>
CLI::Validator AtLeast(T min) {
  return detail::RangeCheck<T>(min, std::nullopt, false, "at least " + detail::NumberText(min));
}

// Numbers above `min` (for durations and rates, where 0 is meaningless).
template <typename T>
CLI::Validator Above(T min) {
  return detail::RangeCheck<T>(min, std::nullopt, true, "above " + detail::NumberText(min));
}

// Numbers of min's kind in [min, max].
template <typename T>
CLI::Validator Between(T min, T max) {
  return detail::RangeCheck<T>(
      min, max, false, "between " + detail::NumberText(min) + " and " + detail::NumberText(max));
}

// A comma-separated list of endpoints to connect to, each one ZeroMQ reads as written
// (transport::ParseEndpoint: tcp://HOST:PORT with PORT in 1..65535, ipc://PATH or shm://NAME;
// no SOURCE;DEST).
inline CLI::Validator ConnectEndpoints() {
  return CLI::Validator([](std::string& list) { return detail::EndpointProblem(list, false); },
                        "ENDPOINT");
}

// An endpoint to bind, as transport::ParseEndpoint accepts it: tcp://HOST:PORT with PORT in
// 1..65535, or * (or 0) for a free one, ipc://PATH or shm://NAME.
inline CLI::Validator BindEndpoint() {
  return CLI::Validator(
      [](std::string& endpoint) { return detail::EndpointProblem(endpoint, true); }, "ENDPOINT");
}

// Parses the command line. Returns nullopt to go on, or the exit code to return from main:
// 0 after --help, 2 after a usage error, which is printed as one line "TOOL: MESSAGE"; an
// argument no option takes (a misspelt or retired flag) reads "TOOL: unknown argument --shard
// (--help lists the options)".
inline std::optional<int> ParseArgs(CLI::App& app, int argc, const char* const* argv,
                                    std::string_view tool) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help: the help text, rc 0
  } catch (const CLI::ExtrasError& e) {
    // CLI11 lists the unexpected words last first; the first one is the one to name.
    const std::vector<std::string> extras = app.remaining();
    const std::string first = extras.empty() ? std::string(e.what()) : extras.front();
    std::fprintf(stderr, "%.*s: unknown argument %s (--help lists the options)\n",
                 static_cast<int>(tool.size()), tool.data(), first.c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    // A validator's "NAME: must be ..." reads as "NAME must be ...".
    const std::size_t join = message.find(": must ");
    if (join != std::string::npos && message.rfind("--", 0) == 0 && message.find(' ') > join) {
      message.erase(join, 1);
    }
    for (char& c : message) {
      if (c == '\n') c = ' ';
    }
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(tool.size()), tool.data(), message.c_str());
    return 2;
  }
}

// A duration option's seconds as milliseconds.
inline std::chrono::milliseconds Milliseconds(double seconds) {
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

// A tool's main: runs `body` and turns an exception that escapes it into one line,
// "TOOL: what", and exit code 1, so that no tool ends in std::terminate's abort.
//   int main(int argc, char** argv) { return tools::RunMain("train", Main, argc, argv); }
inline int RunMain(const char* tool, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: an unknown error\n", tool);
  }
  return 1;
}

}  // namespace tilefeed::tools
