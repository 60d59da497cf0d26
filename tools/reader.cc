// tilefeed-serve: the reader half of disaggregated mode. It loads a dataset with the usual
// loader options and serves the batches to one trainer instance (`train --readers`) over
// ZeroMQ, or through shared memory on the same host:
//
//   tilefeed-serve --data /data/train --bind tcp://10.0.0.5:5555 --batch-size 256 --epochs 90
//       --slice 0/2 --drop-last --curve secret-key=reader.key,allow=trainers/
//   tilefeed-serve --data /data/train --bind shm://job7-r0 ...   (train --readers shm://job7-r0)
//
// The session (hello and its terms, --resume, serving the next trainer after one leaves,
// SIGINT/SIGTERM), the loopback rule and CURVE are docs/wire-protocol.md's.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>

#include "loader/address.h"
#include "loader/option_specs.h"
#include "metrics/cli.h"
#include "tilefeed/launch/launch.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/session.h"
#include "tools/cli_checks.h"
#include "tools/option_flags.h"
#include "tools/remote_flags.h"
#include "tools/signal_stopper.h"
#include "transport/curve.h"
#include "transport/loader_terms.h"
#include "transport/reader_endpoint.h"

namespace {

using namespace tilefeed;

struct Args {
  std::string data;
  std::string split = "train";
  std::size_t bad_sample_lines = 20;
  std::optional<loader::InstanceSlice> slice;  // --slice INDEX/COUNT
  double heartbeat = 1;                        // seconds
  double timeout = 5;                          // seconds
  // Defaults are train's (tools/train.cc), so `tilefeed-serve --data DIR` and
  // `train --readers ... --data DIR` agree unless told otherwise.
  loader::LoaderOptions options = [] {
    loader::LoaderOptions o;
    o.batch_size = 32;
    o.epochs = 3;
    o.drop_last_batch = true;
    return o;
  }();
  transport::ReaderEndpointOptions sender;
  std::string curve_keygen;
  std::string curve_allow;  // --curve allow=: ':'-separated files or directories
  bool insecure = false;
  loader::RemoteOptions remote;
  metrics::Flags metrics;
  std::string resume;                         // --resume: a LoaderState line; "" when not given
  std::optional<loader::LoaderState> pinned;  // --resume's state: serve only that position
};

// The dataset and the loader that reads it: the shared options (loader/option_specs.h).
void AddDataFlags(CLI::App& app, Args& args) {
  loader::LoaderOptions& options = args.options;
  app.add_option("--data", args.data,
                 "Dataset: an ImageFolder, a root with train/ and val/ splits (--split picks "
                 "one), a shard directory or manifest of any codec, or CIFAR-10's binary "
                 "directory (required unless --curve keygen=)")
      ->check(tools::DatasetLocationCheck());
  tools::AddOption(app, loader::kBadSamplePolicy, options.bad_sample_policy);
  tools::AddOption(app, loader::kBadSampleLines, args.bad_sample_lines);
  tools::AddRemoteFlags(app, args.remote);
  tools::AddOption(app, loader::kSplit, args.split);
  tools::AddLoaderFlags(app, options);
}

// Which epochs and which slice of each this reader serves.
void AddSliceFlags(CLI::App& app, Args& args) {
  loader::LoaderOptions& options = args.options;
  tools::AddOption(app, loader::kEpochs, options.epochs);
  app.add_option("--resume", args.resume,
                 "serve only a trainer at this data position: a LoaderState line as a checkpoint "
                 "stores it (\"tilefeed-loader-state v1 seed=S epoch=E position=P size=N\"), "
                 "whose seed is the reader's")
      ->type_name("STATE")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              (void)loader::LoaderState::Parse(text);
              return {};
            } catch (const std::invalid_argument& e) {
              return std::string("must be a loader state line: ") + e.what();
            }
          },
          ""))
      ->excludes("--seed");
  tools::AddOption(app, loader::kDropLast, options.drop_last_batch);
  tools::AddSliceOption(app, args.slice);
}

// --curve: CURVE encryption and the trainers it admits (transport/curve.h).
constexpr loader::OptionGroupKey kCurveKeys[] = {
    {"keygen", {.help = "write a CURVE key pair to PREFIX.key (secret) and PREFIX.pub, then exit"}},
    {"secret-key",
     {.help = "encrypt with CURVE using this secret key file (trainers get the .pub)"}},
    {"allow",
     {.help = "admit only trainers whose public key is in these ':'-separated files (or the "
              "*.pub files of these directories); needs secret-key"}}};
constexpr loader::OptionGroup kCurveGroup{
    .flag = "--curve", .help = "CURVE (keygen= makes the keys)", .keys = kCurveKeys};

// Where and how the batches are served.
void AddServeFlags(CLI::App& app, Args& args) {
  args.sender.endpoint = "tcp://127.0.0.1:5555";
  tools::AddGroupOption(app, kCurveGroup,
                        {tools::BindKey(kCurveKeys[0], args.curve_keygen),
                         tools::BindKey(kCurveKeys[1], args.sender.curve_secret_key_file),
                         tools::BindKey(kCurveKeys[2], args.curve_allow)});
  app.add_option("--bind", args.sender.endpoint,
                 "endpoint to serve on: tcp://HOST:PORT, ipc://PATH, or shm://NAME (same host, "
                 "zero-copy shared memory); a non-loopback HOST needs --curve allow= or "
                 "--insecure")
      ->check(tools::BindEndpoint())
      ->capture_default_str();
  app.add_flag("--insecure", args.insecure,
               "allow a non-loopback --bind without CURVE (a trusted network only)");
  tools::AddOption(app, loader::kHeartbeat, args.heartbeat);
  tools::AddOption(app, loader::kPeerTimeout, args.timeout);
  tools::AddMetricsFlags(app, args.metrics, /*with_port=*/true);
}

// --curve keygen=PREFIX: writes the key pair and returns the exit code.
int KeyGen(const std::string& prefix) {
  try {
    transport::WriteCurveKeyFiles(transport::GenerateCurveKeyPair(), prefix + ".key",
                                  prefix + ".pub");
  } catch (const std::exception& e) {
    std::cerr << "tilefeed-serve: " << e.what() << '\n';
    return 1;
  }
  std::cerr << "tilefeed-serve: wrote " << prefix << ".key (keep it secret) and " << prefix
            << ".pub (for the trainer)\n";
  return 0;
}

// What parsing alone cannot check, and the options it decides; returns the exit code for a
// command line to refuse.
std::optional<int> CheckArgs(Args& args) {
  if (args.data.empty()) {
    std::cerr << "tilefeed-serve: --data is required\n";
    return 2;
  }
  transport::ReaderEndpointOptions& sender = args.sender;
  if (!args.curve_allow.empty() && sender.curve_secret_key_file.empty()) {
    std::cerr << "tilefeed-serve: --curve allow= needs secret-key=FILE\n";
    return 2;
  }
  // Checked here on the text (a host name resolved) before the data is opened, and by the
  // sender on what ZeroMQ actually bound.
  // The loopback rule and its line are the metrics port's too (loader/address.h).
  sender.loopback_only = args.curve_allow.empty() && !args.insecure;
  if (sender.loopback_only && !transport::IsLoopbackEndpoint(sender.endpoint)) {
    std::cerr << "tilefeed-serve: --bind " << sender.endpoint << ": "
              << loader::NotLoopback(transport::ParseEndpoint(sender.endpoint, true).host)
              << "; serve it with CURVE and an allow-list (--curve secret-key=,allow=) "
                 "or pass --insecure\n";
    return 2;
  }
  sender.heartbeat_interval = tools::Milliseconds(args.heartbeat);
  sender.peer_timeout = tools::Milliseconds(args.timeout);
  return std::nullopt;
}

void Log(const std::string& line) {
  std::cerr << "tilefeed-serve: " << loader::detail::RedactUrl(line) << '\n';
}

// The metrics of the run; each session's loader feeds them while it serves, and the sender
// detaches it before the loader may go.
metrics::Session OpenMetrics(Args& args, const CLI::App& app, const loader::Source& source) {
  const loader::LoaderOptions& o = args.options;
  // One --metrics port= for the instances of a host started by a launcher: P + local index.
  if (!args.metrics.port.empty()) {
    args.metrics.port_offset = launch::DetectInstance(launch::ProcessEnvironment()).local_index;
  }
  return metrics::Open(
      args.metrics,
      {"tilefeed-serve", metrics::OptionsOf(app), args.data, source.size(),
       source.class_names().size(), o.slice.index, o.slice.count,
       o.prefetch_depth * o.batch_size * o.image_size.Largest().bytes(), false, o.image_size});
}

// The last line: how the run ended, and its batch and byte rates.
void PrintSummary(const Args& args, transport::SendResult result, std::uint64_t batches,
                  double seconds) {
  const loader::LoaderOptions& o = args.options;
  const double slot_bytes = static_cast<double>(o.batch_size * o.image_size.Largest().bytes());
  const double mb = static_cast<double>(batches) * slot_bytes / 1e6;
  std::cerr << "tilefeed-serve: "
            << (result == transport::SendResult::kCompleted  ? "done"
                : result == transport::SendResult::kPeerLeft ? "trainer left"
                                                             : "stopped")
            << ": " << batches << " batches in " << seconds << " s, "
            << static_cast<double>(batches) / seconds << " batches/s, about " << mb / seconds
            << " MB/s\n";
}

const char* ExitName(transport::SendResult result) {
  return result == transport::SendResult::kCompleted  ? "completed"
         : result == transport::SendResult::kPeerLeft ? "peer_left"
                                                      : "stopped";
}

// Opens the data and serves trainers until one has every epoch or a stop is requested.
int Serve(Args& args, const CLI::App& app, std::stop_token stop) {
  tools::LogBadSamples(args.options, "tilefeed-serve: ", args.bad_sample_lines);
  loader::DatasetOptions dataset_options;
  dataset_options.split = *loader::ParseSplit(args.split);
  dataset_options.remote = tools::ToRemoteOptions(args.remote);
  loader::OpenedDataset opened = loader::OpenDataset(args.data, dataset_options);
  Log("data: " + opened.summary);
  for (const std::string& note : opened.notes) Log("data: " + note);
  const std::unique_ptr<loader::Source> source = std::move(opened.source);
  transport::SessionTerms terms =
      transport::TermsOf(args.options, loader::Identify(*source), args.options.epochs,
                         args.pinned.value_or(loader::LoaderState{}));
  terms.position_pinned = args.pinned.has_value();
  if (args.pinned && args.pinned->dataset_size != source->size()) {
    throw std::invalid_argument("--resume: the state is for a dataset of " +
                                std::to_string(args.pinned->dataset_size) +
                                " samples; --data has " + std::to_string(source->size()));
  }
  transport::ReaderEndpointOptions& sender_options = args.sender;
  if (!args.curve_allow.empty()) {
    sender_options.curve_allowed_keys =
        transport::ReadCurvePublicKeys(tools::SplitList(args.curve_allow, ':'));
    sender_options.on_refused = Log;
  }
  sender_options.log = Log;
  sender_options.keep_serving = true;
  // Each session opens the dataset afresh at the trainer's position; with shared memory
  // the loader decodes straight into fresh slots the trainer maps.
  const std::uint64_t dataset_size = source->size();
  const bool shared_memory = transport::IsShmEndpoint(sender_options.endpoint);
  const std::string shm_name = sender_options.endpoint.substr(6);  // shm://NAME: the segment's
  auto open = [&](const transport::SessionTerms& agreed) {
    transport::SessionLoader session =
        transport::SessionLoaderOf(args.options, agreed, dataset_size);
    if (shared_memory)
      session.options.slot_memory = transport::SharedSlots::Create(session.options, shm_name);
    Log("serving a trainer from epoch " + std::to_string(session.start.epoch) + " position " +
        std::to_string(session.start.position));
    return std::make_unique<loader::Loader>(loader::OpenDataset(args.data, dataset_options).source,
                                            session.options, session.start);
  };
  metrics::Session metrics = OpenMetrics(args, app, *source);
  sender_options.on_loader = [&metrics](const loader::Loader* serving) {
    if (serving == nullptr) {
      metrics.SetLoader({});
    } else {
      metrics.SetLoader([serving] { return serving->metrics(); });
    }
  };
  // A ring /dev/shm has no room for is one line now, not a SIGBUS at the first batch: each
  // session's ring is allocated in full (posix_fallocate), and so is this trial one.
  if (shared_memory && args.options.prefetch_depth == loader::kAutoDepth) {
    Log("--prefetch-depth auto needs the loader's own slots; shm:// shares a fixed ring: give a "
        "depth");
    return 2;
  }
  if (shared_memory) (void)transport::SharedSlots::Create(args.options, shm_name);
  transport::Context context;
  transport::ReaderEndpoint sender(context, sender_options, terms, open);
  std::cerr << "tilefeed-serve: serving " << dataset_size << " samples, epochs 0 to "
            << args.options.epochs - 1 << " (slice " << args.options.slice.index << "/"
            << args.options.slice.count << ") on " << sender.endpoint() << '\n';
  const auto start = std::chrono::steady_clock::now();
  const transport::SendResult result = sender.Run(stop);
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  metrics.SetLoader({});  // the last session's loader goes with the sender
  metrics.Finish(ExitName(result));
  PrintSummary(args, result, sender.batches_sent(), seconds.count());
  return result == transport::SendResult::kStopped ? 130 : 0;
}

// The tool; main() adds the last line for anything it did not catch.
int Main(int argc, char** argv) {
  CLI::App app{"tilefeed-serve: serve a dataset's batches to a trainer over ZeroMQ"};
  Args args;
  AddDataFlags(app, args);
  AddSliceFlags(app, args);
  AddServeFlags(app, args);
  if (const auto rc = tools::ParseArgs(app, argc, argv, "tilefeed-serve")) return *rc;
  if (!args.curve_keygen.empty()) return KeyGen(args.curve_keygen);
  if (!args.resume.empty()) {  // the position (and seed, and dataset size) a trainer must have
    args.pinned = loader::LoaderState::Parse(args.resume);
    args.options.seed = args.pinned->seed;  // the trainer's seed is the reader's
  }
  if (const std::optional<int> rc = CheckArgs(args)) return *rc;

  tools::SignalStopper stopper;
  try {
    // The slice served: --slice, else the launcher's.
    if (!args.slice)
      args.slice = launch::SliceOf(launch::DetectInstance(launch::ProcessEnvironment()));
    args.options.slice = *args.slice;
    return Serve(args, app, stopper.token());
  } catch (const std::exception& e) {
    std::cerr << "tilefeed-serve: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return tilefeed::tools::RunMain("tilefeed-serve", Main, argc, argv);
}
