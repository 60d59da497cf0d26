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
// loader every --metrics-interval seconds against the same run without one, the same way
// (ratio=with/without).

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/median.h"
#include "metrics/cli.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/shard_source.h"
#include "tools/cli_checks.h"

namespace {

namespace loader = tilefeed::loader;
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "loader_bench: runs the tilefeed loader on an ImageFolder dataset against a consumer\n"
      "that only touches each batch, and prints images/s, MP/s, MB/s, per-stage times\n"
      "(read, decode, resize per image), the consumer's wait share, ring occupancy, bad\n"
      "samples and peak RSS. A live progress line is shown on a terminal."};
  std::string data;
  std::string mode = "train";
  loader::LoaderOptions options;
  int workers = 0;
  double seconds = 0;
  std::uint64_t epochs = 1;
  std::size_t warmup = 2;
  bool json = false;
  bool fail = false;
  std::string scales = "pow2";
  app.add_option(
         "--data", data,
         "dataset (tilefeed/loader/dataset.h): ImageFolder, a root with train/ and val/ (--mode "
         "picks the split), a shard directory or manifest of any codec, or CIFAR-10")
      ->required();
  app.add_option("--batch-size,--batch", options.batch_size, "batch size")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--workers", workers, "decode threads (0 = all cores)")
      ->check(tilefeed::tools::Between(0, 1024))
      ->capture_default_str();
  app.add_option("--image-size,--size", options.image_size, "output side in pixels")
      ->check(tilefeed::tools::Between(16, 4096))
      ->capture_default_str();
  app.add_option("--mode", mode,
                 "train: RandomResizedCrop + flip on the train split; eval (or val): resize 256 "
                 "+ centre crop on the val split")
      ->check(CLI::IsMember({"train", "eval", "val"}))
      ->capture_default_str();
  app.add_flag("--eval-dct-scaling", options.eval_dct_scaling,
               "eval: let JPEGs decode at a DCT scale-down (faster; pixels then differ from "
               "torchvision's Resize + CenterCrop by a few levels)");
  app.add_option("--prefetch-depth,--depth", options.prefetch_depth, "prefetch depth (batch slots)")
      ->check(tilefeed::tools::Between(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "shuffle and augmentation seed")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  auto* seconds_opt =
      app.add_option("--seconds", seconds, "run this long instead of --epochs (crosses epochs)")
          ->check(tilefeed::tools::Above(0.0));
  app.add_option("--epochs", epochs, "run this many epochs, at least 1 (default 1)")
      ->check(tilefeed::tools::AtLeast(1))
      ->excludes(seconds_opt);
  app.add_option("--warmup", warmup, "untimed batches at the start")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--scales", scales, "DCT scales: pow2 or eighths")
      ->check(CLI::IsMember({"pow2", "eighths"}))
      ->capture_default_str();
  app.add_flag("--fail", fail, "stop at the first bad sample instead of skipping it");
  std::string bad_sample_policy = "skip";
  app.add_option("--bad-sample-policy", bad_sample_policy, "skip or fail (fail = --fail)")
      ->check(CLI::IsMember({"skip", "fail"}));
  app.add_flag("--json", json, "also print the figures as one JSON line");
  std::string shard_io = "pread";
  app.add_option("--shard-io", shard_io,
                 "shards: read records with pread (merging nearby ones) or copy them out of "
                 "mmapped shards")
      ->check(CLI::IsMember({"pread", "mmap"}))
      ->capture_default_str();
  std::size_t max_gap = loader::ShardReadOptions{}.max_gap;
  app.add_option("--coalesce-gap", max_gap,
                 "shards, pread: merge reads of records at most this many bytes apart")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  bool no_shuffle = false;
  app.add_flag("--no-shuffle", no_shuffle,
               "read in dataset order (for shards: consecutive records, the most a "
               "shard-local order could merge)");
  app.add_option("--local-block", options.locality.block,
                 "block-local shuffle: blocks of this many consecutive records (0 = full "
                 "shuffle)")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--local-window", options.locality.window,
                 "block-local shuffle: blocks shuffled together")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  bool read_only = false;
  app.add_flag("--read-only", read_only,
               "time only the source's reads: one thread reads epoch 0's order in chunks of 16 "
               "with Source::ReadMany, as a decode worker does, and decodes nothing");
  bool no_coalesce = false;
  app.add_flag("--no-coalesce", no_coalesce, "shards, pread: one read per record");
  double interval = 0;
  app.add_option("--interval", interval,
                 "print a line with the images/s of each interval of this many seconds (0: none)")
      ->check(tilefeed::tools::AtLeast(0.0));
  std::string against;
  app.add_option("--against", against,
                 "a second dataset (e.g. the ImageFolder that --data's shards were packed "
                 "from) timed against --data in alternating rounds; prints the ratio "
                 "data/against");
  int rounds = 10;
  app.add_option("--rounds", rounds, "--against: rounds, each timing both datasets once")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  std::size_t round_batches = 12;
  app.add_option("--round-batches", round_batches,
                 "--against: timed batches per dataset and round (after --warmup untimed ones)")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  std::string cache_dir;
  app.add_option("--cache-dir", cache_dir,
                 "http(s)/s3 datasets: the block cache's directory (default: no cache)");
  std::uint64_t cache_limit_mib = 10240;
  app.add_option("--cache-limit-mib", cache_limit_mib, "--cache-dir: its size bound in MiB")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  tilefeed::metrics::Flags metrics_flags;
  tilefeed::metrics::AddFlags(app, metrics_flags);
  tilefeed::tools::CheckMetricsFlags(app);
  bool metrics_overhead = false;
  app.add_flag("--metrics-overhead", metrics_overhead,
               "time --data with a metrics writer sampling every --metrics-interval seconds "
               "(to --metrics, or /dev/null) against without, in alternating rounds like "
               "--against; prints ratio=with/without");
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "loader_bench")) return *rc;

  loader::DatasetOptions dataset_options;
  loader::RemoteCounters remote_counters;
  dataset_options.remote.cache_dir = cache_dir;
  dataset_options.remote.cache_limit = cache_limit_mib << 20;
  dataset_options.remote.counters = &remote_counters;
  dataset_options.split = mode == "train" ? loader::Split::kTrain : loader::Split::kVal;
  dataset_options.shards.io = shard_io == "mmap" ? loader::ShardIo::kMmap : loader::ShardIo::kPread;
  dataset_options.shards.coalesce = !no_coalesce;
  dataset_options.shards.max_gap = max_gap;
  options.mode = mode == "train" ? loader::Mode::kTrain : loader::Mode::kEval;
  options.workers = workers;
  options.shuffle = !no_shuffle;
  options.epochs = seconds > 0 ? 0 : epochs;
  options.bad_sample_policy = fail || bad_sample_policy == "fail" ? loader::BadSamplePolicy::kFail
                                                                  : loader::BadSamplePolicy::kSkip;
  options.jpeg.scales = scales == "pow2" ? tilefeed::codecs::DctScales::kPowersOfTwo
                                         : tilefeed::codecs::DctScales::kEighths;
  std::mutex print_mutex;
  std::atomic<int> printed{0};
  options.on_bad_sample = [&](const loader::BadSample& bad) {
    if (printed.fetch_add(1) < 20) {
      std::lock_guard lock(print_mutex);
      std::fprintf(stderr, "\nbad sample: %s: %s\n", bad.where.c_str(), bad.reason.c_str());
    }
  };

  std::unique_ptr<loader::Loader> run;
  const loader::ShardDataset* shard_source = nullptr;  // owned by `run`
  const auto open_source = [&](const std::string& location) -> std::unique_ptr<loader::Source> {
    loader::OpenedDataset opened = loader::OpenDataset(location, dataset_options);
    std::fprintf(stderr, "data: %s\n", opened.summary.c_str());
    for (const std::string& note : opened.notes)
      std::fprintf(stderr, "warning: %s\n", note.c_str());
    shard_source = dynamic_cast<const loader::ShardDataset*>(opened.source.get());
    return std::move(opened.source);
  };
  if (metrics_overhead) {
    // The same dataset twice: A with the metrics writer sampling it, B without.
    const auto with_metrics =
        [&](int which, loader::Loader& turn) -> std::unique_ptr<tilefeed::metrics::Writer> {
      if (which != 0) return nullptr;
      tilefeed::metrics::WriterOptions writer_options;
      writer_options.path = metrics_flags.path.empty() ? "/dev/null" : metrics_flags.path;
      writer_options.interval_seconds = metrics_flags.interval_seconds;
      tilefeed::metrics::RunInfo info;
      info.tool = "loader_bench";
      info.dataset = data;
      auto writer = std::make_unique<tilefeed::metrics::Writer>(writer_options, info);
      writer->SetLoader([&turn] { return turn.metrics(); });
      return writer;
    };
    try {
      return Alternate(
          data + " with metrics", [&] { return open_source(data); }, data + " without",
          [&] { return open_source(data); }, options, rounds, round_batches, warmup, with_metrics);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loader_bench: %s\n", e.what());
      return 2;
    }
  }
  if (!against.empty()) {
    try {
      return Alternate(
          data, [&] { return open_source(data); }, against, [&] { return open_source(against); },
          options, rounds, round_batches, warmup);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loader_bench: %s\n", e.what());
      return 2;
    }
  }
  try {
    std::unique_ptr<loader::Source> source = open_source(data);
    // No loader for --read-only: its prefetching workers would compete with the reads.
    if (read_only) return ReadOnly(*source, options, seconds > 0 ? seconds : 10);
    run = std::make_unique<loader::Loader>(std::move(source), options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 2;
  }
  const int threads = workers > 0 ? workers : int(std::thread::hardware_concurrency());
  std::printf(
      "loader_bench: %zu images in %zu classes at %s, %s mode, %dx%d, batch %zu, "
      "%d workers, depth %zu\n",
      run->source().size(), run->source().class_names().size(), data.c_str(), mode.c_str(),
      options.image_size, options.image_size, options.batch_size, threads, options.prefetch_depth);

  tilefeed::metrics::Session metrics;
  try {
    metrics = tilefeed::metrics::Open(
        metrics_flags, {"loader_bench", tilefeed::metrics::OptionsOf(app), data,
                        run->source().size(), run->source().class_names().size(), 0, 1,
                        run->metrics().slots * run->metrics().slot_bytes});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 2;
  }
  metrics.SetLoader([&run] { return run->metrics(); });

  const bool live = isatty(STDERR_FILENO) != 0;
  std::uint64_t checksum = 0;
  std::size_t batches = 0;
  std::size_t timed_images = 0;
  loader::LoaderMetrics at_start;
  Clock::time_point t0 = Clock::now();
  const Clock::time_point begin = t0;
  auto last_print = t0;
  auto last_interval = t0;
  std::size_t interval_images = 0;
  try {
    for (std::uint64_t epoch = 0;; ++epoch) {
      bool any = false;
      while (auto batch = run->Next()) {
        any = true;
        checksum += Touch(*batch);
        ++batches;
        if (batches == warmup) {
          at_start = run->metrics();
          t0 = Clock::now();
        } else if (batches > warmup) {
          timed_images += batch->size();
        }
        const auto now = Clock::now();
        interval_images += batch->size();
        if (interval > 0 &&
            std::chrono::duration<double>(now - last_interval).count() >= interval) {
          const double span = std::chrono::duration<double>(now - last_interval).count();
          std::printf("interval t=%.1f images_per_s=%.1f\n",
                      std::chrono::duration<double>(now - begin).count(), interval_images / span);
          std::fflush(stdout);
          last_interval = now;
          interval_images = 0;
        }
        if (live && now - last_print > std::chrono::milliseconds(250)) {
          last_print = now;
          const double elapsed = std::chrono::duration<double>(now - t0).count();
          std::fprintf(stderr, "\r  epoch %llu batch %llu/%zu  %.0f images/s  ",
                       static_cast<unsigned long long>(batch->epoch()),
                       static_cast<unsigned long long>(batch->index() + 1),
                       run->batches_per_epoch(), elapsed > 0 ? timed_images / elapsed : 0.0);
        }
        if (seconds > 0 && std::chrono::duration<double>(now - begin).count() >= seconds) {
          break;
        }
      }
      if (any && metrics) metrics.writer->EndEpoch(epoch);
      if (!any ||
          (seconds > 0 && std::chrono::duration<double>(Clock::now() - begin).count() >= seconds)) {
        break;
      }
    }
  } catch (const loader::LoaderError& e) {
    std::fprintf(stderr, "\nloader_bench: %s\n", e.what());
    metrics.Finish("error", e.what());
    return 1;
  }
  if (live) std::fprintf(stderr, "\r%60s\r", "");
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const loader::LoaderMetrics end = run->metrics();
  metrics.SetLoader({});
  metrics.Finish("completed");
  run->Stop();
  if (batches <= warmup) {
    std::fprintf(stderr, "loader_bench: only %zu batches; lower --warmup or run longer\n", batches);
    return 2;
  }

  const double ips = timed_images / elapsed;
  const double images = double(end.images - at_start.images);
  const double per_image_ms = images > 0 ? 1e3 / images : 0;
  const double read_ms = (end.read_seconds - at_start.read_seconds) * per_image_ms;
  const double decode_ms = (end.decode_seconds - at_start.decode_seconds) * per_image_ms;
  const double resize_ms = (end.resize_seconds - at_start.resize_seconds) * per_image_ms;
  const double wait = end.wait_seconds - at_start.wait_seconds;
  const double mb = double(end.bytes_read - at_start.bytes_read) / 1e6;
  const double mpix = double(options.image_size) * options.image_size / 1e6;
  const double prefetch_mib = double(end.slots * end.slot_bytes) / (1 << 20);
  std::printf("  images/s          %10.1f  (%zu images in %.2f s after %zu warm-up batches)\n", ips,
              timed_images, elapsed, warmup);
  std::printf("  output MP/s       %10.1f\n", ips * mpix);
  std::printf("  read MB/s         %10.1f\n", mb / elapsed);
  std::printf("  per image (ms of one worker): read %.3f  decode %.3f  resize %.3f\n", read_ms,
              decode_ms, resize_ms);
  std::printf("  consumer wait     %10.1f %%  (stall of a consumer that only touches batches)\n",
              100.0 * wait / elapsed);
  std::printf("  ring occupancy    %10.2f of %zu slots ready when the consumer asked\n",
              end.mean_ready_batches, end.slots);
  std::printf("  bad samples       %10llu\n", static_cast<unsigned long long>(end.bad_samples));
  std::printf("  peak RSS          %10.1f MiB  (prefetch slots %.1f MiB)\n", PeakRssMiB(),
              prefetch_mib);
  if (loader::IsRemoteLocation(data)) {
    // Requests and bytes of the whole run (opening and warm-up included), over its wall time.
    const double run_s = std::chrono::duration<double>(Clock::now() - begin).count();
    std::printf(
        "  remote            %10.2f requests per batch  (%llu requests, %llu retries), %.1f MB "
        "received (%.1f MB/s over %.2f s), %llu cache hits, %llu blocks stored\n",
        double(remote_counters.requests.load()) / double(batches),
        static_cast<unsigned long long>(remote_counters.requests.load()),
        static_cast<unsigned long long>(remote_counters.retries.load()),
        double(remote_counters.bytes.load()) / 1e6,
        double(remote_counters.bytes.load()) / 1e6 / run_s, run_s,
        static_cast<unsigned long long>(remote_counters.cache_hits.load()),
        static_cast<unsigned long long>(remote_counters.cache_fills.load()));
  }
  double records_per_read = 0;
  if (shard_source != nullptr) {
    const std::uint64_t calls = shard_source->read_calls();
    records_per_read = calls > 0 ? double(end.images + end.bad_samples) / double(calls) : 0;
    std::printf("  shard reads       %10.2f records per read (%llu reads, %s)\n", records_per_read,
                static_cast<unsigned long long>(calls), shard_io.c_str());
    PrintOrderStats(*shard_source, options);
  }
  if (json) {
    std::printf(
        "{\"bench\":\"loader\",\"data\":\"%s\",\"mode\":\"%s\",\"size\":%d,\"batch\":%zu,"
        "\"workers\":%d,\"depth\":%zu,\"images\":%zu,\"seconds\":%.3f,\"images_per_s\":%.1f,"
        "\"mp_per_s\":%.2f,\"mb_per_s\":%.2f,\"read_ms\":%.4f,\"decode_ms\":%.4f,"
        "\"resize_ms\":%.4f,\"wait_pct\":%.2f,\"ring_ready\":%.2f,\"bad_samples\":%llu,"
        "\"peak_rss_mib\":%.1f,\"prefetch_mib\":%.1f,\"records_per_read\":%.2f,"
        "\"checksum\":%llu}\n",
        data.c_str(), mode.c_str(), options.image_size, options.batch_size, threads,
        options.prefetch_depth, timed_images, elapsed, ips, ips * mpix, mb / elapsed, read_ms,
        decode_ms, resize_ms, 100.0 * wait / elapsed, end.mean_ready_batches,
        static_cast<unsigned long long>(end.bad_samples), PeakRssMiB(), prefetch_mib,
        records_per_read, static_cast<unsigned long long>(checksum));
  }
  std::printf("images_per_s=%.1f\n", ips);
  return 0;
}
