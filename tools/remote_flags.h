#pragma once

// Command-line flags for datasets read over HTTP(S) or S3 (tilefeed/loader/remote.h), shared by the
// tools that take a dataset location: --remote cache-dir=DIR,cache-limit=SIZE,s3-endpoint=URL,
// s3-addressing=...,remote-retries=N,remote-in-flight=N (the shared option table's group),
// plus the standard AWS environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN or AWS_PROFILE's ~/.aws/credentials; AWS_REGION or AWS_DEFAULT_REGION) and
// shared credentials file, which only tools read. Header-only; tools/ is a folder
// of executables, not a library.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "tilefeed/loader/remote.h"
#include "tools/cli_checks.h"
#include "tools/option_flags.h"

namespace tilefeed::tools {

// --remote KEY=VALUE,..., the shared option table's group (loader::kRemote), into `o`.
inline void AddRemoteFlags(CLI::App& app, loader::RemoteOptions& o) {
  const auto& k = loader::kRemoteKeys;
  AddGroupOption(
      app, loader::kRemote,
      {BindKey(k[0], o.cache_dir), BindKey(k[1], o.cache_limit), BindKey(k[2], o.s3_endpoint),
       BindKey(k[3], o.s3_addressing), BindKey(k[4], o.retries), BindKey(k[5], o.max_in_flight)});
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
  const auto trim = [](const std::string& s) {
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
// AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, when no --remote s3-endpoint= is given.
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

// The options the flags gave, with the AWS environment's keys, region and endpoint.
inline loader::RemoteOptions ToRemoteOptions(loader::RemoteOptions o) {
  ReadAwsEnvironment(o);
  o.warn = [](const std::string& line) { std::fprintf(stderr, "warning: %s\n", line.c_str()); };
  return o;
}

}  // namespace tilefeed::tools
