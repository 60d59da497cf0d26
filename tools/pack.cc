// tilefeed-pack: packs an ImageFolder or a CIFAR-10 binary directory into record shards
// (docs/shard-format.md) with loader::PackDataset, showing progress, and prints a summary
// that lists every sample left out. The output is byte-identical for the same input.
// --codec picks one encoding (loader::PackCodec); with jpeg-index and the coefficient codecs
// the summary counts the files stored as they came.

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <string>

#include "loader/file_io.h"
#include "loader/option_specs.h"
#include "loader/shard_writer.h"
#include "metrics/cli.h"
#include "tilefeed/loader/dataset.h"
#include "tools/cli_checks.h"
#include "tools/option_flags.h"
#include "tools/remote_flags.h"

namespace {

namespace fs = std::filesystem;
namespace loader = tilefeed::loader;
namespace codecs = tilefeed::codecs;
using Clock = std::chrono::steady_clock;

// --codec's values, one per encoding, in loader::PackCodec's order (as the option table's
// choices are in their enums').
constexpr const char* kCodecs[] = {"jpeg", "jpeg-index", "coefficients-fast", "coefficients-small",
                                   "raw"};

// User + system CPU seconds of this process so far (all its threads).
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

std::string Hms(double seconds) {
  const long long s = std::llround(seconds);
  char text[32];
  std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

// Progress and ETA on stderr, at most once a second: a line redrawn in place when stderr is a
// terminal; otherwise nothing, unless --progress asks for one plain line a second.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool forced)
      : live_(isatty(STDERR_FILENO) != 0), enabled_(live_ || forced) {}

  void operator()(const loader::PackProgress& p) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const bool last = p.samples_done == p.samples_total;
    if (!last && now - last_print_ < kInterval) return;
    last_print_ = now;
    const double rate = p.seconds > 0 ? double(p.samples_done) / p.seconds : 0;
    const double eta = rate > 0 ? double(p.samples_total - p.samples_done) / rate : 0;
    std::fprintf(stderr,
                 "%spack: %llu/%llu samples (%.1f%%), %llu shards, %.0f samples/s, ETA %s%s",
                 live_ ? "\r" : "", static_cast<unsigned long long>(p.samples_done),
                 static_cast<unsigned long long>(p.samples_total),
                 p.samples_total ? 100.0 * double(p.samples_done) / double(p.samples_total) : 100.0,
                 static_cast<unsigned long long>(p.shards_written), rate, Hms(eta).c_str(),
                 live_ && !last ? " " : "\n");
    std::fflush(stderr);
  }

 private:
  static constexpr auto kInterval = std::chrono::seconds(1);
  bool live_;
  bool enabled_;
  Clock::time_point last_print_{};
};

struct Args {
  std::string src;
  std::string out;
  std::string shard_size = "128MiB";
  std::string codec = "auto";
  std::string raw_size;
  std::string format = "auto";
  std::string split = "train";
  int workers = 0;
  bool force = false;
  int interval_width = codecs::TranscodeOptions{}.interval_width;
  bool progress = false;
  tilefeed::metrics::Flags metrics;
  loader::RemoteOptions remote;
};

// SRC, OUT and how the source is read.
void AddSourceFlags(CLI::App& app, Args& args) {
  app.add_option("SRC", args.src,
                 "Dataset, found by the same rules as train --data: an ImageFolder, a root with "
                 "train/ and val/ (--split picks one), CIFAR-10's binary directory, WebDataset "
                 ".tar shards (a directory, a .tar, a brace pattern), or shards; local or a URL")
      ->required()
      ->check(tilefeed::tools::DatasetLocationCheck());
  app.add_option("OUT", args.out, "output directory for the shards and the manifest")->required();
  app.add_option("--format", args.format, "source format (auto: detected)")
      ->check(CLI::IsMember({"auto", "imagefolder", "cifar", "cifar10", "shards", "tar"}))
      ->capture_default_str();
  tilefeed::tools::AddOption(app, loader::kSplit, args.split);
  tilefeed::tools::AddOption(app, loader::kPackWorkers, args.workers);
  app.add_flag("--force", args.force, "replace a pack in a non-empty OUT");
  app.add_flag("--progress", args.progress,
               "progress and ETA on stderr once a second even when it is not a terminal "
               "(on a terminal they are always shown)");
  tilefeed::tools::AddMetricsFlags(app, args.metrics);
  tilefeed::tools::AddRemoteFlags(app, args.remote);
}

// How the records are stored.
void AddCodecFlags(CLI::App& app, Args& args) {
  app.add_option("--shard-size", args.shard_size, "target shard size (e.g. 128MiB, 64M, 1GiB)")
      ->capture_default_str();
  app.add_option("--codec", args.codec,
                 "jpeg: the files' bytes as they are (JPEG and PNG alike). jpeg-index: each "
                 "JPEG transcoded losslessly (same pixels) to baseline with restart markers on "
                 "a grid and stored with an index of its restart intervals, so the loader "
                 "entropy-decodes only what a crop covers (metadata such as EXIF is dropped; "
                 "packing takes longer). coefficients-fast: each JPEG's DCT coefficients, read "
                 "without entropy decoding (same pixels, ~1.9x the JPEG bytes, the fastest to "
                 "read). coefficients-small: the same, Huffman-coded (~1.06x the bytes, ~0.6x "
                 "coefficients-fast's speed). raw: LZ4 raw uint8 HWC, JPEGs decoded to "
                 "--raw-size. Files an encoding cannot take are stored as they came. auto: raw "
                 "for pixels (CIFAR, raw shards), else jpeg. bench/RESULTS-coef.md")
      ->check(CLI::IsMember(
          {"auto", "jpeg", "jpeg-index", "coefficients-fast", "coefficients-small", "raw"}))
      ->capture_default_str();
  app.add_option("--raw-size", args.raw_size, "WxH that JPEGs are resized to with --codec raw");
  app.add_option("--interval-width", args.interval_width,
                 "--codec jpeg-index: target restart-interval width in pixels (wider: fewer "
                 "markers; narrower: crops skip more)")
      ->check(tilefeed::tools::Between(8, 65535))
      ->capture_default_str();
}

// The pack options the flags give, before the source is known; nullopt after one line for
// a bad value.
std::optional<loader::PackOptions> PackOptionsOf(const Args& args) {
  loader::PackOptions options;
  options.output_dir = args.out;
  options.workers = args.workers;
  options.force = args.force;
  options.transcode.interval_width = args.interval_width;
  const char* shard_size = args.shard_size.c_str();
  const std::optional<std::uint64_t> shard_bytes = loader::ParseByteSize(args.shard_size);
  if (!shard_bytes) {
    std::fprintf(stderr, "tilefeed-pack: bad --shard-size '%s'\n", shard_size);
    return std::nullopt;
  }
  options.shard_bytes = *shard_bytes;
  if (options.shard_bytes == 0) {  // would start a new shard after every record
    std::fprintf(stderr, "tilefeed-pack: --shard-size must be above 0, got '%s'\n", shard_size);
    return std::nullopt;
  }
  if (args.raw_size.empty()) return options;
  if (args.codec != "raw") {
    std::fprintf(stderr,
                 "tilefeed-pack: --raw-size resizes images to raw pixels; it needs --codec raw "
                 "(the codec is %s)\n",
                 args.codec.c_str());
    return std::nullopt;
  }
  char x = 0;
  char extra = 0;
  if (std::sscanf(args.raw_size.c_str(), "%d%c%d%c", &options.raw_width, &x, &options.raw_height,
                  &extra) != 3 ||
      (x != 'x' && x != 'X') || options.raw_width <= 0 || options.raw_height <= 0 ||
      options.raw_width > 65535 || options.raw_height > 65535) {
    std::fprintf(stderr, "tilefeed-pack: bad --raw-size '%s' (want WxH, e.g. 32x32)\n",
                 args.raw_size.c_str());
    return std::nullopt;
  }
  return options;
}

// Sets options.codec from --codec (auto: raw for pixels, else jpeg) for what `opened`
// holds; false after one line for a codec that does not fit it.
bool ChooseCodec(const Args& args, const loader::OpenedDataset& opened,
                 loader::PackOptions& options) {
  // Pixels stay pixels: CIFAR-10 and raw shards hold no files to store as they are.
  const auto* shards = dynamic_cast<const loader::ShardDataset*>(opened.source.get());
  const bool pixels = opened.location.kind == loader::DatasetKind::kCifar10 ||
                      (shards != nullptr && shards->codec() == loader::ShardCodec::kLz4Raw);
  const std::string codec = args.codec != "auto" ? args.codec : pixels ? "raw" : "jpeg";
  if (pixels && codec != "raw") {
    std::fprintf(stderr, "tilefeed-pack: %s holds pixels, not image files; use --codec raw\n",
                 args.src.c_str());
    return false;
  }
  options.codec =
      static_cast<loader::PackCodec>(std::find(kCodecs, std::end(kCodecs), codec) - kCodecs);
  if (!pixels && codec == "raw" && args.raw_size.empty()) {
    std::fprintf(stderr, "tilefeed-pack: --codec raw on JPEG files needs --raw-size WxH\n");
    return false;
  }
  return true;
}

// Opens SRC as the flags say; nullopt after one line.
std::optional<loader::OpenedDataset> OpenSource(const Args& args) {
  loader::DatasetOptions dataset_options;
  dataset_options.split = *loader::ParseSplit(args.split);
  dataset_options.remote = tilefeed::tools::ToRemoteOptions(args.remote);
  if (args.format != "auto") {
    dataset_options.kind =
        loader::ParseDatasetKind(args.format == "cifar" ? "cifar10" : args.format);
  }
  try {
    loader::OpenedDataset opened = loader::OpenDataset(args.src, dataset_options);
    for (const std::string& note : opened.notes) {
      std::fprintf(stderr, "warning: %s\n", note.c_str());
    }
    return opened;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilefeed-pack: %s\n", e.what());
    return std::nullopt;
  }
}

// --codec jpeg-index: what the transcoding did, and the files stored as they came, by category.
void PrintIndexed(const loader::PackResult& result) {
  const double given = double(result.indexed_source_bytes);
  const double stored = double(result.indexed_stored_bytes);
  const double index = double(result.index_bytes);
  std::printf(
      "jpeg index: %llu files transcoded and indexed: %.1f MB as given, %.1f MB stored "
      "(%+.2f%%: JPEG %+.2f%%, index %+.2f%%)\n",
      static_cast<unsigned long long>(result.indexed), given / 1e6, stored / 1e6,
      given > 0 ? 100 * (stored - given) / given : 0.0,
      given > 0 ? 100 * (stored - index - given) / given : 0.0,
      given > 0 ? 100 * index / given : 0.0);
  std::map<std::string, std::size_t> by_category;
  for (const auto& s : result.not_indexed) ++by_category[s.category];
  std::printf("%zu stored as they came (not transcoded; decoded the ordinary way)%s\n",
              result.not_indexed.size(), result.not_indexed.empty() ? "" : ":");
  for (const auto& [category, count] : by_category) {
    std::printf("  %zu stored as they came: %s\n", count, category.c_str());
  }
}

// The coefficient codecs: the size ratio, and how many files were stored as they came.
void PrintCoefficients(const loader::PackResult& result) {
  const double given = double(result.indexed_source_bytes);
  const double stored = double(result.indexed_stored_bytes);
  std::printf(
      "coefficients: %llu files stored as coefficients: %.1f MB as given, %.1f MB "
      "stored (%.2fx); %zu stored as they came%s\n",
      static_cast<unsigned long long>(result.indexed), given / 1e6, stored / 1e6,
      given > 0 ? stored / given : 0.0, result.not_indexed.size(),
      result.not_indexed.empty() ? "" : ":");
}

// The summary: records, rates, the manifest, every sample left out and the codec's notes.
void PrintResult(const loader::PackResult& result, const loader::PackOptions& options) {
  std::printf("packed %llu records into %llu shards, %.1f MB in %.2f s (%.0f records/s)\n",
              static_cast<unsigned long long>(result.records),
              static_cast<unsigned long long>(result.shards), double(result.bytes) / 1e6,
              result.seconds, result.seconds > 0 ? double(result.records) / result.seconds : 0.0);
  const double cpu = CpuSeconds();
  std::printf("CPU %.2f s on %d workers: %.0f records per CPU-second\n", cpu,
              options.workers > 0 ? options.workers : loader::detail::UsableCores(),
              cpu > 0 ? double(result.records) / cpu : 0.0);
  std::printf("manifest: %s\n", result.manifest_path.c_str());
  std::printf("skipped %zu unreadable samples%s\n", result.skipped.size(),
              result.skipped.empty() ? "" : ":");
  for (const auto& s : result.skipped) {
    std::printf("  skipped %s: %s\n", s.where.c_str(), s.reason.c_str());
  }
  if (options.codec == loader::PackCodec::kJpegIndex) PrintIndexed(result);
  if (options.codec == loader::PackCodec::kCoefficientsFast ||
      options.codec == loader::PackCodec::kCoefficientsSmall) {
    PrintCoefficients(result);
  }
  for (const auto& s : result.not_indexed) {
    std::printf("  as it came %s: %s\n", s.where.c_str(), s.reason.c_str());
  }
  if (options.codec == loader::PackCodec::kJpeg) {
    std::printf(
        "jpeg codec: files were stored as they are, not decoded; one that does not "
        "decode will be reported by the loader when it is read.\n");
    for (const auto& s : result.not_jpeg) {
      std::printf("  suspect %s: %s\n", s.where.c_str(), s.reason.c_str());
    }
  }
}

// Packs `opened` with progress and metrics, then prints the summary; returns the exit code.
int Pack(const Args& args, const CLI::App& app, const loader::OpenedDataset& opened,
         const loader::PackOptions& options) {
  try {
    const loader::Source* source = opened.source.get();
    std::printf("tilefeed-pack: %s -> %s, codec %s, shards of %llu bytes\n", opened.summary.c_str(),
                args.out.c_str(), kCodecs[static_cast<int>(options.codec)],
                static_cast<unsigned long long>(options.shard_bytes));
    std::fflush(stdout);
    tilefeed::metrics::Session metrics = tilefeed::metrics::Open(
        args.metrics, {"tilefeed-pack", tilefeed::metrics::OptionsOf(app), args.src, source->size(),
                       source->class_names().size(), 0, 1, 0});
    ProgressPrinter printer(args.progress);
    const loader::PackResult result =
        loader::PackDataset(*source, options, [&](const loader::PackProgress& p) {
          printer(p);
          if (metrics) metrics.writer->SetProgress(p.samples_done, p.bytes_written);
        });
    metrics.Finish("completed");
    PrintResult(result, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ntilefeed-pack: %s%s\n", e.what(),
                 std::strstr(e.what(), std::strerror(EFBIG)) != nullptr
                     ? " (the file-size limit, ulimit -f, is smaller than the output)"
                     : "");
    return 1;
  }
  return 0;
}

// The tool; main() adds the last line for anything it did not catch.
int Main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) the kernel would kill us with SIGXFSZ mid-write and
  // leave a .tmp behind; ignored, the write fails with EFBIG, the pack reports it and the
  // shard writer removes its temporary file.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "tilefeed-pack: packs a dataset (an ImageFolder root/<class>/<image>, a root with train/\n"
      "and val/ splits, CIFAR-10's binary directory, WebDataset .tar shards, or other shards;\n"
      "also http(s):// and s3:// locations of tars or shards) into checksummed record\n"
      "shards and a manifest that tilefeed's ShardDataset reads. Output is byte-identical for\n"
      "the same input."};
  Args args;
  AddSourceFlags(app, args);
  AddCodecFlags(app, args);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "tilefeed-pack")) return *rc;
  std::optional<loader::PackOptions> options = PackOptionsOf(args);
  if (!options) return 2;
  const std::optional<loader::OpenedDataset> opened = OpenSource(args);
  if (!opened) return 1;
  if (!ChooseCodec(args, *opened, *options)) return 2;
  return Pack(args, app, *opened, *options);
}

}  // namespace

int main(int argc, char** argv) {
  return tilefeed::tools::RunMain("tilefeed-pack", Main, argc, argv);
}
