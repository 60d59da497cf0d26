// tilefeed-inspect: summarizes a shard dataset (shards, records, classes, codec, sizes,
// per-shard counts) and checks every shard's header and index; with --verify it also
// reads every record, checks its checksum, an indexed record's interval index against its
// JPEG, and that every image record decodes (a JPEG's entropy-coded data, a PNG through
// IEND), and exits non-zero naming each bad record as "<shard file>#<record>: <reason>".
// A PNG stored in a JPEG-codec record decodes, so it is a note, not a failure. Any other
// dataset (a folder, tars, local or over http(s)/s3) is summarized, and with --verify
// every sample is read and its image decoded the same way ("<sample>: <reason>").

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/shard_source.h"
#include "tools/cli_checks.h"
#include "tools/remote_flags.h"

namespace {

namespace loader = tilefeed::loader;
using Clock = std::chrono::steady_clock;

// Prints the problems and the verdict line; returns the exit status.
int Report(const std::vector<loader::ShardProblem>& problems, std::uint64_t checked,
           std::uint64_t bytes, Clock::time_point start) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::size_t failures = 0;
  for (const loader::ShardProblem& p : problems) {
    std::printf("%s %s: %s\n", p.note ? "note" : "BAD", p.where.c_str(), p.reason.c_str());
    if (!p.note) ++failures;
  }
  std::printf("verify     %s: %zu problems, %zu notes, %llu records checked in %.2f s",
              failures == 0 ? "OK" : "FAILED", failures, problems.size() - failures,
              static_cast<unsigned long long>(checked), seconds);
  if (bytes > 0) std::printf(" (%.0f MB/s)", seconds > 0 ? double(bytes) / 1e6 / seconds : 0.0);
  std::printf("\n");
  return failures == 0 ? 0 : 1;
}

// A progress line on a terminal, at most every 200 ms.
std::function<void(std::uint64_t, std::uint64_t)> Progress() {
  const bool live = isatty(STDERR_FILENO) != 0;
  return [live, last = Clock::now()](std::uint64_t done, std::uint64_t total) mutable {
    const auto now = Clock::now();
    if (!live || (now - last < std::chrono::milliseconds(200) && done != total)) return;
    last = now;
    std::fprintf(stderr, "\rverifying %llu/%llu records ", static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total));
    if (done == total) std::fprintf(stderr, "\r%40s\r", "");
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tilefeed-inspect: summarizes a tilefeed shard dataset and checks its shards' headers\n"
      "and indexes; --verify also checks every record's checksum, every JPEG interval\n"
      "index (tilefeed-pack --jpeg-index) against its JPEG, and that every image decodes."};
  std::string path;
  std::string split = "train";
  bool verify = false;
  bool all_shards = false;
  app.add_option("PATH", path,
                 "shard directory or its tilefeed-manifest.txt; any other dataset (found by the "
                 "same rules as train --data) is summarized")
      ->required()
      ->check(tilefeed::tools::DatasetLocationCheck());
  app.add_option("--split", split, "the split of a root with train/ and val/")
      ->check(CLI::IsMember({"train", "val", "test"}));
  app.add_flag("--verify", verify,
               "read every record and check its checksum, its JPEG interval index if it has "
               "one, and that its image decodes (JPEG entropy data, PNG through IEND)");
  app.add_flag("--all-shards", all_shards, "list every shard (default: the first 20)");
  tilefeed::tools::RemoteFlags remote_flags;
  tilefeed::tools::AddRemoteFlags(app, remote_flags);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "tilefeed-inspect")) return *rc;

  loader::ShardManifest manifest;
  loader::DatasetOptions options;
  try {
    options.remote = tilefeed::tools::ToRemoteOptions(remote_flags);
    options.split = *loader::ParseSplit(split);
    const loader::DatasetLocation location = loader::ResolveDataset(path, options);
    if (location.kind != loader::DatasetKind::kShards) {
      const loader::OpenedDataset opened = loader::OpenDataset(path, options);
      std::printf("dataset    %s\n", opened.summary.c_str());
      std::printf("identity   %s\n", ToString(loader::Identify(*opened.source)).c_str());
      for (const std::string& note : opened.notes) std::printf("note       %s\n", note.c_str());
      if (!verify) return 0;
      const auto start = Clock::now();
      return Report(loader::VerifySamples(*opened.source, Progress()), opened.source->size(), 0,
                    start);
    }
    path = location.path;
    manifest = loader::ReadShardManifest(path, options.remote);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilefeed-inspect: %s\n", e.what());
    return 1;
  }
  std::uint64_t total_bytes = 0;
  std::uint64_t min_bytes = UINT64_MAX;
  std::uint64_t max_bytes = 0;
  for (const auto& s : manifest.shards) {
    total_bytes += s.bytes;
    min_bytes = std::min(min_bytes, s.bytes);
    max_bytes = std::max(max_bytes, s.bytes);
  }
  const std::size_t shards = manifest.shards.size();
  std::printf("manifest   %s\n", manifest.path.c_str());
  std::printf("codec      %s\n", ToString(manifest.codec));
  std::printf("records    %llu\n", static_cast<unsigned long long>(manifest.records));
  std::printf("classes    %zu", manifest.class_names.size());
  for (std::size_t c = 0; c < std::min<std::size_t>(5, manifest.class_names.size()); ++c) {
    std::printf("%s%s", c == 0 ? "  (" : ", ", manifest.class_names[c].c_str());
  }
  std::printf("%s\n", manifest.class_names.size() > 5 ? ", ...)"
                      : manifest.class_names.empty()  ? ""
                                                      : ")");
  std::printf("shards     %zu, %.1f MB in all", shards, double(total_bytes) / 1e6);
  if (shards > 0) {
    std::printf(", %.1f / %.1f / %.1f MB min / mean / max, %.1f KB per record",
                double(min_bytes) / 1e6, double(total_bytes) / 1e6 / double(shards),
                double(max_bytes) / 1e6,
                manifest.records ? double(total_bytes) / 1e3 / double(manifest.records) : 0.0);
  }
  std::printf("\n");
  const std::size_t listed = all_shards ? shards : std::min<std::size_t>(shards, 20);
  for (std::size_t s = 0; s < listed; ++s) {
    std::printf("  %s  %llu records  %llu bytes\n", manifest.shards[s].path.c_str(),
                static_cast<unsigned long long>(manifest.shards[s].records),
                static_cast<unsigned long long>(manifest.shards[s].bytes));
  }
  if (listed < shards) std::printf("  ... %zu more (--all-shards lists them)\n", shards - listed);

  if (!verify) {
    // Opening checks every shard's header and footer index: cheap, O(shards).
    try {
      loader::ShardReadOptions read;
      read.remote = options.remote;
      const auto dataset = loader::ShardDataset::Open(path, read);
      std::printf("indexes    OK (%zu shards opened)\n", dataset->shard_count());
    } catch (const std::exception& e) {
      std::printf("indexes    BAD: %s\n", e.what());
      return 1;
    }
    return 0;
  }

  const auto start = Clock::now();
  return Report(loader::VerifyShards(path, Progress(), options.remote), manifest.records,
                total_bytes, start);
}
