#pragma once

// Command-line flags for datasets read over HTTP(S) or S3 (tilefeed/loader/remote.h), shared by the
// tools that take a dataset location: --cache-dir, --cache-limit, --s3-endpoint and
// --remote-retries, --remote-in-flight, plus the standard AWS environment variables, which only
// tools read. Header-only; tools/ is a folder of executables, not a library.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "tilefeed/loader/remote.h"
#include "tools/cli_checks.h"

namespace tilefeed::tools {

// "128MiB", "64M", "1g", "500000000": binary units unless written "KB"/"MB"/"GB".
inline bool ParseSize(std::string text, std::uint64_t& out) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) return false;
  const std::uint64_t value = std::stoull(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "k" || unit == "kib") scale = std::uint64_t{1} << 10;
  if (unit == "m" || unit == "mib") scale = std::uint64_t{1} << 20;
  if (unit == "g" || unit == "gib") scale = std::uint64_t{1} << 30;
  if (unit == "kb") scale = 1000;
  if (unit == "mb") scale = 1000 * 1000;
  if (unit == "gb") scale = 1000 * 1000 * 1000;
  if (scale == 0 || value > UINT64_MAX / scale) return false;
  out = value * scale;
  return true;
}

struct RemoteFlags {
  std::string cache_dir;
  std::string cache_limit = "10GiB";
  std::string s3_endpoint;
  int retries = loader::RemoteOptions{}.retries;
  int in_flight = loader::RemoteOptions{}.max_in_flight;
};

inline void AddRemoteFlags(CLI::App& app, RemoteFlags& flags) {
  app.add_option("--cache-dir", flags.cache_dir,
                 "http(s)/s3 datasets: on-disk cache of fetched blocks, shared by the "
                 "processes of this host (default: no cache)");
  app.add_option("--cache-limit", flags.cache_limit,
                 "size bound of --cache-dir (e.g. 20GiB); least recently used blocks go first")
      ->capture_default_str();
  app.add_option("--s3-endpoint", flags.s3_endpoint,
                 "s3:// datasets: endpoint URL (path-style, e.g. http://minio:9000); default "
                 "AWS. Keys from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION");
  app.add_option("--remote-retries", flags.retries,
                 "http(s)/s3 datasets: retries of a failed request, with backoff, before the "
                 "sample is reported bad")
      ->check(Between(0, 20))
      ->capture_default_str();
  app.add_option("--remote-in-flight", flags.in_flight,
                 "http(s)/s3 datasets: requests one read keeps in flight at once, each on its "
                 "own connection (1: one after another)")
      ->check(Between(1, 64))
      ->capture_default_str();
}

// A --data check: an existing path, or a URL or brace pattern that only opening can check.
inline CLI::Validator DatasetLocationCheck() {
  return CLI::Validator(
      [](std::string& location) -> std::string {
        if (loader::IsRemoteLocation(location) || location.find('{') != std::string::npos) {
          return {};
        }
        return CLI::ExistingPath(location);
      },
      "PATH|URL");
}

// The options the flags and the AWS environment variables give. Throws
// std::invalid_argument for a malformed --cache-limit.
inline loader::RemoteOptions ToRemoteOptions(const RemoteFlags& flags) {
  loader::RemoteOptions o;
  o.cache_dir = flags.cache_dir;
  if (!ParseSize(flags.cache_limit, o.cache_limit)) {
    throw std::invalid_argument("bad --cache-limit '" + flags.cache_limit + "'");
  }
  o.s3_endpoint = flags.s3_endpoint;
  o.retries = flags.retries;
  o.max_in_flight = flags.in_flight;
  if (const char* v = std::getenv("AWS_ACCESS_KEY_ID")) o.aws_access_key_id = v;
  if (const char* v = std::getenv("AWS_SECRET_ACCESS_KEY")) o.aws_secret_access_key = v;
  if (const char* v = std::getenv("AWS_REGION")) o.aws_region = v;
  o.warn = [](const std::string& line) { std::fprintf(stderr, "warning: %s\n", line.c_str()); };
  return o;
}

}  // namespace tilefeed::tools
