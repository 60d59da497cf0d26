// train: data-parallel training on any dataset tilefeed opens, fed by the tilefeed loader.
//
//   poprun --instances 2 ./train --data DIR --core reference --epochs 3
//
// Each instance (MPI rank) reads its slice of DIR's train split (tilefeed/loader/dataset.h: an
// ImageFolder, shards of any codec, CIFAR-10, or DIR/train of a split root), lands batches in its
// training core through IO tiles, and all-reduces gradients with the other instances. MPI's rank
// and size are authoritative for the slice; the environment is read here only, never in the
// libraries.
//
// Instance 0 prints one line per epoch on stdout. When stderr is a terminal it also keeps a
// live progress line there (epoch, step/steps, images/s, stall %), redrawn a few times a
// second with "\r"; redirected, the output is the per-epoch lines alone.
//
// Disaggregated mode: with --readers, instance i of N reads its batches from the i-th
// tilefeed-serve endpoint (transport::ZmqBatchStream) instead of an in-process loader.
//
//   tilefeed-serve --data DIR/train --bind tcp://h1:5555 --insecure --slice 0/2 ...
//   tilefeed-serve --data DIR/train --bind tcp://h2:5556 --insecure --slice 1/2 ...
//   poprun --instances 2 ./train --readers tcp://h1:5555,tcp://h2:5556 --data DIR
//
// Each reader must agree with its instance on the session terms (tilefeed/transport/session.h)
// or it refuses the trainer naming both values. The trainer believes nothing else a reader
// says (docs/wire-protocol.md, "What a trainer checks"): each epoch's shape and sample order,
// each label's class; with --data each label and a share of the pixels (--reader
// check-pixels=). A silent reader (--reader data-timeout=), or one that stops early, dies or is
// replaced, is an error unless --reader reconnect=SECONDS. --data is optional there: it gives
// the class count, the identity and DIR/val's validation set. Checkpoints record the stream's
// data position (loader::LoaderState); on --resume each reader serves from it.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "loader/bad_sample_log.h"
#include "loader/option_specs.h"
#include "loader/shard_format.h"
#include "metrics/cli.h"
#include "tilefeed/launch/launch.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/trainer/mpi_session.h"
#include "tilefeed/trainer/trainer.h"
#include "tilefeed/transport/batch_stream.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/session.h"
#include "tilefeed/transport/streams.h"
#include "tools/cli_checks.h"
#include "tools/option_flags.h"
#include "tools/remote_flags.h"
#include "tools/signal_stopper.h"
#include "trainer/checkpoint.h"
#include "trainer/reference_core.h"
#include "trainer/stall.h"
#include "trainer/synthetic_core.h"
#include "transport/loader_terms.h"

namespace {

using namespace tilefeed;

// The live progress line on a terminal: one "\r" line on stderr, redrawn at most every
// kInterval, and cleared before any other line is printed so that lines never mix.
class ProgressLine {
 public:
  void Update(const trainer::StepProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    // The first figures come after one interval: a step or two say little about a rate.
    if (now - last_ < kInterval) return;
    last_ = now;
    std::string steps = std::to_string(p.step_in_epoch);
    if (p.steps_per_epoch > 0) steps += "/" + std::to_string(p.steps_per_epoch);
    const int width =
        std::fprintf(stderr, "\r[train] epoch %llu  step %s  %.1f images/s  stall %.2f %%",
                     static_cast<unsigned long long>(p.epoch), steps.c_str(), p.images_per_second,
                     p.stall_percent);
    // Blank out the tail of a longer previous line.
    if (width < width_) std::fprintf(stderr, "%*s", width_ - width, "");
    width_ = std::max(width_, width);
    std::fflush(stderr);
    shown_ = true;
  }
  void Clear() {
    if (!shown_) return;
    std::fprintf(stderr, "\r%*s\r", width_, "");
    std::fflush(stderr);
    shown_ = false;
    width_ = 0;
    last_ = std::chrono::steady_clock::now();  // a new epoch's first figures wait too
  }

 private:
  static constexpr std::chrono::milliseconds kInterval{250};
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  bool shown_ = false;
  int width_ = 0;
};

// Instance 0's lines on stdout ("[train] ..."), and on a terminal its live progress line on
// stderr; other instances print nothing here (their lines would interleave). Logs and files
// stay free of carriage returns.
class Console {
 public:
  explicit Console(int rank) : rank_(rank) {
    if (rank == 0 && isatty(STDERR_FILENO) == 1) progress_.emplace();
  }
  void Log(const std::string& line) {
    if (rank_ != 0) return;
    if (progress_) progress_->Clear();
    std::printf("[train] %s\n", loader::detail::RedactUrl(line).c_str());
    std::fflush(stdout);
  }
  bool live() const { return progress_.has_value(); }
  void Progress(const trainer::StepProgress& p) {
    if (progress_) progress_->Update(p);
  }
  // The epoch line of `r`, for a job of `instances` instances.
  void Epoch(const trainer::EpochReport& r, int instances);

 private:
  int rank_;
  std::optional<ProgressLine> progress_;
};

void Console::Epoch(const trainer::EpochReport& r, int instances) {
  if (rank_ != 0) return;
  if (progress_) progress_->Clear();
  std::printf("[train] epoch %llu: %llu steps, loss %.4f", static_cast<unsigned long long>(r.epoch),
              static_cast<unsigned long long>(r.steps), r.loss);
  if (r.accuracy) std::printf(", accuracy %.1f %%", 100 * *r.accuracy);
  if (r.bad_samples > 0) {
    std::printf(", %llu bad sample%s replaced", static_cast<unsigned long long>(r.bad_samples),
                r.bad_samples == 1 ? "" : "s");
  }
  std::printf(", %.1f images/s, stall %.2f %%", r.images_per_second, r.stall_percent);
  if (r.steps > 0) {
    std::printf(", step %.2f ms (all-reduce %s, %.2f ms exposed)",
                1e3 * r.seconds / static_cast<double>(r.steps), r.allreduce.c_str(),
                1e3 * r.allreduce_exposed_seconds / static_cast<double>(r.steps) /
                    static_cast<double>(instances));
  }
  if (r.val_accuracy)
    std::printf(", val accuracy %.1f %% (%llu images)", 100 * *r.val_accuracy,
                static_cast<unsigned long long>(r.val_images));
  std::printf("\n");
  std::fflush(stdout);
}

// "" if the --readers endpoints are distinct, else a line naming one given to two instances.
std::string ReaderNamedTwice(const std::vector<std::string>& endpoints) {
  for (std::size_t j = 1; j < endpoints.size(); ++j) {
    const auto i = std::find(endpoints.begin(), endpoints.end(), endpoints[j]) - endpoints.begin();
    if (static_cast<std::size_t>(i) == j) continue;
    return "--readers names " + endpoints[j] + " for instances " + std::to_string(i) + " and " +
           std::to_string(j) + "; each instance needs its own reader (a reader serves one slice)";
  }
  return "";
}

// Thrown from the progress sink to leave Train() when --seconds is up (not an error).
struct TimeLimitReached {};

struct Args {
  std::string data;
  loader::RemoteOptions remote;  // --remote KEY=VALUE,... for http(s)/s3 datasets
  std::string readers;           // disaggregated mode: one tilefeed-serve endpoint per instance
  // --reader KEY=VALUE,...: how this trainer talks to its reader (kReaderKeys).
  std::size_t reader_credits = 4;
  double reader_timeout = 5;     // seconds a reader may stay silent
  double data_timeout = 0;       // seconds without a batch while a reader holds credits
  double reconnect_window = 0;   // reconnect=SECONDS: reconnect a lost reader (0: do not)
  double check_pixels = 0.001;   // share of samples decoded here too and compared (with --data)
  std::string curve_server_key;  // CURVE: the readers' public key file(s), ':'-separated
  std::string curve_key;         // CURVE: this trainer's own key file(s), ':'-separated
  int classes = 0;               // reference core without --data
  std::string core = "reference";
  double us_per_sample = 2000;
  std::uint64_t epochs = 3;
  double seconds = 0;  // run-time limit (0: none); every instance stops after the same step
  std::size_t batch_size = 32;
  loader::SizeSchedule image_size;
  loader::AugmentSpec augment = loader::DefaultAugment();  // --augment
  codecs::DecodeScaling decode_scaling = codecs::DecodeScaling::kExact;
  int workers = 0;
  std::size_t prefetch_depth = 4;
  double cpu_share = loader::LoaderOptions{}.cpu_share;
  std::uint64_t memory_budget = 0;
  loader::BadSamplePolicy bad_sample_policy = loader::BadSamplePolicy::kSkip;
  std::size_t bad_sample_lines = 20;
  trainer::TrainerOptions trainer;
  std::uint64_t seed = 0;
  int hidden = 256;
  bool resume = false;             // --resume
  bool resume_if_present = false;  // --resume if-present: no checkpoint is not an error
  bool new_global_batch = false;   // resume: accept another global batch than the checkpoint's
  bool batch_size_given = false;   // --batch-size / --gradient-accumulation on the command line
  bool accumulation_given = false;
  std::string trace_samples;  // $TILEFEED_TRACE_SAMPLES (a test hook; docs/development.md)
  std::string checkpoint_dir;
  std::string json;
  double collective_timeout = 300;  // seconds; see trainer::MpiSessionOptions
  metrics::Flags metrics;
  std::vector<std::pair<std::string, std::string>> options_text;  // for the metrics' config
};

// The checkpoint to resume from: nullopt without --resume, or when --resume if-present finds
// none. --resume without one is an error (a typo in --checkpoint-dir must not start afresh).
std::optional<trainer::Checkpoint> ReadResumeCheckpoint(const Args& args, Console& console) {
  if (!args.resume && !args.resume_if_present) return std::nullopt;
  std::optional<trainer::Checkpoint> checkpoint = trainer::ReadCheckpoint(args.checkpoint_dir);
  if (checkpoint) return checkpoint;
  if (args.resume) {
    throw std::invalid_argument("--resume: no checkpoint in " + args.checkpoint_dir + " (" +
                                trainer::CheckpointPath(args.checkpoint_dir).string() +
                                " does not exist); --resume if-present starts fresh instead");
  }
  console.Log("resume: no checkpoint in " + args.checkpoint_dir + "; starting from scratch");
  return std::nullopt;
}

// MPI's rank and size decide the slice; the launcher's environment must agree with them,
// or the job was launched in a way this program does not understand.
launch::InstanceInfo CheckLauncher(const trainer::MpiSession& mpi) {
  const launch::InstanceInfo launched = launch::DetectInstance(launch::ProcessEnvironment());
  if (launched.count != 1 && (launched.index != mpi.rank() || launched.count != mpi.size())) {
    throw std::runtime_error("the launcher says instance " + std::to_string(launched.index) +
                             " of " + std::to_string(launched.count) + ", MPI says " +
                             std::to_string(mpi.rank()) + " of " + std::to_string(mpi.size()));
  }
  return launched;
}

// One instance of the job: its place in it, its output and the data it opened.
struct Instance {
  Instance(trainer::MpiSession& mpi_session, const Args& parsed)
      : mpi(mpi_session),
        args(parsed),
        rank(mpi_session.rank()),
        launched(CheckLauncher(mpi_session)),
        console(rank) {}

  trainer::MpiSession& mpi;
  const Args& args;
  int rank;
  launch::InstanceInfo launched;
  Console console;
  std::vector<std::string> endpoints;  // --readers, one per instance
  std::unique_ptr<loader::Source> train_source;
  std::optional<loader::DatasetIdentity> identity;
  int classes = 0;
  std::optional<loader::DatasetOptions> val;  // --data's val/ split, if it has one

  bool remote() const { return !args.readers.empty(); }
  bool has_data() const { return !args.data.empty(); }
};

// Splits --readers into job.endpoints. Returns 2 (after one line from instance 0) when the
// list does not name one distinct reader per instance; every instance sees the same list, so
// no abort is needed.
std::optional<int> TakeReaders(Instance& job) {
  job.endpoints = tools::SplitList(job.args.readers, ',');  // each one checked by the flag
  const int size = job.mpi.size();
  if (job.endpoints.size() != static_cast<std::size_t>(size)) {
    if (job.rank == 0) {
      std::fprintf(stderr,
                   "train: --readers lists %zu endpoint%s for %d instance%s; give exactly one "
                   "per instance (instance i reads from the i-th)\n",
                   job.endpoints.size(), job.endpoints.size() == 1 ? "" : "s", size,
                   size == 1 ? "" : "s");
    }
    return 2;
  }
  // One reader serves one slice: a second instance on it would be refused by slice, or
  // wait behind the first. Said before connecting, naming both instances.
  if (const std::string twice = ReaderNamedTwice(job.endpoints); !twice.empty()) {
    if (job.rank == 0) std::fprintf(stderr, "train: %s\n", twice.c_str());
    return 2;
  }
  return std::nullopt;
}

// Opens --data's train split, its class count and identity: what the checkpoints record and
// the readers are asked to serve (the identity covers the content, a sample of the bytes, so
// other images under the same names and counts differ).
void OpenTrainData(Instance& job) {
  job.classes = job.args.classes;
  if (job.has_data()) {
    loader::DatasetOptions dataset_options;
    dataset_options.remote = tools::ToRemoteOptions(job.args.remote);
    loader::OpenedDataset opened = loader::OpenDataset(job.args.data, dataset_options);
    job.console.Log("data: " + opened.summary);
    for (const std::string& note : opened.notes) job.console.Log("data: " + note);
    if (loader::HasSplit(job.args.data, loader::Split::kVal)) {
      job.val = dataset_options;
      job.val->split = loader::Split::kVal;
      job.console.Log("val data: " + loader::ResolveDataset(job.args.data, *job.val).path);
    }
    job.train_source = std::move(opened.source);
    if (job.classes == 0) job.classes = static_cast<int>(job.train_source->class_names().size());
    job.identity = loader::Identify(*job.train_source);
  }
  if (job.args.core == "reference" && job.classes < 1) {
    throw std::invalid_argument("the reference core needs --data or --classes");
  }
}

trainer::Trainer::CoreFactory MakeCore(Instance& job) {
  const Args& args = job.args;
  if (args.core == "synthetic") {
    const trainer::KernelCalibration calibration = trainer::CalibrateSyntheticKernel();
    job.console.Log("synthetic core: " + std::to_string(args.us_per_sample) +
                    " us per sample, kernel " + std::to_string(calibration.iterations_per_us) +
                    " iterations/us");
    return [calibration, us = args.us_per_sample] {
      return std::make_unique<trainer::SyntheticCore>(us, calibration);
    };
  }
  trainer::ReferenceCoreOptions core_options;
  core_options.classes = job.classes;
  core_options.hidden = args.hidden;
  core_options.seed = args.seed;
  return [core_options] { return std::make_unique<trainer::ReferenceCore>(core_options); };
}

metrics::Session OpenMetrics(const Instance& job, const trainer::TrainerOptions& options) {
  const Args& args = job.args;
  metrics::Flags metrics_flags = args.metrics;
  metrics_flags.port_offset = job.launched.local_index;  // one --metrics port= for a whole host
  const std::uint64_t samples = job.train_source ? job.train_source->size() : 0;
  return metrics::Open(
      metrics_flags,
      {"train", args.options_text, args.data, samples,
       static_cast<std::uint64_t>(std::max(job.classes, 0)), job.rank, job.mpi.size(),
       args.prefetch_depth * args.batch_size * options.sample_bytes, true, args.image_size});
}

// Checks a resumed checkpoint against --data, and fits the local batch and gradient
// accumulation to its global batch (unless --new-global-batch).
void FitCheckpoint(Instance& job, const trainer::Checkpoint& checkpoint,
                   trainer::TrainerOptions& options) {
  const Args& args = job.args;
  if (job.identity && checkpoint.dataset_digest != 0 &&
      checkpoint.dataset_digest != job.identity->digest) {
    throw std::invalid_argument(
        "resume: the checkpoint in " + args.checkpoint_dir + " was written for the dataset " +
        "digest " + loader::detail::Hex(checkpoint.dataset_digest) + "; --data " + args.data +
        " is " + loader::ToString(*job.identity) + ": other data (same names and counts or not)");
  }
  if (args.new_global_batch) return;
  // Another instance count keeps the global batch: more or fewer micro-batches per step,
  // or (where the readers do not fix it) another local batch.
  const trainer::BatchLayout fit = trainer::FitGlobalBatch(
      checkpoint.global_batch, {options.local_batch, options.gradient_accumulation},
      options.replicas, job.mpi.size(), args.batch_size_given || job.remote(),
      args.accumulation_given);
  if (fit.local_batch == options.local_batch &&
      fit.gradient_accumulation == options.gradient_accumulation) {
    return;
  }
  job.console.Log("resume: keeping the checkpoint's global batch " +
                  std::to_string(checkpoint.global_batch) + " on " +
                  std::to_string(job.mpi.size()) + " instance(s): local batch " +
                  std::to_string(options.local_batch) + " -> " + std::to_string(fit.local_batch) +
                  ", gradient accumulation " + std::to_string(options.gradient_accumulation) +
                  " -> " + std::to_string(fit.gradient_accumulation));
  options.local_batch = fit.local_batch;
  options.gradient_accumulation = fit.gradient_accumulation;
}

// $TILEFEED_TRACE_SAMPLES=PREFIX (a test hook, docs/development.md): instance i appends one
// "EPOCH SAMPLE" line per trained sample to PREFIX.i.
void TraceSamples(const Instance& job, trainer::Trainer& trainer, std::ofstream& trace) {
  if (job.args.trace_samples.empty()) return;
  const std::string path = job.args.trace_samples + "." + std::to_string(job.rank);
  trace.open(path, std::ios::app);
  if (!trace) throw std::runtime_error("cannot open TILEFEED_TRACE_SAMPLES file " + path);
  trainer.SetSampleSink([&trace](std::uint64_t epoch, std::span<const std::uint64_t> samples) {
    for (const std::uint64_t sample : samples) trace << epoch << ' ' << sample << '\n';
    trace << std::flush;
  });
}

// The progress line, the metrics' steps and --seconds: after every step the instances agree
// (a one-value all-reduce, in lockstep like the gradients) whether any of them is past the
// limit; all then stop after that same step by leaving Train() with TimeLimitReached, and
// `metrics_exit` becomes "time_limit".
void WatchSteps(Instance& job, trainer::Trainer& trainer, metrics::Session& metrics,
                std::string& metrics_exit) {
  if (!job.console.live() && job.args.seconds <= 0 && !metrics) return;
  const auto started = std::chrono::steady_clock::now();
  trainer.SetProgressSink(
      [&job, &trainer, &metrics, &metrics_exit, started](const trainer::StepProgress& p) {
        job.console.Progress(p);
        const int size = job.mpi.size();
        metrics.AddStep(p.epoch, trainer.global_batch() / static_cast<std::size_t>(size),
                        p.step_wait_seconds, p.step_busy_seconds);
        if (job.args.seconds <= 0) return;
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
        double past[1] = {elapsed.count() >= job.args.seconds ? 1.0 : 0.0};
        job.mpi.AllreduceMax(std::span<double>(past));
        if (past[0] <= 0) return;
        char rate[32];
        std::snprintf(rate, sizeof(rate), "%.1f", p.images_per_second);
        job.console.Log("time limit: stopping after step " + std::to_string(p.global_step) +
                        " (epoch " + std::to_string(p.epoch) + ", step " +
                        std::to_string(p.step_in_epoch) + ", " + rate +
                        " images/s in this epoch so far)");
        metrics_exit = "time_limit";
        throw TimeLimitReached{};
      });
}

// This instance's loader options (local data and the local validation set), as the readers
// are asked to serve them too.
loader::LoaderOptions LoaderOptionsOf(const Instance& job, std::size_t local_batch) {
  const Args& args = job.args;
  loader::LoaderOptions o;
  o.batch_size = local_batch;
  o.image_size = args.image_size;
  o.augment = args.augment;
  o.jpeg.decode_scaling = args.decode_scaling;
  o.workers = args.workers;  // 0: the loader takes the cores poprun bound this instance to
  o.prefetch_depth = args.prefetch_depth;
  o.cpu_share = args.cpu_share;
  o.memory_budget = args.memory_budget;
  o.seed = args.seed;
  o.slice = {job.rank, job.mpi.size()};
  o.bad_sample_policy = args.bad_sample_policy;
  // Every instance reads other files, so each names its own bad ones on stderr.
  tools::LogBadSamples(o, "train: instance " + std::to_string(job.rank) + ": ",
                       args.bad_sample_lines);
  // Every batch full: core buffers have one shape, and all instances take the same steps.
  o.drop_last_batch = true;
  return o;
}

// One data position for both modes: a local loader starts at the checkpoint's, and the
// readers are asked for it in the session terms. The checkpoint's seed is the run's. Returns
// where the data starts: the checkpoint's position, or none (epoch 0).
std::optional<loader::LoaderState> Restore(Instance& job, trainer::Trainer& trainer,
                                           const std::optional<trainer::Checkpoint>& checkpoint,
                                           loader::LoaderOptions& loader_options) {
  if (!checkpoint) return std::nullopt;
  trainer.Restore(*checkpoint);
  const loader::LoaderState& resumed = checkpoint->data_position;
  loader_options.seed = resumed.seed;
  job.console.Log("resume: step " + std::to_string(checkpoint->step) + ", " + resumed.Serialize());
  if (job.remote()) {
    job.console.Log("resume: each reader serves from this trainer's position (epoch " +
                    std::to_string(resumed.epoch) + ", position " +
                    std::to_string(resumed.position) + "); nothing to pass to the readers");
  }
  return resumed;
}

// One epoch of --data's val/ split in eval mode on this instance's slice, per call.
trainer::Trainer::ValidationFactory MakeValidation(const Instance& job,
                                                   const loader::LoaderOptions& loader_options) {
  if (!job.val) return {};
  return [&job, loader_options]() -> std::unique_ptr<transport::BatchStream> {
    loader::LoaderOptions o = loader_options;
    o.mode = loader::Mode::kEval;
    o.augment = loader::DefaultAugment();
    // One size: the largest the training schedule reaches (eval takes one).
    const loader::ImageSize size = o.image_size.Largest();
    o.image_size = loader::SizeSchedule(size);
    const int side = std::max(size.height, size.width);
    o.eval_resize = std::max(side, side * 8 / 7);
    o.shuffle = false;
    o.drop_last_batch = false;
    o.epochs = 1;
    return std::make_unique<transport::OwningLoaderStream>(
        std::make_unique<loader::Loader>(loader::OpenDataset(job.args.data, *job.val).source, o));
  };
}

// --reader curve-server-key= or curve-key=: one file for every instance, or a ':'-separated
// list with one per instance; this instance's.
std::string PerInstance(const Instance& job, const std::string& list, const char* option) {
  if (list.empty()) return {};
  const std::vector<std::string> files = tools::SplitList(list, ':');
  if (files.size() != 1 && files.size() != job.endpoints.size()) {
    throw std::invalid_argument(std::string(option) + " lists " + std::to_string(files.size()) +
                                " files for " + std::to_string(job.endpoints.size()) +
                                " readers; give one, or one per reader");
  }
  return files.size() == 1 ? files[0] : files[static_cast<std::size_t>(job.rank)];
}

// How this instance connects to its reader, on the terms its own loader would have served.
transport::StreamOptions ReaderStreamOptions(const Instance& job,
                                             const loader::LoaderOptions& loader_options,
                                             const loader::LoaderState& start) {
  const Args& args = job.args;
  transport::StreamOptions o;
  o.endpoint = job.endpoints[static_cast<std::size_t>(job.rank)];
  o.credits = args.reader_credits;
  o.peer_timeout = tools::Milliseconds(args.reader_timeout);
  o.data_timeout = tools::Milliseconds(args.data_timeout);
  o.curve_server_key_file = PerInstance(job, args.curve_server_key, "--reader curve-server-key");
  o.curve_client_key_file = PerInstance(job, args.curve_key, "--reader curve-key");
  if (!o.curve_client_key_file.empty() && o.curve_server_key_file.empty()) {
    throw std::invalid_argument(
        "--reader curve-key needs curve-server-key (the readers' public key)");
  }
  // --seed or the checkpoint's, the checkpoint's position, and drop-last as this trainer's own
  // loader: the reader's epochs, seed and slice decide the data.
  o.terms = transport::TermsOf(loader_options, job.identity.value_or(loader::DatasetIdentity{}),
                               args.epochs, start);
  o.classes = static_cast<std::uint32_t>(std::max(job.classes, 0));
  return o;
}

// Disaggregated mode: trains on this instance's reader's batches. --epochs, --seed (for
// data), --workers and --prefetch-depth here only shape the local validation loader.
void TrainFromReader(Instance& job, trainer::Trainer& trainer,
                     const loader::LoaderOptions& loader_options,
                     const std::optional<trainer::Checkpoint>& checkpoint,
                     const trainer::Trainer::ValidationFactory& make_validation) {
  transport::Context context;
  const transport::StreamOptions stream_options = ReaderStreamOptions(
      job, loader_options, checkpoint ? checkpoint->data_position : loader::LoaderState{});
  std::optional<std::chrono::milliseconds> reconnect;
  if (job.args.reconnect_window > 0) reconnect = tools::Milliseconds(job.args.reconnect_window);
  transport::ReconnectingStream stream(
      context, stream_options, reconnect, [rank = job.rank](const std::string& line) {
        std::fprintf(stderr, "train: instance %d: %s\n", rank, line.c_str());
      });
  if (checkpoint && checkpoint->data_position.dataset_size != stream.position().dataset_size) {
    throw std::invalid_argument("resume: the checkpoint's data position is in a dataset of " +
                                std::to_string(checkpoint->data_position.dataset_size) +
                                " samples; the reader at " + stream_options.endpoint + " serves " +
                                std::to_string(stream.position().dataset_size));
  }
  // Instance 0 speaks for all; a per-instance line would interleave.
  job.console.Log("instance " + std::to_string(job.rank) + " of " + std::to_string(job.mpi.size()) +
                  ": reader " + stream_options.endpoint + " (" +
                  (transport::IsShmEndpoint(stream_options.endpoint) ? "shared memory" : "ZeroMQ") +
                  "), " + std::to_string(stream.batches_per_epoch()) + " batches per epoch, core " +
                  job.args.core);
  if (!job.val) {
    job.console.Log(job.has_data() ? "validation skipped: " + job.args.data + " has no val/ split"
                                   : "validation skipped: no --data DIR with a val/ split");
  }
  if (job.train_source) {
    trainer.SetBatchCheck(
        trainer::CheckAgainst(std::move(job.train_source), loader_options, job.args.check_pixels));
  }
  trainer.Train(stream, make_validation);
}

// Trains on this instance's slice of --data through an in-process loader.
void TrainFromData(Instance& job, trainer::Trainer& trainer, metrics::Session& metrics,
                   loader::LoaderOptions loader_options,
                   const std::optional<loader::LoaderState>& start,
                   const trainer::Trainer::ValidationFactory& make_validation) {
  if (!job.has_data()) throw std::invalid_argument("--data is required without --readers");
  loader_options.epochs = job.args.epochs - (start ? start->epoch : 0);
  loader::Loader train_loader(std::move(job.train_source), loader_options, start);
  const metrics::Session::ScopedLoader metrics_loader(metrics,
                                                      [&] { return train_loader.metrics(); });
  transport::LoaderStream stream(train_loader);
  job.console.Log("instance " + std::to_string(job.rank) + " of " + std::to_string(job.mpi.size()) +
                  ": " + std::to_string(train_loader.batches_per_epoch()) + " batches per epoch, " +
                  std::to_string(job.classes) + " classes, core " + job.args.core);
  trainer.Train(stream, make_validation);
}

// The trainer's options: the flags', this run's local batch and sample size, and the
// dataset digest the checkpoints record.
trainer::TrainerOptions TrainerOptionsOf(const Instance& job) {
  trainer::TrainerOptions options = job.args.trainer;
  options.local_batch = job.args.batch_size;
  options.sample_bytes = job.args.image_size.Largest().bytes();  // core buffers hold any epoch's
  options.checkpoint_dir = job.args.checkpoint_dir;
  options.dataset_digest = job.identity ? job.identity->digest : 0;
  return options;
}

// Appends each epoch report to --json (instance 0 only).
std::unique_ptr<std::ofstream> OpenJson(const Instance& job) {
  if (job.args.json.empty() || job.rank != 0) return nullptr;
  auto json = std::make_unique<std::ofstream>(job.args.json, std::ios::app);
  if (!*json) throw std::runtime_error("cannot open --json file " + job.args.json);
  return json;
}

int Run(trainer::MpiSession& mpi, const Args& args, metrics::Session& metrics,
        tools::SignalStopper& stopper) {
  Instance job(mpi, args);
  if (job.remote()) {
    if (const std::optional<int> rc = TakeReaders(job)) return *rc;
  }
  OpenTrainData(job);
  // The BLAS runs single-threaded: parallelism comes from replicas and instances, and the
  // loader's workers need the other cores.
  trainer::SetBlasThreads(1);
  trainer::TrainerOptions options = TrainerOptionsOf(job);
  const trainer::Trainer::CoreFactory make_core = MakeCore(job);
  metrics = OpenMetrics(job, options);
  stopper.OnSignal([&metrics] { metrics.Finish("stopped"); });
  std::string metrics_exit = "completed";
  const std::unique_ptr<std::ofstream> json = OpenJson(job);
  auto report = [&](const trainer::EpochReport& r) {
    metrics.EndEpoch(r.epoch, r.loss, r.accuracy, r.val_accuracy);
    job.console.Epoch(r, mpi.size());
    if (json) *json << trainer::ToJsonLine(r) << "\n" << std::flush;
  };
  const std::optional<trainer::Checkpoint> checkpoint = ReadResumeCheckpoint(args, job.console);
  if (checkpoint) FitCheckpoint(job, *checkpoint, options);
  trainer::Trainer trainer(
      make_core, mpi, options, [&job](const std::string& line) { job.console.Log(line); }, report);
  std::ofstream trace;
  TraceSamples(job, trainer, trace);
  WatchSteps(job, trainer, metrics, metrics_exit);

  loader::LoaderOptions loader_options = LoaderOptionsOf(job, options.local_batch);
  const std::optional<loader::LoaderState> start =
      Restore(job, trainer, checkpoint, loader_options);
  if (start && start->epoch >= args.epochs) {
    job.console.Log("nothing to do: already at epoch " + std::to_string(start->epoch));
    return 0;
  }
  const trainer::Trainer::ValidationFactory make_validation = MakeValidation(job, loader_options);
  try {
    if (job.remote()) {
      TrainFromReader(job, trainer, loader_options, checkpoint, make_validation);
    } else {
      TrainFromData(job, trainer, metrics, loader_options, start, make_validation);
    }
  } catch (const TimeLimitReached&) {  // --seconds: all instances stopped after the same step
  }
  job.console.Log("done: " + std::to_string(trainer.step()) + " steps; parameter checksum " +
                  std::to_string(trainer.CheckReplicasIdentical()) + " identical on all " +
                  std::to_string(mpi.size() * options.replicas) + " replicas");
  metrics.Finish(metrics_exit);
  return 0;
}

// train's own groups of KEY=VALUE flags (tools/option_flags.h; the shared ones are in
// loader/option_specs.h). Each key's spec: its kind, range [min, max], default, help.
using loader::kNoMax;
using loader::OptionGroup;
using loader::OptionGroupKey;
using loader::OptionKind;
using loader::OptionSpec;

constexpr OptionSpec Key(OptionKind kind, double min, double max, std::string_view default_text,
                         std::string_view help) {
  return {.kind = kind, .min = min, .max = max, .default_text = default_text, .help = help};
}

constexpr OptionGroupKey kReaderKeys[] = {
    {"credits",
     Key(OptionKind::kInteger, 1, kNoMax, "4", "batches in flight or queued per instance")},
    {"timeout", loader::kReaderTimeout},
    {"data-timeout",
     Key(OptionKind::kSeconds, 0, 1e6, "0",
         "a reader that holds credits and sends no batch for this many seconds is an error, even "
         "if it heartbeats (0: 60 heartbeat intervals, 60 s)")},
    {"reconnect", loader::kReconnectWindow},
    {"check-pixels", Key(OptionKind::kNumber, 0, 1, "0.001",
                         "with --data: the share of samples decoded here to check the pixels")},
    {"curve-server-key",
     Key(OptionKind::kText, 0, kNoMax, "",
         "CURVE: the readers' public key file (tilefeed-serve --curve keygen='s .pub); one for "
         "all, or ':'-separated, one per reader")},
    {"curve-key",
     Key(OptionKind::kText, 0, kNoMax, "",
         "CURVE: this trainer's key file (secret) for readers that allow-list trainers; one, or "
         "':'-separated one per instance (default: a fresh key)")}};
constexpr OptionGroup kReaderGroup{.flag = "--reader",
                                   .help = "--readers: how this trainer talks to its reader",
                                   .keys = kReaderKeys};

constexpr OptionGroupKey kSgdKeys[] = {
    {"lr", Key(OptionKind::kNumber, 0, kNoMax, "0.02", "step size")},
    {"momentum", Key(OptionKind::kNumber, 0, 1, "0.9", "velocity decay (0: plain SGD)")},
    {"weight-decay",
     Key(OptionKind::kNumber, 0, kNoMax, "0.0001", "L2 penalty added to the gradient")}};
constexpr OptionGroup kSgdGroup{.flag = "--sgd",
                                .help = "SGD with momentum and L2 weight decay (PyTorch's rule)",
                                .keys = kSgdKeys};

constexpr OptionGroupKey kTilesKeys[] = {
    {"io",
     Key(OptionKind::kInteger, 1, 64, "1", "IO tile threads (at least one per replica is used)")},
    {"staging-depth", Key(OptionKind::kInteger, 1, 64, "3", "staged batches per replica")},
    {"compute-threads", Key(OptionKind::kInteger, 1, 1024, "1",
                            "threads of the compute tiles (replicas run side by side)")}};
constexpr OptionGroup kTilesGroup{
    .flag = "--tiles", .help = "The IO and compute tiles of each instance", .keys = kTilesKeys};

constexpr OptionGroupKey kReferenceCoreKeys[] = {
    {"hidden", Key(OptionKind::kInteger, 1, 65536, "256", "reference core: hidden units")}};
constexpr OptionGroupKey kSyntheticCoreKeys[] = {
    {"us-per-sample", Key(OptionKind::kNumber, 0, kNoMax, "2000",
                          "synthetic core: compute cost per sample, microseconds")}};

// --core NAME[:KEY=VALUE,...]: the compute core and its own keys.
void AddCoreFlag(CLI::App& app, Args& args) {
  const std::vector reference{tools::BindKey(kReferenceCoreKeys[0], args.hidden)};
  const std::vector synthetic{tools::BindKey(kSyntheticCoreKeys[0], args.us_per_sample)};
  const std::string help =
      "Compute core: reference (a small MLP on the images) or synthetic (a busy loop of known "
      "cost per sample), with its keys after a colon:" +
      tools::GroupKeysHelp(reference) + tools::GroupKeysHelp(synthetic);
  const auto take = [reference, synthetic, &args](const std::string& text, bool store) {
    const std::size_t colon = text.find(':');
    const std::string name = text.substr(0, colon);
    std::string problem =
        "must be reference[:hidden=N] or synthetic[:us-per-sample=US], got '" + text + "'";
    if (name == "reference" || name == "synthetic") {
      if (store) args.core = name;
      const auto& keys = name == "reference" ? reference : synthetic;
      problem =
          colon == std::string::npos ? "" : tools::TakeGroup(text.substr(colon + 1), keys, store);
    }
    // One line, as a group flag's (tools::AddGroupOption).
    if (!problem.empty()) throw CLI::ConversionError("--core " + problem, 2);
    return problem;
  };
  app.add_option_function<std::string>(
         "--core", [take](const std::string& text) { take(text, true); }, help)
      ->check(CLI::Validator([take](std::string& text) { return take(text, false); }, ""))
      ->type_name("NAME[:KEY=VALUE,...]")
      ->default_str(args.core);
}

// --data and the loader's options.
CLI::Option* AddDataFlags(CLI::App& app, Args& args) {
  CLI::Option* data =
      app.add_option("--data", args.data,
                     "Dataset: an ImageFolder, a root with train/ and val/ splits (val/ is "
                     "then the validation set), a shard directory or manifest of any codec, "
                     "WebDataset .tar shards, CIFAR-10's binary directory, or an http(s)/s3 URL "
                     "of shards or tars. With --readers optional: the class count "
                     "and the val/ split for local validation")
          ->check(tools::DatasetLocationCheck());
  tools::AddRemoteFlags(app, args.remote);
  // Shared options (loader/option_specs.h); train starts from its own batch size.
  tools::AddOption(app, loader::kBatchSize, args.batch_size);
  tools::AddOption(app, loader::kImageSize, args.image_size);
  tools::AddAugmentOption(app, args.augment);
  tools::AddOption(app, loader::kDecodeScaling, args.decode_scaling);
  tools::AddOption(app, loader::kWorkers, args.workers);
  tools::AddOption(app, loader::kPrefetchDepth, args.prefetch_depth);
  tools::AddOption(app, loader::kCpuShare, args.cpu_share);
  tools::AddSizeOption(app, loader::kMemoryBudget, args.memory_budget);
  tools::AddOption(app, loader::kSeed, args.seed);
  tools::AddOption(app, loader::kBadSamplePolicy, args.bad_sample_policy);
  tools::AddOption(app, loader::kBadSampleLines, args.bad_sample_lines);
  return data;
}

// Disaggregated mode: --readers and how this trainer talks to them.
void AddReaderFlags(CLI::App& app, Args& args) {
  app.add_option("--readers", args.readers,
                 "Disaggregated mode: comma-separated tilefeed-serve endpoints, exactly one "
                 "per instance (instance i reads from the i-th; a single endpoint for one "
                 "instance), e.g. tcp://h1:5555,tcp://h2:5556. The readers own slice, seed, "
                 "epochs and augmentation; start them with this --batch-size and --image-size")
      ->check(tools::ConnectEndpoints());
  const auto& k = kReaderKeys;
  tools::AddGroupOption(
      app, kReaderGroup,
      {tools::BindKey(k[0], args.reader_credits), tools::BindKey(k[1], args.reader_timeout),
       tools::BindKey(k[2], args.data_timeout), tools::BindKey(k[3], args.reconnect_window),
       tools::BindKey(k[4], args.check_pixels), tools::BindKey(k[5], args.curve_server_key),
       tools::BindKey(k[6], args.curve_key)});
}

// The compute cores, the model and the run's length.
void AddModelFlags(CLI::App& app, Args& args) {
  app.add_option("--classes", args.classes,
                 "Reference core: class count (0: from --data; needed with --readers and no "
                 "--data)")
      ->check(tools::AtLeast(0))
      ->capture_default_str();
  AddCoreFlag(app, args);
  tools::AddOption(app, loader::kEpochs, args.epochs);
  const auto& sgd = kSgdKeys;
  tools::AddGroupOption(app, kSgdGroup,
                        {tools::BindKey(sgd[0], args.trainer.sgd.learning_rate),
                         tools::BindKey(sgd[1], args.trainer.sgd.momentum),
                         tools::BindKey(sgd[2], args.trainer.sgd.weight_decay)});
  app.add_option("--max-steps", args.trainer.max_steps, "Stop after this many steps (0: all)")
      ->check(tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--seconds", args.seconds,
                 "Stop after the step that ends past this many seconds (0: no limit; the "
                 "partial epoch gets no report)")
      ->check(tools::AtLeast(0.0))
      ->capture_default_str();
}

// The IO tiles, replicas and all-reduce of one instance, and its collectives across them.
void AddParallelFlags(CLI::App& app, Args& args) {
  const auto& tiles = kTilesKeys;
  tools::AddGroupOption(app, kTilesGroup,
                        {tools::BindKey(tiles[0], args.trainer.io_tiles),
                         tools::BindKey(tiles[1], args.trainer.staging_depth),
                         tools::BindKey(tiles[2], args.trainer.compute_threads)});
  app.add_option("--replicas", args.trainer.replicas, "Compute replicas per instance")
      ->check(tools::Between(1, 64))
      ->capture_default_str();
  app.add_option("--gradient-accumulation", args.trainer.gradient_accumulation,
                 "Micro-batches per replica per step")
      ->check(tools::Between(1, 4096))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--allreduce",
         [&args](const std::string& mode) {
           args.trainer.allreduce = trainer::ParseAllreduceMode(mode);
         },
         "Gradient all-reduce: overlap (each layer's MPI_Iallreduce starts as soon as the "
         "backward pass has produced it) or blocking (one MPI_Allreduce after the backward "
         "pass)")
      ->check(CLI::IsMember({"overlap", "blocking"}))
      ->default_str(trainer::AllreduceModeName(trainer::TrainerOptions{}.allreduce));
  app.add_option("--check-every", args.trainer.check_every,
                 "Compare parameter checksums across replicas/instances every N steps (0: at "
                 "the end only)")
      ->check(tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--collective-timeout", args.collective_timeout,
                 "Seconds an instance waits in one collective (all-reduce, broadcast) before "
                 "the whole job is aborted with a line naming the instances that did not "
                 "arrive (0: wait forever)")
      ->check(tools::Between(0.0, 1e6))
      ->capture_default_str();
}

// Checkpoints, resuming, and what the run writes besides stdout.
void AddOutputFlags(CLI::App& app, Args& args) {
  app.add_option("--checkpoint-every", args.trainer.checkpoint_every,
                 "Instance 0 writes a checkpoint every N steps (0: never)")
      ->check(tools::AtLeast(0))
      ->capture_default_str();
  app.add_option("--checkpoint-dir", args.checkpoint_dir, "Checkpoint folder");
  app.add_option_function<std::string>(
         "--resume", [&args](const std::string& mode) { args.resume_if_present = !mode.empty(); },
         "Continue from the checkpoint in --checkpoint-dir (an error if there is none; "
         "--resume if-present starts fresh then). With another instance count the "
         "checkpoint's global batch is kept (more or fewer micro-batches per step, else "
         "another local batch) or the run is refused with the arithmetic; the epoch "
         "continues where it stood, no sample lost or repeated apart from the padding "
         "of its last batches")
      ->expected(0, 1)
      ->type_name("[if-present]")
      ->check(CLI::IsMember({"if-present"}));
  app.add_flag("--new-global-batch", args.new_global_batch,
               "Resume: continue with this run's global batch even if the checkpoint's differs");
  app.add_option("--json", args.json, "Append per-epoch reports to this file as JSON lines");
  tools::AddMetricsFlags(app, args.metrics, /*with_port=*/true);
}

// What parsing alone cannot check; returns the exit code for a command line to refuse.
std::optional<int> CheckArgs(const CLI::App& app, const CLI::Option* data, Args& args) {
  if (data->count() == 0 && args.readers.empty()) {
    std::fprintf(stderr, "train: --data is required (or --readers for disaggregated mode)\n");
    return 2;
  }
  const launch::EnvLookup env = launch::ProcessEnvironment();
  // poprun --replicas-per-instance R exports the layout; an explicit --replicas wins.
  const std::optional<std::string> replicas = env("TILEFEED_REPLICAS_PER_INSTANCE");
  if (replicas && app.count("--replicas") == 0) {
    args.trainer.replicas = std::max(1, std::atoi(replicas->c_str()));
  }
  args.resume = app.count("--resume") > 0 && !args.resume_if_present;
  // A test hook, not a flag (docs/development.md): read here, once.
  args.trace_samples = env("TILEFEED_TRACE_SAMPLES").value_or("");
  args.batch_size_given = app.count("--batch-size") > 0;
  args.accumulation_given = app.count("--gradient-accumulation") > 0;
  if ((args.resume || args.resume_if_present || args.trainer.checkpoint_every > 0) &&
      args.checkpoint_dir.empty()) {
    std::fprintf(stderr, "train: --resume and --checkpoint-every need --checkpoint-dir\n");
    return 2;
  }
  return std::nullopt;
}

// The tool; main() adds the last line for anything it did not catch.
int Main(int argc, char** argv) {
  Args args;
  CLI::App app{"Data-parallel training on an image dataset, fed by tilefeed."};
  const CLI::Option* data = AddDataFlags(app, args);
  AddReaderFlags(app, args);
  AddModelFlags(app, args);
  AddParallelFlags(app, args);
  AddOutputFlags(app, args);
  if (const std::optional<int> rc = tools::ParseArgs(app, argc, argv, "train")) return *rc;
  args.options_text = metrics::OptionsOf(app);
  if (const std::optional<int> rc = CheckArgs(app, data, args)) return *rc;

  metrics::Session metrics;  // opened by Run; a signal then writes its end record, "stopped"
  tools::SignalStopper stopper(/*die=*/true);  // before MPI starts threads
  std::optional<trainer::MpiSession> mpi;
  try {
    trainer::MpiSessionOptions mpi_options;
    mpi_options.collective_timeout = tools::Milliseconds(args.collective_timeout);
    mpi.emplace(&argc, &argv, mpi_options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
  try {
    return Run(*mpi, args, metrics, stopper);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: instance %d: %s\n", mpi->rank(), e.what());
    metrics.Finish("error", e.what());
    // The other instances would wait for this one in their next collective forever.
    if (mpi->size() > 1) mpi->Abort(1);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) { return tilefeed::tools::RunMain("train", Main, argc, argv); }
