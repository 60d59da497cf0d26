// loader_bench: the loader against a consumer that only touches each batch.
//
// Prints the figures users quote: images/s, MP/s, MB/s read, per-stage time per image
// (read, decode, resize), the consumer's wait (stall) share, ring occupancy, bad
// samples and peak RSS. The first --warmup batches are excluded from the rates (the
// slots fill and the page cache warms there), as the PyTorch baseline does. The last
// line is machine-readable: images_per_s=...
//
// --against DIR times --data against a second dataset (packed shards against the folder
// they were packed from) in alternating rounds on the same samples, and ends with
// ratio=... (data/against, the median of the per-round ratios).
//
// --metrics-overhead times --data with a metrics Writer (metrics/metrics.h) sampling the
// loader every --metrics interval= seconds against the same run without one, the same way
// (ratio=with/without).
//
// The loader's flags come from the shared option table (loader/option_specs.h, through
// tools/option_flags.h), spelled and bounded as in every tool and in Python.

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/median.h"
#include "loader/shard_source.h"
#include "metrics/cli.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tools/cli_checks.h"
#include "tools/option_flags.h"

namespace {

namespace loader = tilefeed::loader;
namespace tools = tilefeed::tools;
using Clock = std::chrono::steady_clock;

double PeakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Reads one byte per page, so every page of the batch is really delivered.
std::uint64_t Touch(const loader::Batch& batch) {
  std::uint64_t sum = 0;
  const auto images = batch.images();
  for (std::size_t i = 0; i < images.size(); i += 4096) sum += images[i];
  for (std::int32_t label : batch.labels()) sum += static_cast<std::uint64_t>(label);
  return sum;
}

// What an epoch order costs in randomness on shards: per batch of epoch 0, the distinct
// shards it reads and the share of its sample pairs that come from one shard, against the
// full shuffle of the same dataset.
void PrintOrderStats(const loader::ShardDataset& source, const loader::LoaderOptions& options) {
  auto stats = [&](const loader::EpochOrder& order) {
    const std::size_t shards = source.shard_count();
    std::vector<std::size_t> per_shard(shards);
    double distinct = 0, same_pairs = 0, pairs = 0;
    std::size_t batches = 0;
    for (std::size_t begin = 0; begin < order.size(); begin += options.batch_size) {
      const std::size_t end = std::min(order.size(), begin + options.batch_size);
      std::fill(per_shard.begin(), per_shard.end(), 0);
      for (std::size_t p = begin; p < end; ++p) {
        ++per_shard[source.Locate(static_cast<std::size_t>(order[p])).first];
      }
      for (std::size_t c : per_shard) {
        distinct += c > 0;
        same_pairs += double(c) * double(c - (c > 0)) / 2;
      }
      const double n = double(end - begin);
      pairs += n * (n - 1) / 2;
      ++batches;
    }
    return std::make_pair(distinct / double(batches), pairs > 0 ? same_pairs / pairs : 0);
  };
  const auto mine =
      stats(loader::EpochOrder(source.size(), options.seed, 0, options.shuffle, options.slice,
                               options.remainder, 0, options.locality));
  const auto full = stats(
      loader::EpochOrder(source.size(), options.seed, 0, true, options.slice, options.remainder));
  std::printf(
      "  order randomness  %10.2f shards per batch, %.3f of pairs in a batch from one shard "
      "(full shuffle: %.2f, %.3f; %zu shards)\n",
      mine.first, mine.second, full.first, full.second, source.shard_count());
}

// --read-only: the read stage alone, on one thread, in the loader's chunks.
int ReadOnly(const loader::Source& source, const loader::LoaderOptions& options, double seconds) {
  constexpr std::size_t kChunk = 16;
  std::vector<std::uint64_t> indices(kChunk);
  std::vector<std::vector<std::byte>> buffers(kChunk);
  std::vector<loader::ReadResult> results(kChunk);
  std::uint64_t records = 0, bytes = 0, bad = 0;
  const auto begin = Clock::now();
  double elapsed = 0;
  for (std::uint64_t epoch = 0; elapsed < seconds; ++epoch) {
    const loader::EpochOrder order(source.size(), options.seed, epoch, options.shuffle,
                                   options.slice, options.remainder, 0, options.locality);
    for (std::size_t p = 0; p < order.size() && elapsed < seconds; p += kChunk) {
      const std::size_t n = std::min(kChunk, order.size() - p);
      for (std::size_t i = 0; i < n; ++i) indices[i] = order[p + i];
      source.ReadMany(std::span(indices).first(n), std::span(buffers).first(n),
                      std::span(results).first(n));
      for (std::size_t i = 0; i < n; ++i) {
        bad += !results[i].ok;
        bytes += buffers[i].size();
      }
      records += n;
      elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
    }
  }
  std::printf(
      "  read-only         %10.0f records/s  %.1f MB/s  %.2f us per record  (%llu records, "
      "%llu bad, one thread)\n",
      double(records) / elapsed, double(bytes) / 1e6 / elapsed, 1e6 * elapsed / double(records),
      static_cast<unsigned long long>(records), static_cast<unsigned long long>(bad));
  if (const auto* shards = dynamic_cast<const loader::ShardDataset*>(&source)) {
    const std::uint64_t calls = shards->read_calls();
    std::printf("  shard reads       %10.2f records per read\n",
                calls > 0 ? double(records) / double(calls) : 0.0);
  }
  std::printf("read_records_per_s=%.0f\n", double(records) / elapsed);
  return 0;
}

// --metrics-overhead: a Writer sampling turn `which`'s loader, or null for none.
using MetricsForTurn =
    std::function<std::unique_ptr<tilefeed::metrics::Writer>(int which, loader::Loader&)>;

// --against: datasets A (--data) and B timed in alternating rounds. Round r gives both
// the same shuffle and augmentation seed (seed + r), so they decode the same samples (a
// pack keeps its folder's sample order); the order within a round swaps every round, and
// each turn is a fresh Loader whose first `warmup` batches are untimed. Load from other
// processes that comes and goes within seconds falls on both alike, which one long run of
// each does not give. Prints each round and the median of the per-round ratios A/B.
int Alternate(const std::string& name_a,
              const std::function<std::unique_ptr<loader::Source>()>& open_a,
              const std::string& name_b,
              const std::function<std::unique_ptr<loader::Source>()>& open_b,
              const loader::LoaderOptions& base, int rounds, std::size_t round_batches,
              std::size_t warmup, const MetricsForTurn& metrics_for = {}) {
  std::vector<double> rates[2];
  std::vector<double> ratios;
  std::uint64_t checksum = 0;
  std::printf("loader_bench: %s against %s, %d alternating rounds of %zu timed batches each\n",
              name_a.c_str(), name_b.c_str(), rounds, round_batches);
  for (int r = 0; r < rounds; ++r) {
    double rate[2] = {0, 0};
    for (int turn = 0; turn < 2; ++turn) {
      const int which = r % 2 == 0 ? turn : 1 - turn;
      loader::LoaderOptions options = base;
      options.seed = base.seed + static_cast<std::uint64_t>(r);
      options.epochs = 0;  // as many as the round needs
      loader::Loader run(which == 0 ? open_a() : open_b(), options);
      // Declared after `run`, so it stops sampling before the loader goes.
      std::unique_ptr<tilefeed::metrics::Writer> writer =
          metrics_for ? metrics_for(which, run) : nullptr;
      std::size_t images = 0;
      Clock::time_point start = Clock::now();
      for (std::size_t b = 0; b < warmup + round_batches; ++b) {
        if (b == warmup) start = Clock::now();
        auto batch = run.Next();
        if (!batch) batch = run.Next();  // the end of an epoch: the next one starts
        if (!batch) throw std::runtime_error("the loader ended early");
        checksum += Touch(*batch);
        if (b >= warmup) images += batch->size();
      }
      rate[which] = double(images) / std::chrono::duration<double>(Clock::now() - start).count();
      if (writer) writer->Finish("completed");
      run.Stop();
    }
    rates[0].push_back(rate[0]);
    rates[1].push_back(rate[1]);
    ratios.push_back(rate[0] / rate[1]);
    std::printf("  round %d/%d: %.1f vs %.1f images/s  ratio %.3f\n", r + 1, rounds, rate[0],
                rate[1], rate[0] / rate[1]);
    std::fflush(stdout);
  }
  std::printf("  %s: %.1f images/s (median)\n  %s: %.1f images/s (median)\n", name_a.c_str(),
              tilefeed::bench::Median(rates[0]), name_b.c_str(), tilefeed::bench::Median(rates[1]));
  std::printf("  ratio data/against: %.3f (median of %d rounds; min %.3f, max %.3f)\n",
              tilefeed::bench::Median(ratios), rounds,
              *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()));
  std::printf("(checksum %llu)\nratio=%.4f\n", static_cast<unsigned long long>(checksum),
              tilefeed::bench::Median(ratios));
  return 0;
}

// The command line.
struct Args {
  std::string data;
  std::string split;  // "": val with --mode eval where --data has one, else train
  loader::LoaderOptions options;
  double seconds = 0;
  std::uint64_t epochs = 1;
  std::size_t warmup = 2;
  bool json = false;
  bool fail = false;
  std::string shard_io = "pread";
  std::size_t max_gap = loader::ShardReadOptions{}.max_gap;
  bool no_shuffle = false;
  bool read_only = false;
  bool no_coalesce = false;
  double interval = 0;
  std::string against;
  int rounds = 10;
  std::size_t round_batches = 12;
  std::string cache_dir;
  std::uint64_t cache_limit = loader::RemoteOptions{}.cache_limit;
  tilefeed::metrics::Flags metrics;
  bool metrics_overhead = false;
};

// The loader's own options, from the shared table (loader/option_specs.h).
void AddLoaderOptionFlags(CLI::App& app, Args& a) {
  loader::LoaderOptions& o = a.options;
  tools::AddOption(app, loader::kBatchSize, o.batch_size);
  tools::AddOption(app, loader::kImageSize, o.image_size);
  tools::AddOption(app, loader::kMode, o.mode);
  tools::AddAugmentOption(app, o.augment);
  tools::AddOption(app, loader::kSplit, a.split)
      ->description(std::string(loader::kSplit.help) +
                    " (default: val with --mode eval where --data has a val split, else "
                    "train)");
  tools::AddOption(app, loader::kDecodeScaling, o.jpeg.decode_scaling);
  tools::AddOption(app, loader::kWorkers, o.workers);
  tools::AddOption(app, loader::kPrefetchDepth, o.prefetch_depth);
  tools::AddOption(app, loader::kCpuShare, o.cpu_share);
  tools::AddSizeOption(app, loader::kMemoryBudget, o.memory_budget);
  tools::AddOption(app, loader::kSeed, o.seed);
  tools::AddOption(app, loader::kBadSamplePolicy, o.bad_sample_policy);
  app.add_flag("--fail", a.fail, "stop at the first bad sample (= --bad-sample-policy fail)");
  app.add_flag("--no-shuffle", a.no_shuffle,
               "read in dataset order (for shards: consecutive records, the most a "
               "shard-local order could merge)");
  app.add_option("--local-block", o.locality.block,
                 "block-local shuffle: blocks of this many consecutive records (0 = full "
                 "shuffle)")
      ->check(tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--local-window", o.locality.window,
                 "block-local shuffle: blocks shuffled together")
      ->check(tools::AtLeast(1))
      ->capture_default_str();
}

// How long and what to time.
void AddRunFlags(CLI::App& app, Args& a) {
  app.add_option("--data", a.data,
                 "dataset (tilefeed/loader/dataset.h): ImageFolder, a root with train/ and val/ "
                 "(--split picks one), a shard directory or manifest of any codec, or CIFAR-10")
      ->required();
  auto* seconds =
      app.add_option("--seconds", a.seconds, "run this long instead of --epochs (crosses epochs)")
          ->check(tools::Above(0.0));
  tools::AddOption(app, loader::kEpochs, a.epochs)
      ->description(std::string(loader::kEpochs.help) +
                    " (default 1; --seconds runs for a time "
                    "instead)")
      ->excludes(seconds);
  app.add_option("--warmup", a.warmup, "untimed batches at the start")
      ->check(tools::AtLeast(0))
      ->capture_default_str();
  app.add_flag("--json", a.json, "also print the figures as one JSON line");
  app.add_option("--interval", a.interval,
                 "print a line with the images/s of each interval of this many seconds (0: none)")
      ->check(tools::AtLeast(0.0));
  app.add_flag("--read-only", a.read_only,
               "time only the source's reads: one thread reads epoch 0's order in chunks of 16 "
               "with Source::ReadMany, as a decode worker does, and decodes nothing");
  app.add_option("--against", a.against,
                 "a second dataset (e.g. the ImageFolder that --data's shards were packed "
                 "from) timed against --data in alternating rounds; prints the ratio "
                 "data/against");
  app.add_option("--rounds", a.rounds, "--against: rounds, each timing both datasets once")
      ->check(tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--round-batches", a.round_batches,
                 "--against: timed batches per dataset and round (after --warmup untimed ones)")
      ->check(tools::AtLeast(1))
      ->capture_default_str();
  tools::AddMetricsFlags(app, a.metrics);
  app.add_flag("--metrics-overhead", a.metrics_overhead,
               "time --data with a metrics writer sampling every --metrics interval= seconds "
               "(to its file=, or /dev/null) against without, in alternating rounds like "
               "--against; prints ratio=with/without");
}

// How the source reads: shard I/O and the remote cache (--remote cache-dir=,cache-limit=: the
// shared table's group, with the two keys this driver uses).
void AddSourceFlags(CLI::App& app, Args& a) {
  app.add_option("--shard-io", a.shard_io,
                 "shards: read records with pread (merging nearby ones) or copy them out of "
                 "mmapped shards")
      ->check(CLI::IsMember({"pread", "mmap"}))
      ->capture_default_str();
  app.add_option("--coalesce-gap", a.max_gap,
                 "shards, pread: merge reads of records at most this many bytes apart")
      ->check(tools::AtLeast(0))
      ->capture_default_str();
  app.add_flag("--no-coalesce", a.no_coalesce, "shards, pread: one read per record");
  tools::AddGroupOption(app, loader::kRemote,
                        {tools::BindKey(loader::kRemoteKeys[0], a.cache_dir),
                         tools::BindKey(loader::kRemoteKeys[1], a.cache_limit)});
}

// The options that follow from several flags at once.
void FinishOptions(Args& a) {
  loader::LoaderOptions& o = a.options;
  if (a.split.empty()) {
    const bool eval_on_val =
        o.mode == loader::Mode::kEval && loader::HasSplit(a.data, loader::Split::kVal);
    a.split = eval_on_val ? "val" : "train";
  }
  o.shuffle = !a.no_shuffle;
  o.epochs = a.seconds > 0 ? 0 : a.epochs;
  if (a.fail) o.bad_sample_policy = loader::BadSamplePolicy::kFail;
}

// Opens datasets as --data was given, counting remote requests.
class Opener {
 public:
  explicit Opener(const Args& a) {
    options_.remote.cache_dir = a.cache_dir;
    options_.remote.cache_limit = a.cache_limit;
    options_.remote.counters = &remote_;
    options_.split = *loader::ParseSplit(a.split);  // the option table's choices
    options_.shards.io = a.shard_io == "mmap" ? loader::ShardIo::kMmap : loader::ShardIo::kPread;
    options_.shards.coalesce = !a.no_coalesce;
    options_.shards.max_gap = a.max_gap;
  }

  // The split is resolved by the opener, as in every door.
  std::unique_ptr<loader::Source> Open(const std::string& location) {
    loader::OpenedDataset opened = loader::OpenDataset(location, options_);
    std::fprintf(stderr, "data: %s\n", opened.summary.c_str());
    for (const std::string& note : opened.notes) {
      std::fprintf(stderr, "warning: %s\n", note.c_str());
    }
    shards_ = dynamic_cast<const loader::ShardDataset*>(opened.source.get());
    return std::move(opened.source);
  }

  // The shard source last opened, or null (owned by the loader it went to).
  const loader::ShardDataset* shards() const { return shards_; }
  const loader::RemoteCounters& remote() const { return remote_; }

 private:
  loader::DatasetOptions options_;
  loader::RemoteCounters remote_;
  const loader::ShardDataset* shards_ = nullptr;
};

// --metrics-overhead: the same dataset twice, A with a metrics writer sampling it, B without.
int MetricsOverhead(const Args& a, Opener& opener) {
  const auto with_metrics =
      [&a](int which, loader::Loader& turn) -> std::unique_ptr<tilefeed::metrics::Writer> {
    if (which != 0) return nullptr;
    tilefeed::metrics::WriterOptions writer_options;
    writer_options.path = a.metrics.path.empty() ? "/dev/null" : a.metrics.path;
    writer_options.interval_seconds = a.metrics.interval_seconds;
    tilefeed::metrics::RunInfo info;
    info.tool = "loader_bench";
    info.dataset = a.data;
    auto writer = std::make_unique<tilefeed::metrics::Writer>(writer_options, info);
    writer->SetLoader([&turn] { return turn.metrics(); });
    return writer;
  };
  const auto open = [&] { return opener.Open(a.data); };
  return Alternate(a.data + " with metrics", open, a.data + " without", open, a.options, a.rounds,
                   a.round_batches, a.warmup, with_metrics);
}

// What the timed run measured.
struct Timing {
  std::uint64_t checksum = 0;
  std::size_t batches = 0;
  std::size_t timed_images = 0;  // after the warm-up
  loader::LoaderMetrics at_start;
  Clock::time_point begin = Clock::now();
  Clock::time_point t0 = begin;  // the end of the warm-up
};

// The live lines: --interval's images/s, and the progress line on a terminal.
class Progress {
 public:
  explicit Progress(double interval) : interval_(interval) {}

  void OnBatch(const loader::Batch& batch, const loader::Loader& run, const Timing& timing,
               Clock::time_point now) {
    interval_images_ += batch.size();
    const double span = std::chrono::duration<double>(now - last_interval_).count();
    if (interval_ > 0 && span >= interval_) {
      std::printf("interval t=%.1f images_per_s=%.1f\n",
                  std::chrono::duration<double>(now - timing.begin).count(),
                  double(interval_images_) / span);
      std::fflush(stdout);
      last_interval_ = now;
      interval_images_ = 0;
    }
    if (live_ && now - last_print_ > std::chrono::milliseconds(250)) {
      last_print_ = now;
      const double elapsed = std::chrono::duration<double>(now - timing.t0).count();
      std::fprintf(stderr, "\r  epoch %llu batch %llu/%zu  %.0f images/s  ",
                   static_cast<unsigned long long>(batch.epoch()),
                   static_cast<unsigned long long>(batch.index()) + 1, run.batches_per_epoch(),
                   elapsed > 0 ? double(timing.timed_images) / elapsed : 0.0);
    }
  }

  void Clear() const {
    if (live_) std::fprintf(stderr, "\r%60s\r", "");
  }

 private:
  const double interval_;
  const bool live_ = isatty(STDERR_FILENO) != 0;
  Clock::time_point last_print_ = Clock::now();
  Clock::time_point last_interval_ = last_print_;
  std::size_t interval_images_ = 0;
};

// Runs `run` for --epochs or --seconds, touching every batch. Throws LoaderError.
Timing RunEpochs(const Args& a, loader::Loader& run, tilefeed::metrics::Session& metrics) {
  Timing timing;
  Progress progress(a.interval);
  const auto past_seconds = [&](Clock::time_point now) {
    return a.seconds > 0 && std::chrono::duration<double>(now - timing.begin).count() >= a.seconds;
  };
  for (std::uint64_t epoch = 0;; ++epoch) {
    bool any = false;
    while (auto batch = run.Next()) {
      any = true;
      timing.checksum += Touch(*batch);
      ++timing.batches;
      if (timing.batches == a.warmup) {
        timing.at_start = run.metrics();
        timing.t0 = Clock::now();
      } else if (timing.batches > a.warmup) {
        timing.timed_images += batch->size();
      }
      const auto now = Clock::now();
      progress.OnBatch(*batch, run, timing, now);
      if (past_seconds(now)) break;
    }
    if (any && metrics) metrics.writer->EndEpoch(epoch);
    if (!any || past_seconds(Clock::now())) break;
  }
  progress.Clear();
  return timing;
}

// The figures of a timed run, derived from the loader's metrics.
struct Figures {
  double elapsed = 0, ips = 0, read_ms = 0, decode_ms = 0, resize_ms = 0, wait_pct = 0, mb = 0;
  double mpix = 0, prefetch_mib = 0, records_per_read = 0;
  int threads = 0;
  loader::LoaderMetrics end;
};

Figures Compute(const Args& a, const Timing& t, const loader::LoaderMetrics& end) {
  Figures f;
  f.end = end;
  f.elapsed = std::chrono::duration<double>(Clock::now() - t.t0).count();
  f.ips = double(t.timed_images) / f.elapsed;
  const double images = double(end.images - t.at_start.images);
  const double per_image_ms = images > 0 ? 1e3 / images : 0;
  f.read_ms = (end.read_seconds - t.at_start.read_seconds) * per_image_ms;
  f.decode_ms = (end.decode_seconds - t.at_start.decode_seconds) * per_image_ms;
  f.resize_ms = (end.resize_seconds - t.at_start.resize_seconds) * per_image_ms;
  f.wait_pct = 100.0 * (end.wait_seconds - t.at_start.wait_seconds) / f.elapsed;
  f.mb = double(end.bytes_read - t.at_start.bytes_read) / 1e6;
  const loader::ImageSize size = a.options.image_size.At(0);  // a schedule: epoch 0's
  f.mpix = double(size.height) * size.width / 1e6;
  f.prefetch_mib = double(end.slots * end.slot_bytes) / (1 << 20);
  f.threads = end.threads;  // the tuner's at the end under --workers auto
  return f;
}

void PrintFigures(const Args& a, const Timing& t, const Figures& f) {
  std::printf("  images/s          %10.1f  (%zu images in %.2f s after %zu warm-up batches)\n",
              f.ips, t.timed_images, f.elapsed, a.warmup);
  std::printf("  output MP/s       %10.1f\n", f.ips * f.mpix);
  std::printf("  read MB/s         %10.1f\n", f.mb / f.elapsed);
  std::printf("  per image (ms of one worker): read %.3f  decode %.3f  resize %.3f\n", f.read_ms,
              f.decode_ms, f.resize_ms);
  std::printf("  consumer wait     %10.1f %%  (stall of a consumer that only touches batches)\n",
              f.wait_pct);
  std::printf("  ring occupancy    %10.2f of %zu slots ready when the consumer asked\n",
              f.end.mean_ready_batches, f.end.slots);
  std::printf("  bad samples       %10llu\n", static_cast<unsigned long long>(f.end.bad_samples));
  std::printf("  peak RSS          %10.1f MiB  (prefetch slots %.1f MiB)\n", PeakRssMiB(),
              f.prefetch_mib);
}

// Requests and bytes of the whole run (opening and warm-up included), over its wall time.
void PrintRemote(const Timing& t, const loader::RemoteCounters& remote) {
  const double run_s = std::chrono::duration<double>(Clock::now() - t.begin).count();
  std::printf(
      "  remote            %10.2f requests per batch  (%llu requests, %llu retries), %.1f MB "
      "received (%.1f MB/s over %.2f s), %llu cache hits, %llu blocks stored\n",
      double(remote.requests.load()) / double(t.batches),
      static_cast<unsigned long long>(remote.requests.load()),
      static_cast<unsigned long long>(remote.retries.load()), double(remote.bytes.load()) / 1e6,
      double(remote.bytes.load()) / 1e6 / run_s, run_s,
      static_cast<unsigned long long>(remote.cache_hits.load()),
      static_cast<unsigned long long>(remote.cache_fills.load()));
}

void PrintJson(const Args& a, const Timing& t, const Figures& f) {
  const char* mode = a.options.mode == loader::Mode::kEval ? "eval" : "train";
  std::printf(
      "{\"bench\":\"loader\",\"data\":\"%s\",\"mode\":\"%s\",\"split\":\"%s\",\"size\":\"%s\","
      "\"batch\":%zu,\"workers\":%d,\"depth\":%zu,\"images\":%zu,\"seconds\":%.3f,"
      "\"images_per_s\":%.1f,\"mp_per_s\":%.2f,\"mb_per_s\":%.2f,\"read_ms\":%.4f,"
      "\"decode_ms\":%.4f,\"resize_ms\":%.4f,\"wait_pct\":%.2f,\"ring_ready\":%.2f,"
      "\"bad_samples\":%llu,\"peak_rss_mib\":%.1f,\"prefetch_mib\":%.1f,"
      "\"records_per_read\":%.2f,\"checksum\":%llu}\n",
      a.data.c_str(), mode, a.split.c_str(), a.options.image_size.text().c_str(),
      a.options.batch_size, f.threads, f.end.slots, t.timed_images, f.elapsed, f.ips,
      f.ips * f.mpix, f.mb / f.elapsed, f.read_ms, f.decode_ms, f.resize_ms, f.wait_pct,
      f.end.mean_ready_batches, static_cast<unsigned long long>(f.end.bad_samples), PeakRssMiB(),
      f.prefetch_mib, f.records_per_read, static_cast<unsigned long long>(t.checksum));
}

void Report(const Args& a, const Opener& opener, const Timing& t, Figures& f) {
  PrintFigures(a, t, f);
  if (loader::IsRemoteLocation(a.data)) PrintRemote(t, opener.remote());
  if (const loader::ShardDataset* shards = opener.shards()) {
    const std::uint64_t calls = shards->read_calls();
    f.records_per_read = calls > 0 ? double(f.end.images + f.end.bad_samples) / double(calls) : 0;
    std::printf("  shard reads       %10.2f records per read (%llu reads, %s)\n",
                f.records_per_read, static_cast<unsigned long long>(calls), a.shard_io.c_str());
    PrintOrderStats(*shards, a.options);
  }
  if (a.json) PrintJson(a, t, f);
  std::printf("images_per_s=%.1f\n", f.ips);
}

// The plain run: one loader over --data, timed after --warmup batches.
int Timed(const Args& a, const CLI::App& app, Opener& opener) {
  std::unique_ptr<loader::Loader> run;
  tilefeed::metrics::Session metrics;
  try {
    std::unique_ptr<loader::Source> source = opener.Open(a.data);
    // No loader for --read-only: its prefetching workers would compete with the reads.
    if (a.read_only) return ReadOnly(*source, a.options, a.seconds > 0 ? a.seconds : 10);
    run = std::make_unique<loader::Loader>(std::move(source), a.options);
    const loader::LoaderMetrics m = run->metrics();
    metrics = tilefeed::metrics::Open(
        a.metrics, {"loader_bench", tilefeed::metrics::OptionsOf(app), a.data, run->source().size(),
                    run->source().class_names().size(), 0, 1, m.slots * m.slot_bytes, false,
                    a.options.image_size});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 2;
  }
  std::printf(
      "loader_bench: %zu images in %zu classes at %s, %s mode, %s split, size %s, batch %zu, "
      "%d workers, depth %zu (at the start)\n",
      run->source().size(), run->source().class_names().size(), a.data.c_str(),
      a.options.mode == loader::Mode::kEval ? "eval" : "train", a.split.c_str(),
      a.options.image_size.text().c_str(), a.options.batch_size, run->metrics().threads,
      run->metrics().slots);
  metrics.SetLoader([&run] { return run->metrics(); });
  Timing timing;
  try {
    timing = RunEpochs(a, *run, metrics);
  } catch (const loader::LoaderError& e) {
    std::fprintf(stderr, "\nloader_bench: %s\n", e.what());
    metrics.Finish("error", e.what());
    return 1;
  }
  Figures figures = Compute(a, timing, run->metrics());
  metrics.SetLoader({});
  metrics.Finish("completed");
  run->Stop();
  if (timing.batches <= a.warmup) {
    std::fprintf(stderr, "loader_bench: only %zu batches; lower --warmup or run longer\n",
                 timing.batches);
    return 2;
  }
  Report(a, opener, timing, figures);
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "loader_bench: runs the tilefeed loader on a dataset against a consumer that only\n"
      "touches each batch, and prints images/s, MP/s, MB/s, per-stage times (read, decode,\n"
      "resize per image), the consumer's wait share, ring occupancy, bad samples and peak\n"
      "RSS. A live progress line is shown on a terminal."};
  Args a;
  AddRunFlags(app, a);
  AddLoaderOptionFlags(app, a);
  AddSourceFlags(app, a);
  if (const auto rc = tools::ParseArgs(app, argc, argv, "loader_bench")) return *rc;
  FinishOptions(a);
  std::mutex print_mutex;
  std::atomic<int> printed{0};
  a.options.on_bad_sample = [&](const loader::BadSample& bad) {
    if (printed.fetch_add(1) < 20) {
      std::lock_guard lock(print_mutex);
      std::fprintf(stderr, "\nbad sample: %s: %s\n", bad.where.c_str(), bad.reason.c_str());
    }
  };
  Opener opener(a);
  if (!a.metrics_overhead && a.against.empty()) return Timed(a, app, opener);
  try {
    if (a.metrics_overhead) return MetricsOverhead(a, opener);
    return Alternate(
        a.data, [&] { return opener.Open(a.data); }, a.against,
        [&] { return opener.Open(a.against); }, a.options, a.rounds, a.round_batches, a.warmup);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return tilefeed::tools::RunMain("loader_bench", Main, argc, argv);
}
