// tilefeed-inspect: summarizes a dataset (a pack in detail: shards, records, classes, codec,
// sizes) and checks a pack's shard headers and indexes; --verify reads and decodes every
// record or sample, and --against SRC compares a pack's pixels with its source's. Each bad
// one is a line "BAD <where>: <reason>" and exit status 1 (docs/datasets.md, "Verifying";
// docs/shard-format.md).

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "codecs/jpeg_coefficients.h"
#include "codecs/jpeg_index.h"
#include "codecs/png.h"
#include "loader/option_specs.h"
#include "loader/shard_source.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/loader/dataset.h"
#include "tools/cli_checks.h"
#include "tools/option_flags.h"
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

// One decoder of each kind the loader uses, for whole-image decodes.
struct WholeDecoders {
  tilefeed::codecs::IndexedJpegDecoder indexed;
  tilefeed::codecs::CoefficientDecoder coefficients;
  tilefeed::codecs::PngDecoder png;
};

// Decodes a sample whole, at full size, the way the loader decodes its codec: the pixels
// every crop of it is taken from. Throws on a sample that does not decode.
std::vector<std::uint8_t> DecodeWhole(WholeDecoders& d, const loader::SampleInfo& info,
                                      std::span<const std::byte> bytes) {
  namespace codecs = tilefeed::codecs;
  std::vector<std::uint8_t> pixels;
  codecs::CropPlan plan;
  codecs::PixelView out;
  // Sizes the output for `image`; call before the decode that uses plan and out.
  auto whole = [&](const codecs::ImageInfo& image) {
    pixels.assign(std::size_t(image.width) * image.height * 3, 0);
    plan = codecs::CropPlan{codecs::Rect{0, 0, image.width, image.height}};
    out = codecs::PixelView::Interleaved(pixels.data(), image.width, image.height);
  };
  if (info.codec == loader::SampleCodec::kIndexedJpeg) {
    if (info.index_size == 0 || info.index_size >= bytes.size()) {
      throw std::runtime_error("interval index does not fit the record");
    }
    const auto jpeg = bytes.subspan(info.index_size);
    const codecs::JpegIntervalIndex index = codecs::ParseIndex(bytes.first(info.index_size), jpeg);
    whole(codecs::ImageInfo{index.width, index.height});
    d.indexed.DecodeInto(jpeg, index, plan, out);
  } else if (info.codec == loader::SampleCodec::kCoefficients) {
    whole(codecs::ReadCoefficientInfo(bytes));
    d.coefficients.DecodeInto(bytes, plan, out);
  } else if (info.codec != loader::SampleCodec::kEncoded) {
    throw std::runtime_error("a raw tensor (resized at pack time), not an image file");
  } else if (codecs::IsPng(bytes)) {
    whole(d.png.ReadInfo(bytes));
    d.png.DecodeInto(bytes, plan, out);
  } else {
    whole(d.indexed.decoder().ReadInfo(bytes));
    d.indexed.decoder().DecodeInto(bytes, plan, out);
  }
  return pixels;
}

// Decodes sample `index` of `source` whole into `pixels`; returns why not, or "".
std::string TryDecodeWhole(WholeDecoders& d, const loader::Source& source, std::size_t index,
                           std::vector<std::byte>& buffer, std::vector<std::uint8_t>& pixels) {
  try {
    const loader::SampleInfo info = source.Read(index, buffer);
    pixels = DecodeWhole(d, info, buffer);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// How record `index` of `pack` and sample `index` of `src` differ, or an empty reason.
// Both failing to decode is a note (the pack kept a bad file as it came), not a failure.
loader::ShardProblem CompareWhole(WholeDecoders& d, const loader::Source& pack,
                                  const loader::Source& src, std::size_t index,
                                  std::vector<std::byte>& buffer) {
  std::vector<std::uint8_t> stored;
  std::vector<std::uint8_t> given;
  const std::string record_error = TryDecodeWhole(d, pack, index, buffer, stored);
  const std::string source_error = TryDecodeWhole(d, src, index, buffer, given);
  const std::string where = pack.Describe(index);
  if (!record_error.empty() && !source_error.empty()) {
    return {where, "neither the record nor " + src.Describe(index) + " decodes: " + record_error,
            true};
  }
  if (!record_error.empty()) return {where, "the record does not decode: " + record_error, false};
  if (!source_error.empty()) {
    return {where, "the record decodes but " + src.Describe(index) + " does not: " + source_error,
            false};
  }
  if (stored.size() != given.size()) return {where, "image size differs from the source's", false};
  std::size_t differ = 0;
  int worst = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    const int delta = std::abs(int(stored[i]) - int(given[i]));
    differ += delta != 0;
    worst = std::max(worst, delta);
  }
  if (differ == 0) return {where, "", false};
  return {where,
          "pixels differ from " + src.Describe(index) + "'s: " + std::to_string(differ) +
              " values, by up to " + std::to_string(worst),
          false};
}

// --verify --against SRC: every record's whole decode against SRC's sample's. Records and
// samples pair by index, so the pack must hold every sample of SRC (none skipped).
std::vector<loader::ShardProblem> VerifyAgainst(const loader::Source& pack, const std::string& src,
                                                const loader::DatasetOptions& options) {
  const loader::OpenedDataset opened = loader::OpenDataset(src, options);
  if (opened.source->size() != pack.size()) {
    throw std::runtime_error("--against " + src + ": " + std::to_string(opened.source->size()) +
                             " samples, the pack " + std::to_string(pack.size()) +
                             " records; records pair with samples by index, so the pack "
                             "must hold every sample (none skipped at pack time)");
  }
  WholeDecoders decoders;
  std::vector<std::byte> buffer;
  std::vector<loader::ShardProblem> problems;
  for (std::size_t i = 0; i < pack.size(); ++i) {
    loader::ShardProblem problem = CompareWhole(decoders, pack, *opened.source, i, buffer);
    if (!problem.reason.empty()) problems.push_back(std::move(problem));
  }
  return problems;
}

// A dataset that is not a pack: its summary and identity, and with --verify every sample
// read and decoded. Returns the exit code.
int InspectOther(const std::string& path, const loader::DatasetOptions& options, bool verify) {
  const loader::OpenedDataset opened = loader::OpenDataset(path, options);
  std::printf("dataset    %s\n", opened.summary.c_str());
  std::printf("identity   %s\n", ToString(loader::Identify(*opened.source)).c_str());
  for (const std::string& note : opened.notes) std::printf("note       %s\n", note.c_str());
  if (!verify) return 0;
  const auto start = Clock::now();
  return Report(loader::VerifySamples(*opened.source, Progress()), opened.source->size(), 0, start);
}

// The manifest's summary: codec, records, classes, shard sizes and the first shards (all
// with `all_shards`). Returns the bytes of all shards.
std::uint64_t PrintManifest(const loader::ShardManifest& manifest, bool all_shards) {
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
  std::printf("codec      %s\n", loader::detail::CodecName(manifest.codec));
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
  return total_bytes;
}

// Without --verify: opening checks every shard's header and footer index (cheap,
// O(shards)). Returns the exit code.
int CheckIndexes(const std::string& path, const loader::RemoteOptions& remote) {
  try {
    const auto dataset = loader::ShardDataset::Open(path, {.remote = remote});
    std::printf("indexes    OK (%zu shards opened)\n", dataset->shard_count());
  } catch (const std::exception& e) {
    std::printf("indexes    BAD: %s\n", e.what());
    return 1;
  }
  return 0;
}

// --verify on a pack: every record, and with --against every record against its source
// sample. Returns the exit code.
int VerifyPack(const std::string& path, const loader::ShardManifest& manifest,
               std::uint64_t total_bytes, const std::string& against,
               const loader::DatasetOptions& options) {
  const auto start = Clock::now();
  std::vector<loader::ShardProblem> problems =
      loader::VerifyShards(path, Progress(), options.remote);
  if (!against.empty()) {
    try {
      const auto dataset = loader::ShardDataset::Open(path, {.remote = options.remote});
      for (auto& p : VerifyAgainst(*dataset, against, options)) problems.push_back(std::move(p));
      std::printf("against    %s: every record decoded whole and compared\n", against.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tilefeed-inspect: %s\n", e.what());
      return 1;
    }
  }
  return Report(problems, manifest.records, total_bytes, start);
}

// The tool; main() adds the last line for anything it did not catch.
int Main(int argc, char** argv) {
  CLI::App app{
      "tilefeed-inspect: summarizes a tilefeed shard dataset and checks its shards' headers\n"
      "and indexes; --verify also checks every record's checksum, every JPEG interval\n"
      "index (tilefeed-pack --codec jpeg-index) against its JPEG, and that every image decodes."};
  std::string path;
  std::string split = "train";
  bool verify = false;
  bool all_shards = false;
  std::string against;
  tilefeed::loader::RemoteOptions remote_flags;
  app.add_option("PATH", path,
                 "shard directory or its tilefeed-manifest.txt; any other dataset (found by the "
                 "same rules as train --data) is summarized")
      ->required()
      ->check(tilefeed::tools::DatasetLocationCheck());
  tilefeed::tools::AddOption(app, loader::kSplit, split);
  app.add_flag("--verify", verify,
               "read every record and check its checksum, its JPEG interval index if it has "
               "one, and that its image decodes (JPEG entropy data, PNG through IEND)");
  app.add_flag("--all-shards", all_shards, "list every shard (default: the first 20)");
  app.add_option("--against", against,
                 "with --verify on a pack: the dataset it was made from; every record is "
                 "decoded whole and compared pixel for pixel with its source sample's decode")
      ->needs("--verify");
  tilefeed::tools::AddRemoteFlags(app, remote_flags);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "tilefeed-inspect")) return *rc;

  loader::ShardManifest manifest;
  loader::DatasetOptions options;
  try {
    options.remote = tilefeed::tools::ToRemoteOptions(remote_flags);
    options.split = *loader::ParseSplit(split);
    const loader::DatasetLocation location = loader::ResolveDataset(path, options);
    if (location.kind != loader::DatasetKind::kShards) return InspectOther(path, options, verify);
    path = location.path;
    manifest = loader::ReadShardManifest(path, options.remote);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilefeed-inspect: %s\n", e.what());
    return 1;
  }
  const std::uint64_t total_bytes = PrintManifest(manifest, all_shards);
  if (!verify) return CheckIndexes(path, options.remote);
  return VerifyPack(path, manifest, total_bytes, against, options);
}

}  // namespace

int main(int argc, char** argv) {
  return tilefeed::tools::RunMain("tilefeed-inspect", Main, argc, argv);
}
