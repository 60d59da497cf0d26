#pragma once

// Command-line flags for datasets read over HTTP(S) or S3 (tilefeed/loader/remote.h), shared by the
// tools that take a dataset location: --cache-dir, --cache-limit, --s3-endpoint and
// --s3-addressing, --remote-retries, --remote-in-flight, plus the standard AWS environment
// variables and shared credentials file, which only tools read. Header-only; tools/ is a folder
// of executables, not a library.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
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
  std::string s3_addressing = "auto";
  int retries = loader::RemoteOptions{}.retries;
  int in_flight = loader::RemoteOptions{}.max_in_flight;
};

inline void AddRemoteFlags(CLI::App& app, RemoteFlags& flags) {
  app.add_option("--cache-dir", flags.cache_dir,
                 "http(s)/s3 datasets: on-disk cache of fetched blocks, shared by the "
                 "processes of this host (default: no cache)");
  app.add_option("--cache-limit", flags.cache_limit,
                 "size bound of --cache-dir (e.g. 20GiB); least recently used blocks go first")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            std::uint64_t bytes = 0;
            if (ParseSize(text, bytes)) return {};
            return "must be a size such as 20GiB, 512M or 1000000 (bytes), got '" + text + "'";
          },
          "SIZE"))
      ->capture_default_str();
  app.add_option("--s3-endpoint", flags.s3_endpoint,
                 "s3:// datasets: S3-compatible endpoint URL (e.g. http://minio:9000); default "
                 "$AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS. Keys from AWS_ACCESS_KEY_ID, "
                 "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or AWS_PROFILE's ~/.aws/credentials; "
                 "region from AWS_REGION or AWS_DEFAULT_REGION (default us-east-1)");
  app.add_option("--s3-addressing", flags.s3_addressing,
                 "s3:// datasets: bucket in the host name (virtual) or in the path (path); auto: "
                 "virtual on AWS for DNS-safe bucket names, path elsewhere")
      ->check(CLI::IsMember({"auto", "virtual", "path"}))
      ->capture_default_str();
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

// The sections of an AWS INI file (~/.aws/credentials, ~/.aws/config): section -> key -> value.
// Missing or unreadable: empty.
inline std::map<std::string, std::map<std::string, std::string>> ReadAwsIni(
    const std::string& path) {
  std::map<std::string, std::map<std::string, std::string>> sections;
  std::ifstream in(path);
  std::string line, section;
  const auto trim = [](std::string s) {
    const std::size_t b = s.find_first_not_of(" \t\r");
    const std::size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos)
      sections[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return sections;
}

inline std::string EnvOr(const char* name, const std::string& fallback = {}) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::string(v) : fallback;
}

// The AWS key, region and endpoint as the AWS CLI finds them: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else the AWS_PROFILE (default "default")
// section of AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials); AWS_REGION, else
// AWS_DEFAULT_REGION, else the profile's region in AWS_CONFIG_FILE (default ~/.aws/config);
// AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, when no --s3-endpoint is given.
inline void ReadAwsEnvironment(loader::RemoteOptions& o) {
  const std::string home = EnvOr("HOME");
  const std::string profile = EnvOr("AWS_PROFILE", "default");
  o.aws_access_key_id = EnvOr("AWS_ACCESS_KEY_ID");
  o.aws_secret_access_key = EnvOr("AWS_SECRET_ACCESS_KEY");
  o.aws_session_token = EnvOr("AWS_SESSION_TOKEN");
  if (o.aws_access_key_id.empty() && !home.empty()) {
    auto ini = ReadAwsIni(EnvOr("AWS_SHARED_CREDENTIALS_FILE", home + "/.aws/credentials"));
    auto& keys = ini[profile];
    o.aws_access_key_id = keys["aws_access_key_id"];
    o.aws_secret_access_key = keys["aws_secret_access_key"];
    o.aws_session_token = keys["aws_session_token"];
  }
  std::string region = EnvOr("AWS_REGION", EnvOr("AWS_DEFAULT_REGION"));
  if (region.empty() && !home.empty()) {
    auto ini = ReadAwsIni(EnvOr("AWS_CONFIG_FILE", home + "/.aws/config"));
    region = ini[profile == "default" ? profile : "profile " + profile]["region"];
  }
  if (!region.empty()) o.aws_region = region;
  if (o.s3_endpoint.empty())
    o.s3_endpoint = EnvOr("AWS_ENDPOINT_URL_S3", EnvOr("AWS_ENDPOINT_URL"));
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
  using Addressing = loader::RemoteOptions::S3Addressing;
  o.s3_addressing = flags.s3_addressing == "virtual" ? Addressing::kVirtualHosted
                    : flags.s3_addressing == "path"  ? Addressing::kPath
                                                     : Addressing::kAuto;
  ReadAwsEnvironment(o);
  return o;
}

}  // namespace tilefeed::tools
