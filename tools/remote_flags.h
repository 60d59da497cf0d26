#pragma once

// Command-line flags for datasets read over HTTP(S) or S3 (tilefeed/loader/remote.h), shared by the
// tools that take a dataset location: --remote cache-dir=DIR,cache-limit=SIZE,s3-endpoint=URL,
// s3-addressing=...,remote-retries=N,remote-in-flight=N (the shared option table's group),
// plus the AWS environment (loader::WithAwsEnvironment). Header-only; tools/ is a folder
// of executables, not a library.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <utility>

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

// The options the flags gave, with the AWS environment's keys, region and endpoint.
inline loader::RemoteOptions ToRemoteOptions(loader::RemoteOptions o) {
  o = loader::WithAwsEnvironment(std::move(o));
  o.warn = [](const std::string& line) { std::fprintf(stderr, "warning: %s\n", line.c_str()); };
  return o;
}

}  // namespace tilefeed::tools
