#pragma once

// The metrics stream of a tool: JSON lines in the schema of docs/metrics.md (and its
// machine-readable twin docs/metrics-schema.json). A Writer opens its file, writes one
// `config` record, then an `interval` record every interval from a sampler thread, an
// `epoch` record when the tool ends an epoch, and one `end` record from Finish() (or from
// the destructor if the tool never called it: exit "error" while an exception unwinds, else
// "abandoned").
//
// The figures come from two places, both optional: the loader (a probe returning its
// LoaderMetrics, called from the sampler thread) and the consumer of the batches, which the
// tool feeds (AddStep per training step, or SetProgress for a tool without a loader). The
// Writer only reads and differences them; it never reaches into the loader. Off a terminal
// it also prints one plain progress line per interval on stderr.
//
// Thread safety: every member function may be called from any thread. The loader probe is
// called from the sampler thread and from Totals()' caller, never concurrently with
// SetLoader(), so a tool may destroy its Loader right after SetLoader({}).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tilefeed/loader/loader.h"

namespace tilefeed::metrics {

// The metrics file cannot be opened or written, or an option is out of range.
class MetricsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The schema version every record carries ("schema").
inline constexpr int kSchemaVersion = 2;

// What the `config` record says about the run.
struct RunInfo {
  std::string tool;  // "train", "tilefeed-serve", "loader_bench", ...
  // The options as the tool understood them, name -> value, in order.
  std::vector<std::pair<std::string, std::string>> options;
  std::string dataset;                // as named on the command line ("" for none)
  std::uint64_t dataset_samples = 0;  // samples in the whole dataset (0: unknown)
  std::uint64_t dataset_classes = 0;
  int instance = 0;  // this instance, in [0, instances)
  int instances = 1;
  std::uint64_t prefetch_bytes = 0;  // loader slots x slot bytes (0: no loader)
  // The tool calls AddStep: steps, images and input wait come from its steps from the
  // start, never from the loader (whose figures include prefetching and the first fill).
  bool feeds_steps = false;
  // The loader's image-size schedule: epoch records name each epoch's size (none: null).
  std::optional<loader::SizeSchedule> image_size = std::nullopt;
};

struct WriterOptions {
  // The file. "{instance}" is replaced by the instance index; without it, a run of several
  // instances writes one file per instance, ".<index>" inserted before the extension.
  std::string path;
  double interval_seconds = 10;  // between interval records; > 0
  // A plain progress line per interval on stderr; nullopt: when stderr is not a terminal.
  std::optional<bool> progress_line;
};

// Cumulative figures since the Writer started: what intervals difference and Prometheus
// serves.
struct Totals {
  double elapsed_seconds = 0;
  std::uint64_t epoch = 0;       // the epoch the consumer is in
  std::uint64_t step = 0;        // steps (or batches) the consumer finished
  std::uint64_t images = 0;      // images consumed (the loader's, without a consumer)
  std::uint64_t batches = 0;     // batches the loader handed out (consumer steps without one)
  std::uint64_t bytes_read = 0;  // encoded bytes read from the dataset
  double wait_seconds = 0;       // consumer blocked waiting for input
  double busy_seconds = 0;       // consumer's own work (0 when the tool does not say)
  double read_seconds = 0;       // loader workers, summed
  double decode_seconds = 0;
  double resize_seconds = 0;
  double ring_ready_sum = 0;       // sum of ready slots over the loader's Next() calls
  std::uint64_t ring_samples = 0;  // Next() calls those were seen at
  std::uint64_t ring_slots = 0;
  int threads = 0;    // the loader's decode threads now
  int cores = 0;      // the cores the process may run on
  std::string tuned;  // why the tuner last moved ("" without auto)
  std::uint64_t bad_samples = 0;
  double rss_mib = 0;  // now
  double peak_rss_mib = 0;
  std::uint64_t open_fds = 0;
};

// The path a Writer with `options.path` writes for `instance` of `instances`.
std::string ResolvePath(const std::string& path, int instance, int instances);

class Writer {
 public:
  // Opens (truncates) the file, writes the config record and starts the sampler. Throws
  // MetricsError naming the path when it cannot be opened, or for a bad interval.
  Writer(const WriterOptions& options, RunInfo info);
  // Finishes with exit "error" during unwinding, else "abandoned", unless Finish() was called.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Where loader figures come from from now on; an empty probe detaches. The figures of a
  // probe that is replaced are kept (a new Loader starts its counters at zero).
  void SetLoader(std::function<loader::LoaderMetrics()> probe);
  // One step (or batch) of the consumer: `images` consumed, after `wait_seconds` blocked
  // for input and `busy_seconds` of its own work.
  void AddStep(std::uint64_t epoch, std::uint64_t images, double wait_seconds, double busy_seconds);
  // For a tool without a loader (tilefeed-pack): cumulative images done and bytes read.
  void SetProgress(std::uint64_t images, std::uint64_t bytes_read);
  // Writes an epoch record for the consumer's figures since the previous one; the optional
  // figures come from a training core.
  void EndEpoch(std::uint64_t epoch, std::optional<double> loss = {},
                std::optional<double> accuracy = {}, std::optional<double> val_accuracy = {});
  // Stops the sampler, writes a last interval and the end record. `exit` says why the run
  // ended ("completed", "time_limit", "stopped", "peer_left", "error"); `error` is the
  // message for "error". Later calls do nothing.
  void Finish(const std::string& exit, const std::string& error = "");

  Totals totals() const;
  int instance() const;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::metrics
