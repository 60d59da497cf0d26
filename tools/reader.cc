// tilefeed-serve: the reader half of disaggregated mode. It loads an ImageFolder with the
// usual loader options and serves the batches to one trainer over ZeroMQ (or, on the same
// host, through shared memory that the loader decodes into and the trainer reads in place),
// which reads them with `--readers <endpoint>` (transport::ZmqBatchStream).
//
//   tilefeed-serve --data /data/train --bind tcp://10.0.0.5:5555 --batch-size 256 --epochs 90
//       --instance-index 0 --instance-count 2 --drop-last --curve-secret-key reader.key
//       --curve-allow trainers/
//   tilefeed-serve --data /data/train --bind shm://job7-r0 ...   (train --readers shm://job7-r0)
//
// One reader serves one trainer instance: reader i takes instance i's shard, given by
// --instance-index/--instance-count (or --shard INDEX/COUNT), else by the launcher's
// environment when the readers themselves run under poprun/mpirun (one per rank), else the
// whole dataset.
//
// A trainer states what it expects in its hello (tilefeed/transport/session.h): dataset identity,
// slice, seed, image size, batch size, mode, drop-last, epochs and its data position. Any
// difference refuses it with one line naming both values. --epochs is the job's epoch
// count, as train's (a resumed job's reader is started with the same --epochs). Each
// session opens the dataset afresh at the trainer's position, unless --first-epoch or
// --first-epoch-position pin one, which a trainer must then be at. After a trainer leaves
// or fails the reader waits for the next, so a trainer restarted from a checkpoint (or
// running with --reconnect) continues; it exits once a trainer has received every epoch.
// SIGINT/SIGTERM stop it; the trainer is told that the stream stopped early (an error).
//
// It binds loopback unless told otherwise. A non-loopback --bind needs CURVE with an
// allow-list (--curve-secret-key and --curve-allow), or --insecure for a network that is
// trusted. Loopback is what ZeroMQ actually bound (ZMQ_LAST_ENDPOINT), and --bind is read
// as ZeroMQ reads it: tcp://SOURCE;DEST is refused, a host name is resolved.
//
// On a network that is not trusted, turn on CURVE (tilefeed/transport/curve.h): make a key pair
// once with `tilefeed-serve --curve-keygen reader` (writes reader.key, mode 0600, and reader.pub),
// serve with `--curve-secret-key reader.key`, and give the trainer reader.pub. To admit only known
// trainers, make each trainer a key pair the same way and serve with
// `--curve-allow trainer1.pub trainer2.pub` (or a directory of *.pub files); any other key is
// refused during the handshake, with a line on stderr. The trainer then runs with
// `--curve-server-key reader.pub --curve-key trainer1.key`.

#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "metrics/cli.h"
#include "tilefeed/launch/instance.h"
#include "tilefeed/loader/bad_sample_log.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/transport/context.h"
#include "tilefeed/transport/curve.h"
#include "tilefeed/transport/sender.h"
#include "tilefeed/transport/session.h"
#include "tools/cli_checks.h"
#include "tools/remote_flags.h"

namespace {

// Turns SIGINT/SIGTERM into a stop request. The signals are blocked in every thread (set
// before any thread starts) and taken here with sigtimedwait, so no handler runs.
class SignalStopper {
 public:
  SignalStopper()
      : thread_([source = source_](std::stop_token token) mutable {
          sigset_t set;
          sigemptyset(&set);
          sigaddset(&set, SIGINT);
          sigaddset(&set, SIGTERM);
          const timespec tick{0, 200'000'000};
          while (!token.stop_requested()) {
            if (sigtimedwait(&set, nullptr, &tick) > 0) {
              source.request_stop();
              return;
            }
          }
        }) {}

  std::stop_token token() const { return source_.get_token(); }

  static void BlockSignals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }

 private:
  std::stop_source source_;
  std::jthread thread_;
};

// What this reader serves, as a trainer must agree to it.
tilefeed::transport::SessionTerms TermsOf(const tilefeed::loader::LoaderOptions& options,
                                          const tilefeed::transport::DatasetIdentity& dataset,
                                          bool position_pinned) {
  using tilefeed::loader::Mode;
  using tilefeed::loader::Remainder;
  tilefeed::transport::SessionTerms terms;
  terms.dataset = dataset;
  terms.slice_index = static_cast<std::uint32_t>(options.slice.index);
  terms.slice_count = static_cast<std::uint32_t>(options.slice.count);
  terms.seed = options.seed;
  terms.image_size = static_cast<std::uint32_t>(options.image_size);
  terms.batch_size = static_cast<std::uint32_t>(options.batch_size);
  terms.mode = options.mode == Mode::kEval ? 1 : 0;
  terms.remainder = options.remainder == Remainder::kDrop ? 1 : 0;
  terms.drop_last = options.drop_last_batch;
  terms.epochs = options.epochs;
  terms.position_pinned = position_pinned;
  terms.first_epoch = options.first_epoch;
  terms.first_position = options.first_epoch_position;
  return terms;
}

// The options of one session's loader: the reader's, at the agreed position.
tilefeed::loader::LoaderOptions SessionOptions(tilefeed::loader::LoaderOptions options,
                                               const tilefeed::transport::SessionTerms& agreed,
                                               std::uint64_t dataset_size) {
  if (agreed.first_epoch >= agreed.epochs) {
    throw std::invalid_argument("the trainer is at epoch " + std::to_string(agreed.first_epoch) +
                                ", past the last epoch " + std::to_string(agreed.epochs - 1));
  }
  options.first_epoch = agreed.first_epoch;
  // A position after an epoch's padded last batch means the same as the end.
  options.first_epoch_position = std::min<std::uint64_t>(agreed.first_position, dataset_size);
  options.epochs = agreed.epochs - agreed.first_epoch;
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tilefeed;
  CLI::App app{"tilefeed-serve: serve a dataset's batches to a trainer over ZeroMQ"};
  std::string data;
  std::string mode = "train";
  std::string split = "train";
  std::string bad_sample_policy = "skip";
  std::size_t bad_sample_lines = 20;
  std::string shard;
  int instance_index = -1;
  int instance_count = -1;
  int heartbeat_ms = 1000;
  int timeout_ms = 5000;
  // Defaults are train's (tools/train.cc), so `tilefeed-serve --data DIR` and
  // `train --readers ... --data DIR` agree unless told otherwise.
  loader::LoaderOptions options;
  options.batch_size = 32;
  options.epochs = 3;
  options.drop_last_batch = true;
  transport::SenderOptions sender_options;
  std::string curve_keygen;
  std::vector<std::string> curve_allow;
  bool shm = false;
  bool insecure = false;
  std::string job_id = "0";
  sender_options.endpoint = "tcp://127.0.0.1:5555";
  app.add_option("--data", data,
                 "Dataset: an ImageFolder, a root with train/ and val/ splits (--split picks "
                 "one), a shard directory or manifest of any codec, or CIFAR-10's binary "
                 "directory (required unless --curve-keygen)")
      ->check(tilefeed::tools::DatasetLocationCheck());
  app.add_option("--bad-sample-policy", bad_sample_policy,
                 "skip: a bad file is replaced by the next good one of the slice, named on "
                 "stderr and counted; fail: the session ends at the first, naming it")
      ->check(CLI::IsMember({"skip", "fail"}))
      ->capture_default_str();
  app.add_option("--bad-sample-lines", bad_sample_lines,
                 "bad samples named in full on stderr; later ones are counted")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  tilefeed::tools::RemoteFlags remote_flags;
  tilefeed::tools::AddRemoteFlags(app, remote_flags);
  app.add_option("--split", split, "The split served from a root with train/ and val/")
      ->check(CLI::IsMember({"train", "val"}));
  app.add_option("--curve-keygen", curve_keygen,
                 "write a CURVE key pair to PREFIX.key (secret) and PREFIX.pub, then exit");
  app.add_option("--curve-secret-key", sender_options.curve_secret_key_file,
                 "encrypt with CURVE using this secret key file (trainers get the .pub)");
  app.add_option("--curve-allow", curve_allow,
                 "CURVE: admit only trainers whose public key is in these files (or *.pub files "
                 "of these directories); needs --curve-secret-key")
      ->expected(1, -1);
  app.add_option("--bind", sender_options.endpoint,
                 "endpoint to serve on: tcp://HOST:PORT, ipc://PATH, or shm://NAME (same host, "
                 "zero-copy shared memory); a non-loopback HOST needs --curve-allow or "
                 "--insecure")
      ->check(tilefeed::tools::BindEndpoint())
      ->capture_default_str();
  app.add_option("--batch-size", options.batch_size, "samples per batch")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--image-size", options.image_size, "output side in pixels")
      ->check(tilefeed::tools::Between(16, 4096))
      ->capture_default_str();
  app.add_option("--mode", mode, "train: RandomResizedCrop + flip; eval: resize + centre crop")
      ->check(CLI::IsMember({"train", "eval"}))
      ->capture_default_str();
  app.add_flag("--eval-dct-scaling", options.eval_dct_scaling,
               "eval: let JPEGs decode at a DCT scale-down (faster; pixels then differ from "
               "torchvision's Resize + CenterCrop by a few levels)");
  app.add_option("--workers", options.workers, "decode threads (0 = all cores)")
      ->check(tilefeed::tools::Between(0, 1024))
      ->capture_default_str();
  app.add_option("--prefetch-depth,--prefetch", options.prefetch_depth,
                 "batch slots; with shared memory they are the ring the trainer reads, so also "
                 "the most batches it can hold at once")
      ->check(tilefeed::tools::Between(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "shuffle and augmentation seed")
      ->check(tilefeed::tools::AtLeast(0))
      ->capture_default_str();
  app.add_flag("--insecure", insecure,
               "allow a non-loopback --bind without CURVE (a trusted network only)");
  app.add_option("--epochs", options.epochs,
                 "the job's epochs, at least 1, as train's --epochs (a trainer must agree)")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  CLI::Option* first_epoch_option =
      app.add_option("--first-epoch", options.first_epoch,
                     "pin the data position: serve only a trainer at this epoch (default: each "
                     "trainer's own position)")
          ->check(tilefeed::tools::AtLeast(0));
  CLI::Option* first_position_option =
      app.add_option(
             "--first-epoch-position", options.first_epoch_position,
             "pin the data position: samples of --first-epoch already delivered to all instances "
             "together (train --resume prints it)")
          ->check(tilefeed::tools::AtLeast(0));
  app.add_flag("--drop-last,!--no-drop-last", options.drop_last_batch,
               "drop each epoch's final partial batch, as train's own loader does (the "
               "default; --no-drop-last serves it, for trainers that take it)")
      ->capture_default_str();
  CLI::Option* shard_option =
      app.add_option("--shard", shard, "INDEX/COUNT (default: this instance under mpirun)");
  CLI::Option* index_option =
      app.add_option("--instance-index", instance_index,
                     "serve this trainer instance's shard (with --instance-count)")
          ->check(tilefeed::tools::AtLeast(0))
          ->excludes(shard_option);
  CLI::Option* count_option =
      app.add_option("--instance-count", instance_count, "trainer instances in the job")
          ->check(tilefeed::tools::AtLeast(1))
          ->excludes(shard_option);
  index_option->needs(count_option);
  count_option->needs(index_option);
  app.add_flag("--shm", shm,
               "payload through shared memory with an ipc:// --bind (same as --bind shm://NAME)");
  app.add_option("--job-id", job_id, "names the shared-memory segment (shm://NAME: NAME)")
      ->capture_default_str();
  app.add_option("--heartbeat-ms", heartbeat_ms, "heartbeat interval")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "a trainer silent this long is an error")
      ->check(tilefeed::tools::AtLeast(1))
      ->capture_default_str();
  metrics::Flags metrics_flags;
  metrics::AddFlags(app, metrics_flags, /*with_port=*/true);
  tilefeed::tools::CheckMetricsFlags(app);
  if (const auto rc = tilefeed::tools::ParseArgs(app, argc, argv, "tilefeed-serve")) return *rc;
  if (!curve_keygen.empty()) {
    try {
      transport::WriteCurveKeyFiles(transport::GenerateCurveKeyPair(), curve_keygen + ".key",
                                    curve_keygen + ".pub");
    } catch (const std::exception& e) {
      std::cerr << "tilefeed-serve: " << e.what() << '\n';
      return 1;
    }
    std::cerr << "tilefeed-serve: wrote " << curve_keygen << ".key (keep it secret) and "
              << curve_keygen << ".pub (for the trainer)\n";
    return 0;
  }
  if (data.empty()) {
    std::cerr << "tilefeed-serve: --data is required\n";
    return 2;
  }
  if (!curve_allow.empty() && sender_options.curve_secret_key_file.empty()) {
    std::cerr << "tilefeed-serve: --curve-allow needs --curve-secret-key\n";
    return 2;
  }
  // Checked here on the text (a host name resolved) before the data is opened, and by the
  // sender on what ZeroMQ actually bound.
  sender_options.loopback_only = curve_allow.empty() && !insecure;
  if (sender_options.loopback_only && !transport::IsLoopbackEndpoint(sender_options.endpoint)) {
    std::cerr << "tilefeed-serve: --bind " << sender_options.endpoint
              << " is not loopback: serve it with CURVE and an allow-list (--curve-secret-key, "
                 "--curve-allow) or pass --insecure\n";
    return 2;
  }
  options.mode = mode == "eval" ? loader::Mode::kEval : loader::Mode::kTrain;
  const bool shm_bind = transport::IsShmEndpoint(sender_options.endpoint);
  sender_options.shared_memory = shm || shm_bind;
  if (shm_bind) job_id = sender_options.endpoint.substr(6);
  sender_options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  sender_options.peer_timeout = std::chrono::milliseconds(timeout_ms);

  SignalStopper::BlockSignals();
  SignalStopper stopper;
  try {
    if (instance_count > 0) {
      if (instance_index >= instance_count) {
        std::cerr << "tilefeed-serve: --instance-index " << instance_index
                  << " is not below --instance-count " << instance_count << '\n';
        return 2;
      }
      options.slice = {instance_index, instance_count};
    } else if (shard.empty()) {
      options.slice = launch::SliceOf(launch::DetectInstance(launch::ProcessEnvironment()));
    } else if (std::sscanf(shard.c_str(), "%d/%d", &options.slice.index, &options.slice.count) !=
                   2 ||
               options.slice.count < 1 || options.slice.index < 0 ||
               options.slice.index >= options.slice.count) {
      std::cerr << "tilefeed-serve: --shard wants INDEX/COUNT, got '" << shard << "'\n";
      return 2;
    }
    options.bad_sample_policy = bad_sample_policy == "fail" ? loader::BadSamplePolicy::kFail
                                                            : loader::BadSamplePolicy::kSkip;
    auto bad_sample_log = std::make_shared<loader::BadSampleLog>(
        [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); },
        "tilefeed-serve: ", bad_sample_lines);
    options.on_bad_sample = [bad_sample_log](const loader::BadSample& bad) {
      (*bad_sample_log)(bad);
    };
    loader::DatasetOptions dataset_options;
    dataset_options.split = *loader::ParseSplit(split);
    dataset_options.remote = tilefeed::tools::ToRemoteOptions(remote_flags);
    loader::OpenedDataset opened = loader::OpenDataset(data, dataset_options);
    std::cerr << "tilefeed-serve: data: " << opened.summary << '\n';
    for (const std::string& note : opened.notes)
      std::cerr << "tilefeed-serve: data: " << note << '\n';
    std::unique_ptr<loader::Source> source = std::move(opened.source);
    const transport::SessionTerms terms =
        TermsOf(options, transport::IdentityOf(*source),
                first_epoch_option->count() + first_position_option->count() > 0);
    auto log = [](const std::string& line) { std::cerr << "tilefeed-serve: " << line << '\n'; };
    if (!curve_allow.empty()) {
      sender_options.curve_allowed_keys = transport::ReadCurvePublicKeys(curve_allow);
      sender_options.on_refused = log;
    }
    sender_options.log = log;
    sender_options.keep_serving = true;
    // Each session opens the dataset afresh at the trainer's position; with shared memory
    // the loader decodes straight into fresh slots the trainer maps.
    const std::uint64_t dataset_size = source->size();
    auto open = [&](const transport::SessionTerms& agreed) {
      loader::LoaderOptions o = SessionOptions(options, agreed, dataset_size);
      if (sender_options.shared_memory) o.slot_memory = transport::SharedSlots::Create(o, job_id);
      log("serving a trainer from epoch " + std::to_string(o.first_epoch) + " position " +
          std::to_string(o.first_epoch_position));
      return std::make_unique<loader::Loader>(loader::OpenDataset(data, dataset_options).source, o);
    };
    // One --metrics-port for the instances of a host started by a launcher: P + local index.
    if (!metrics_flags.port.empty()) {
      metrics_flags.port_offset = launch::DetectInstance(launch::ProcessEnvironment()).local_index;
    }
    metrics::Session metrics = metrics::Open(
        metrics_flags, {"tilefeed-serve", metrics::OptionsOf(app), data, dataset_size,
                        source->class_names().size(), options.slice.index, options.slice.count,
                        options.prefetch_depth * options.batch_size * options.image_size *
                            options.image_size * 3});
    // Each session's loader feeds the metrics while it serves; the sender detaches it before
    // the loader may go.
    sender_options.on_loader = [&metrics](const loader::Loader* serving) {
      if (serving == nullptr) {
        metrics.SetLoader({});
      } else {
        metrics.SetLoader([serving] { return serving->metrics(); });
      }
    };
    // A ring /dev/shm has no room for is one line now, not a SIGBUS at the first batch: each
    // session's ring is allocated in full (posix_fallocate), and so is this trial one.
    if (sender_options.shared_memory) (void)transport::SharedSlots::Create(options, job_id);
    transport::Context context;
    transport::BatchSender sender(context, sender_options, terms, open);
    std::cerr << "tilefeed-serve: serving " << dataset_size << " samples, epochs 0 to "
              << options.epochs - 1 << " (shard " << options.slice.index << "/"
              << options.slice.count << ") on " << sender.endpoint() << '\n';
    const auto start = std::chrono::steady_clock::now();
    const transport::SendResult result = sender.Run(stopper.token());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double slot_bytes =
        static_cast<double>(options.batch_size) * options.image_size * options.image_size * 3;
    const double mb = static_cast<double>(sender.batches_sent()) * slot_bytes / 1e6;
    metrics.SetLoader({});  // the last session's loader goes with the sender
    metrics.Finish(result == transport::SendResult::kCompleted  ? "completed"
                   : result == transport::SendResult::kPeerLeft ? "peer_left"
                                                                : "stopped");
    std::cerr << "tilefeed-serve: "
              << (result == transport::SendResult::kCompleted  ? "done"
                  : result == transport::SendResult::kPeerLeft ? "trainer left"
                                                               : "stopped")
              << ": " << sender.batches_sent() << " batches in " << seconds << " s, "
              << sender.batches_sent() / seconds << " batches/s, about " << mb / seconds
              << " MB/s\n";
    return result == transport::SendResult::kStopped ? 130 : 0;
  } catch (const std::exception& e) {
    std::cerr << "tilefeed-serve: " << e.what() << '\n';
    return 1;
  }
}
