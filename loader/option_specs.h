#pragma once

// The shared options: one definition of each option that more than one front end of the
// loader takes -- the command-line tools (train, tilefeed-serve, tilefeed-pack), the benchmark
// drivers and the Python binding (tilefeed.Loader's keywords). Each OptionSpec gives the
// option's command-line flag, its Python keyword, the kind of value, the accepted range, the
// default and the help text. Front ends read them from here and never restate them, so a range
// or a default cannot drift between the tools, Python and the library:
//
//   - the library's one check of the options, OptionsProblem() (loader.h; RemoteOptionsProblem()
//     in remote.h), tests the ranges with RangeProblem(), so an option the tools accept the
//     library accepts too;
//   - tools/option_flags.h registers a spec as a CLI11 flag (the library does not use CLI11);
//   - the Python binding takes the keyword names from here and leaves every range to
//     OptionsProblem(): a bad keyword value is a ValueError with its line.
//
// One word per idea, as docs/architecture.md lists them ("--slice" is an instance's share,
// never "shard"); a size is written as ParseByteSize reads it, a duration in seconds.
//
// A range error reads "NAME must be RANGE, got VALUE", RANGE from RangeText(): "at least 1",
// "above 0", "between 1 and 16384". Every front end words it so.
//
// Adding a shared option: docs/architecture.md, "Add an option".
//
// Everything here is constant data and pure functions: safe from any thread.

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace tilefeed::loader {

// What an option's value is.
enum class OptionKind {
  kInteger,  // a whole number in [min, max]
  kNumber,   // a finite real number in [min, max]
  kSeconds,  // a duration: a real number of seconds in [min, max]
  kSize,     // a byte count in [min, max], written as ParseByteSize reads it
  kChoice,   // one of `choices`
  kFlag,     // on or off (a command-line flag without a value; Python: a bool)
  kSlice,    // INDEX/COUNT with 0 <= INDEX < COUNT (Python: a pair (index, count))
  kText,     // any text (a path, a URL)
};

// No upper bound (RangeText says "at least MIN").
inline constexpr double kNoMax = std::numeric_limits<double>::infinity();

struct OptionSpec {
  std::string_view flag = {};  // the command-line spelling, "--image-size"
  // The Python name: a tilefeed.Loader keyword ("image_size") or a field of the object a
  // keyword takes (cache_limit of remote=tilefeed.RemoteOptions); "" when Python has none.
  std::string_view keyword = {};
  OptionKind kind = OptionKind::kText;
  double min = 0;              // kInteger, kNumber, kSeconds, kSize: the lowest value
  double max = kNoMax;         // the highest value, or kNoMax
  bool min_exclusive = false;  // the value must be above min (durations where 0 is meaningless)
  // The default, as a command line would write it ("224", "train", "10GiB"); "" when the
  // option has none (off, unset, or each front end's own, which its help then states).
  std::string_view default_text = {};
  std::string_view help = {};  // one sentence without the default (front ends show it)
  std::span<const std::string_view> choices = {};  // kChoice: the accepted values
  // kInteger: "auto" is accepted too and stands for this value (kAutoWorkers, kAutoDepth),
  // which is outside the range: the number itself is refused.
  std::optional<double> auto_value = {};
};

// A number as a command line or Python writes it: 1000000, not 1e+06; otherwise the shortest
// text that reads back as the same double (0.1, 1e-07).
std::string NumberText(double value);

// "at least 1", "above 0", "between 1 and 16384", "at least 4MiB"; "" for kinds without a
// numeric range.
std::string RangeText(const OptionSpec& spec);

// Whether `value` lies in spec's range (NaN never does).
bool InRange(const OptionSpec& spec, double value);

// nullopt when `value` is in range, else "NAME must be RANGE, got VALUE" with NAME as given
// (a flag, a keyword, "LoaderOptions: image_size") and VALUE written like a command line
// would (whole numbers without a fraction).
std::optional<std::string> RangeProblem(const OptionSpec& spec, std::string_view name,
                                        double value);

// A byte count written "128MiB", "64M", "1g", "500000000" or "1000KB": binary units (k, m, g,
// t with or without "iB") unless written "KB", "MB", "GB", "TB"; case does not matter.
// nullopt for anything else or a count that does not fit 64 bits.
std::optional<std::uint64_t> ParseByteSize(std::string_view text);

// `bytes` in the largest binary unit that divides it: "10GiB", "4MiB", "1000".
std::string ByteSizeText(std::uint64_t bytes);

// "INDEX/COUNT" (e.g. "1/4") as (index, count), or nullopt unless 0 <= INDEX < COUNT.
std::optional<std::pair<int, int>> ParseSliceText(std::string_view text);

// ---- The table ----------------------------------------------------------------------------
// Loader options (LoaderOptions; the defaults are its defaults, which a test checks).

inline constexpr std::string_view kModeChoices[] = {"train", "eval"};
inline constexpr std::string_view kBadSamplePolicyChoices[] = {"skip", "fail"};
inline constexpr std::string_view kDecodeScalingChoices[] = {"exact", "fast"};
inline constexpr std::string_view kSplitChoices[] = {"train", "val", "test"};
inline constexpr std::string_view kS3AddressingChoices[] = {"auto", "virtual", "path"};

inline constexpr OptionSpec kBatchSize{.flag = "--batch-size",
                                       .keyword = "batch_size",
                                       .kind = OptionKind::kInteger,
                                       .min = 1,
                                       .default_text = "256",
                                       .help = "samples per batch"};
inline constexpr OptionSpec kImageSize{.flag = "--image-size",
                                       .keyword = "image_size",
                                       .kind = OptionKind::kInteger,
                                       .min = 1,
                                       .max = 16384,
                                       .default_text = "224",
                                       .help =
                                           "output image size per epoch: 224, HxW, a schedule "
                                           "160,8:224 or ramp:160,192,0,8 (docs/options.md)"};
inline constexpr OptionSpec kMode{
    .flag = "--mode",
    .keyword = "mode",
    .kind = OptionKind::kChoice,
    .default_text = "train",
    .help = "train: the augment list (RandomResizedCrop first); eval: resize + centre crop",
    .choices = kModeChoices};
inline constexpr OptionSpec kEvalResize{
    .flag = "--eval-resize",
    .keyword = "eval_resize",
    .kind = OptionKind::kInteger,
    .min = 1,
    .default_text = "256",
    .help =
        "eval: the shorter side is resized to this before the centre crop (at least the "
        "image size)"};
inline constexpr OptionSpec kDecodeScaling{
    .flag = "--decode-scaling",
    .keyword = "decode_scaling",
    .kind = OptionKind::kChoice,
    .default_text = "exact",
    .help =
        "exact: JPEG train crops decode at 1/2, 1/4 or 1/8 scale where they stay at least "
        "the output; fast: 3/8 too, and eval too (decode cost falls with the output size; "
        "pixels further from torchvision's)",
    .choices = kDecodeScalingChoices};
inline constexpr OptionSpec kAugment{
    .flag = "--augment",
    .keyword = "augment",
    .default_text = "RandomResizedCrop(), RandomHorizontalFlip()",
    .help =
        "train: torchvision's transforms in order, RandomResizedCrop first (docs/augment.md), "
        "e.g. 'RandomResizedCrop(), RandomHorizontalFlip(), RandAugment(2, 9), "
        "RandomErasing(0.25)'"};
inline constexpr OptionSpec kWorkers{
    .flag = "--workers",
    .keyword = "workers",
    .kind = OptionKind::kInteger,
    .min = 0,
    .max = 1024,
    .default_text = "0",
    .help =
        "decode threads (0: one per core this process may run on; auto: tuned while the "
        "consumer waits, within --cpu-share)",
    .auto_value = -1};
// tilefeed-pack's --workers: packing has no tuner, so no "auto".
inline constexpr OptionSpec kPackWorkers{
    .flag = "--workers",
    .kind = OptionKind::kInteger,
    .min = 0,
    .max = 1024,
    .default_text = "0",
    .help = "read/convert threads (0: one per core this process may run on)"};
inline constexpr OptionSpec kPrefetchDepth{
    .flag = "--prefetch-depth",
    .keyword = "prefetch_depth",
    .kind = OptionKind::kInteger,
    .min = 1,
    .max = 1 << 20,
    .default_text = "4",
    .help =
        "batch slots; memory in flight is depth x batch bytes (auto: deepened while batches "
        "come in bursts, within --memory-budget)",
    .auto_value = 0};
inline constexpr OptionSpec kCpuShare{
    .flag = "--cpu-share",
    .keyword = "cpu_share",
    .kind = OptionKind::kNumber,
    .min = 0,
    .max = 1,
    .min_exclusive = true,
    .default_text = "0.75",
    .help = "workers auto: the share of this process's cores the decode threads may take"};
inline constexpr OptionSpec kMemoryBudget{
    .flag = "--memory-budget",
    .keyword = "memory_budget",
    .kind = OptionKind::kSize,
    .min = 0,
    .help =
        "bytes all batch slots may take, at most the memory this process may use (0: 3/4 of "
        "it)"};
inline constexpr OptionSpec kSeed{.flag = "--seed",
                                  .keyword = "seed",
                                  .kind = OptionKind::kInteger,
                                  .min = 0,
                                  .default_text = "0",
                                  .help = "shuffle and augmentation seed"};
inline constexpr OptionSpec kSlice{
    .flag = "--slice",
    .keyword = "slice",
    .kind = OptionKind::kSlice,
    .help =
        "INDEX/COUNT: this instance's share of every epoch (default: the launcher's "
        "instance, e.g. under mpirun or poprun; else 0/1)"};
inline constexpr OptionSpec kEpochs{
    .flag = "--epochs",
    .keyword = "epochs",
    .kind = OptionKind::kInteger,
    .min = 1,
    .help = "epochs to produce, at least 1"};  // the default is each front end's own
inline constexpr OptionSpec kDropLast{
    .flag = "--drop-last",
    .keyword = "drop_last_batch",
    .kind = OptionKind::kFlag,
    .help = "drop each epoch's final partial batch of this instance"};
inline constexpr OptionSpec kBadSamplePolicy{
    .flag = "--bad-sample-policy",
    .keyword = "bad_sample_policy",
    .kind = OptionKind::kChoice,
    .default_text = "skip",
    .help =
        "skip: a sample that cannot be read or decoded is replaced by the next good one "
        "of the instance's epoch order, named and counted; fail: the run stops at the "
        "first, naming it",
    .choices = kBadSamplePolicyChoices};
inline constexpr OptionSpec kMaxSubstituteAttempts{
    .flag = "--max-substitute-attempts",
    .kind = OptionKind::kInteger,
    .min = 1,
    .default_text = "64",
    .help = "skip: samples tried for one bad sample before the batch fails"};
inline constexpr OptionSpec kHeldSlotsTimeout{
    .flag = "--held-slots-timeout",
    .kind = OptionKind::kSeconds,
    .min = 0,
    .max = 1e9,
    .help =
        "seconds to wait for a batch while the consumer itself holds every slot, then "
        "fail (the library's default waits forever; Python's Loader waits 10)"};

// Opening a dataset (DatasetOptions, RemoteOptions).

inline constexpr OptionSpec kSplit{
    .flag = "--split",
    .keyword = "split",
    .kind = OptionKind::kChoice,
    .default_text = "train",
    .help =
        "the split of a root with train/, val/ or test/ folders (that folder), or CIFAR-10's "
        "(val and test: test_batch.bin)",
    .choices = kSplitChoices};
inline constexpr OptionSpec kCacheDir{
    .flag = "--cache-dir",
    .keyword = "cache_dir",
    .help =
        "http(s)/s3 datasets: on-disk cache of fetched blocks, shared by your processes on "
        "this host; yours alone, 0700 (default: no cache)"};
inline constexpr OptionSpec kCacheLimit{
    .flag = "--cache-limit",
    .keyword = "cache_limit",
    .kind = OptionKind::kSize,
    .min = 4 << 20,
    .default_text = "10GiB",
    .help = "size bound of all the cache holds (e.g. 20GiB); least recently used go first"};
inline constexpr OptionSpec kS3Endpoint{
    .flag = "--s3-endpoint",
    .keyword = "s3_endpoint",
    .help =
        "s3:// datasets: S3-compatible endpoint URL (e.g. http://minio:9000); default "
        "$AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS"};
inline constexpr OptionSpec kS3Addressing{
    .flag = "--s3-addressing",
    .kind = OptionKind::kChoice,
    .default_text = "auto",
    .help =
        "s3:// datasets: bucket in the host name (virtual) or in the path (path); auto: "
        "virtual on AWS for DNS-safe bucket names, path elsewhere",
    .choices = kS3AddressingChoices};
inline constexpr OptionSpec kRemoteRetries{
    .flag = "--remote-retries",
    .keyword = "remote_retries",
    .kind = OptionKind::kInteger,
    .min = 0,
    .max = 20,
    .default_text = "5",
    .help =
        "http(s)/s3 datasets: retries of a failed request, with backoff, before the "
        "sample is reported bad"};
inline constexpr OptionSpec kRemoteInFlight{
    .flag = "--remote-in-flight",
    .kind = OptionKind::kInteger,
    .min = 1,
    .max = 64,
    .default_text = "8",
    .help =
        "http(s)/s3 datasets: requests one read keeps in flight at once, each on its own "
        "connection (1: one after another)"};

// Reporting bad samples (the tools' stderr).

inline constexpr OptionSpec kBadSampleLines{
    .flag = "--bad-sample-lines",
    .kind = OptionKind::kInteger,
    .min = 0,
    .default_text = "20",
    .help = "bad samples named in full on stderr; later ones are counted"};

// A reader session (tilefeed-serve and train --reader): durations in seconds.

inline constexpr OptionSpec kHeartbeat{.flag = "--heartbeat",
                                       .kind = OptionKind::kSeconds,
                                       .min = 0.001,
                                       .max = 3600,
                                       .default_text = "1",
                                       .help = "seconds between heartbeats"};
inline constexpr OptionSpec kPeerTimeout{
    .flag = "--timeout",
    .kind = OptionKind::kSeconds,
    .min = 0.001,
    .max = 1e6,
    .default_text = "5",
    .help = "seconds of silence (no heartbeat, no batch) after which the peer is lost"};
inline constexpr OptionSpec kReaderTimeout{
    .flag = "--reader-timeout",
    .kind = OptionKind::kSeconds,
    .min = 0.001,
    .max = 1e6,
    .default_text = "5",
    .help = "seconds a reader may be silent (or not answer at start) before it is an error"};
inline constexpr OptionSpec kReconnectWindow{
    .flag = "--reconnect-window",
    .kind = OptionKind::kSeconds,
    .min = 0.001,
    .max = 1e6,
    .help =
        "reconnect a lost reader (stopped, died, replaced) within this many seconds and go on "
        "from this trainer's position (not given: a lost reader is an error)"};

// A group: one command-line flag of KEY=VALUE pairs for a family of options,
// "--remote cache-dir=DIR,cache-limit=20GiB". Each key keeps its spec, checked and shown as a
// flag's ("--remote cache-limit must be at least 4MiB, got 1M"); its name is the Python name
// with '-' for '_' (remote=tilefeed.RemoteOptions(cache_limit=...)), else any spec's flag.
struct OptionGroupKey {
  std::string_view key;  // "cache-limit"
  OptionSpec spec;
};
struct OptionGroup {
  std::string_view flag;  // "--remote"
  std::string_view help;  // one sentence; --help adds the keys
  std::span<const OptionGroupKey> keys;
};

// RemoteOptions (tilefeed/loader/remote.h); Python's remote=tilefeed.RemoteOptions(...).
inline constexpr OptionGroupKey kRemoteKeys[] = {
    {"cache-dir", kCacheDir},           {"cache-limit", kCacheLimit},
    {"s3-endpoint", kS3Endpoint},       {"s3-addressing", kS3Addressing},
    {"remote-retries", kRemoteRetries}, {"remote-in-flight", kRemoteInFlight},
};
inline constexpr OptionGroup kRemote{.flag = "--remote",
                                     .help = "http(s)/s3 datasets: how they are read and cached",
                                     .keys = kRemoteKeys};

// The tools' metrics stream (metrics/cli.h, docs/metrics.md): tools only, its keys never were
// flags (no spec flag) and are no SharedOptions().
inline constexpr OptionGroupKey kMetricsKeys[] = {
    {"file",
     {.help = "write the metrics stream as JSON lines to this file; {instance} in the name is "
              "the instance index, else several instances write FILE.INDEX.EXT"}},
    {"interval",
     {.kind = OptionKind::kSeconds,
      .min_exclusive = true,
      .default_text = "10",
      .help = "seconds between interval records"}},
    {"port",
     {.help = "serve them at http://HOST:PORT/metrics (Prometheus); PORT, or HOST:PORT with a "
              "loopback HOST (a reader's rule); the instances of a host take PORT + local "
              "index; 0: free ports; each prints its URL"}},
    {"bind",
     {.help = "the HOST a bare port= listens on instead of 127.0.0.1, loopback or not "
              "(0.0.0.0: every interface; the endpoint has no authentication)"}},
};
inline constexpr OptionGroup kMetrics{
    .flag = "--metrics", .help = "the metrics stream (docs/metrics.md)", .keys = kMetricsKeys};

// Every group above.
inline constexpr const OptionGroup* kOptionGroups[] = {&kRemote, &kMetrics};

// Every spec above, in this order.
std::span<const OptionSpec> SharedOptions();

// The spec whose flag or keyword is `name`, or nullptr.
const OptionSpec* FindOption(std::string_view name);

}  // namespace tilefeed::loader
