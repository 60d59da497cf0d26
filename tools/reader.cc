// tilefeed-serve: the reader half of disaggregated mode. It loads an ImageFolder with the
// usual loader options and serves the batches to one trainer over ZeroMQ (or, on the same
// host, through shared memory that the loader decodes into and the trainer reads in place),
// which reads them with `--readers <endpoint>` (transport::ZmqBatchStream).
//
//   tilefeed-serve --data /data/train --bind tcp://*:5555 --batch-size 256 --epochs 90
//       --instance-index 0 --instance-count 2 --drop-last
//   tilefeed-serve --data /data/train --bind shm://job7-r0 ...   (train --readers shm://job7-r0)
//
// One reader serves one trainer instance: reader i takes instance i's shard, given by
// --instance-index/--instance-count (or --shard INDEX/COUNT), else by the launcher's
// environment when the readers themselves run under poprun/mpirun (one per rank), else the
// whole dataset. The reader owns the data options: shard, seed, epochs, augmentation, and
// on a resume the position (--first-epoch, --first-epoch-position, as `train --resume`
// prints them). SIGINT/SIGTERM stop it cleanly (the trainer is told bye).
//
// On a network that is not trusted, turn on CURVE (transport/curve.h): make a key pair once
// with `tilefeed-serve --curve-keygen reader` (writes reader.key, mode 0600, and
// reader.pub), serve with `--curve-secret-key reader.key`, and give the trainer reader.pub.
// To admit only known trainers, make each trainer a key pair the same way and serve with
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

#include "loader/dataset.h"
#include "loader/loader.h"
#include "metrics/cli.h"
#include "tools/remote_flags.h"
#include "transport/curve.h"
#include "transport/instance.h"
#include "transport/sender.h"

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

}  // namespace

int main(int argc, char** argv) {
  using namespace tilefeed;
  CLI::App app{"tilefeed-serve: serve a dataset's batches to a trainer over ZeroMQ"};
  std::string data;
  std::string mode = "train";
  std::string split = "train";
  std::string shard;
  int instance_index = -1;
  int instance_count = -1;
  int heartbeat_ms = 1000;
  int timeout_ms = 5000;
  loader::LoaderOptions options;
  options.epochs = 1;
  transport::SenderOptions sender_options;
  std::string curve_keygen;
  std::vector<std::string> curve_allow;
  bool shm = false;
  std::string job_id = "0";
  app.add_option("--data", data,
                 "Dataset: an ImageFolder, a root with train/ and val/ splits (--split picks "
                 "one), a shard directory or manifest of any codec, or CIFAR-10's binary "
                 "directory (required unless --curve-keygen)");
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
                 "zero-copy shared memory)")
      ->capture_default_str();
  app.add_option("--batch-size", options.batch_size, "samples per batch")->capture_default_str();
  app.add_option("--image-size", options.image_size, "output side in pixels")
      ->capture_default_str();
  app.add_option("--mode", mode, "train: RandomResizedCrop + flip; eval: resize + centre crop")
      ->check(CLI::IsMember({"train", "eval"}))
      ->capture_default_str();
  app.add_option("--workers", options.workers, "decode threads (0 = all cores)")
      ->capture_default_str();
  app.add_option("--prefetch", options.prefetch_depth,
                 "batch slots; with shared memory they are the ring the trainer reads, so also "
                 "the most batches it can hold at once")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "shuffle and augmentation seed")->capture_default_str();
  app.add_option("--epochs", options.epochs, "epochs to serve (0 = until stopped)")
      ->capture_default_str();
  app.add_option("--first-epoch", options.first_epoch, "epoch to start at")->capture_default_str();
  app.add_option("--first-epoch-position", options.first_epoch_position,
                 "resume: samples of --first-epoch already delivered to all instances together "
                 "(train --resume prints it)")
      ->capture_default_str();
  app.add_flag("--drop-last", options.drop_last_batch,
               "drop each epoch's final partial batch (train's own loader does)");
  CLI::Option* shard_option =
      app.add_option("--shard", shard, "INDEX/COUNT (default: this instance under mpirun)");
  CLI::Option* index_option =
      app.add_option("--instance-index", instance_index,
                     "serve this trainer instance's shard (with --instance-count)")
          ->check(CLI::NonNegativeNumber)
          ->excludes(shard_option);
  CLI::Option* count_option =
      app.add_option("--instance-count", instance_count, "trainer instances in the job")
          ->check(CLI::PositiveNumber)
          ->excludes(shard_option);
  index_option->needs(count_option);
  count_option->needs(index_option);
  app.add_flag("--shm", shm,
               "payload through shared memory with an ipc:// --bind (same as --bind shm://NAME)");
  app.add_option("--job-id", job_id, "names the shared-memory segment (shm://NAME: NAME)")
      ->capture_default_str();
  app.add_option("--heartbeat-ms", heartbeat_ms, "heartbeat interval")->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "a trainer silent this long is an error")
      ->capture_default_str();
  metrics::Flags metrics_flags;
  metrics::AddFlags(app, metrics_flags, /*with_port=*/true);
  CLI11_PARSE(app, argc, argv);
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
      options.shard = {instance_index, instance_count};
    } else if (shard.empty()) {
      options.shard =
          transport::ShardOf(transport::DetectInstance(transport::ProcessEnvironment()));
    } else if (std::sscanf(shard.c_str(), "%d/%d", &options.shard.index, &options.shard.count) !=
                   2 ||
               options.shard.count < 1 || options.shard.index < 0 ||
               options.shard.index >= options.shard.count) {
      std::cerr << "tilefeed-serve: --shard wants INDEX/COUNT, got '" << shard << "'\n";
      return 2;
    }
    options.on_bad_sample = [](const loader::BadSample& bad) {
      std::fprintf(stderr, "tilefeed-serve: skipped %s: %s\n", bad.where.c_str(),
                   bad.reason.c_str());
    };
    loader::DatasetOptions dataset_options;
    dataset_options.split = *loader::ParseSplit(split);
    dataset_options.remote = tilefeed::tools::ToRemoteOptions(remote_flags);
    loader::OpenedDataset opened = loader::OpenDataset(data, dataset_options);
    std::cerr << "tilefeed-serve: data: " << opened.summary << '\n';
    for (const std::string& note : opened.notes)
      std::cerr << "tilefeed-serve: data: " << note << '\n';
    std::unique_ptr<loader::Source> source = std::move(opened.source);
    // A trainer's checkpoint after an epoch's padded last batch may name a position past
    // the end; it means the same as the end.
    options.first_epoch_position =
        std::min<std::uint64_t>(options.first_epoch_position, source->size());
    if (!curve_allow.empty()) {
      sender_options.curve_allowed_keys = transport::ReadCurvePublicKeys(curve_allow);
      sender_options.on_refused = [](const std::string& line) {
        std::cerr << "tilefeed-serve: " << line << '\n';
      };
    }
    // Shared memory: the loader decodes straight into the slots the trainer maps.
    if (sender_options.shared_memory) {
      options.slot_memory = transport::SharedSlots::Create(options, job_id);
    }
    const std::uint64_t samples = source->size(), classes = source->class_names().size();
    loader::Loader loader(std::move(source), options);
    metrics::Session metrics =
        metrics::Open(metrics_flags, {"tilefeed-serve", metrics::OptionsOf(app), data, samples,
                                      classes, options.shard.index, options.shard.count,
                                      loader.metrics().slots * loader.metrics().slot_bytes});
    const metrics::Session::ScopedLoader metrics_loader(metrics, [&] { return loader.metrics(); });
    transport::Context context;
    transport::BatchSender sender(context, loader, sender_options);
    std::cerr << "tilefeed-serve: serving " << loader.batches_per_epoch()
              << " batches per epoch (shard " << options.shard.index << "/" << options.shard.count
              << ") on " << sender.endpoint() << '\n';
    const auto start = std::chrono::steady_clock::now();
    const transport::SendResult result = sender.Run(stopper.token());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const loader::LoaderMetrics figures = loader.metrics();
    const double mb = static_cast<double>(sender.batches_sent()) * figures.slot_bytes / 1e6;
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
