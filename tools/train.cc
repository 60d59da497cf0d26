// train: data-parallel training on an ImageFolder dataset, fed by the tilefeed loader.
//
//   poprun --instances 2 ./train --data DIR --core reference --epochs 3
//
// Each instance (MPI rank) reads its shard of DIR/train (or DIR itself when it has no
// train/), lands batches in its training core through IO tiles, and all-reduces gradients
// with the other instances. MPI's rank and size are authoritative for the shard; the
// environment is read here only, never in the libraries.

#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "loader/image_folder.h"
#include "loader/loader.h"
#include "trainer/checkpoint.h"
#include "trainer/mpi_session.h"
#include "trainer/reference_core.h"
#include "trainer/synthetic_core.h"
#include "trainer/trainer.h"
#include "transport/batch_stream.h"
#include "transport/instance.h"

namespace {

namespace fs = std::filesystem;
using namespace tilefeed;

// A LoaderStream that owns its Loader, for validation streams made per epoch.
class OwningLoaderStream final : public transport::BatchStream {
 public:
  explicit OwningLoaderStream(std::unique_ptr<loader::Loader> loader)
      : loader_(std::move(loader)), stream_(*loader_) {}
  std::optional<transport::ReceivedBatch> Next() override { return stream_.Next(); }
  bool ended() const override { return stream_.ended(); }
  std::size_t batches_per_epoch() const override { return stream_.batches_per_epoch(); }

 private:
  std::unique_ptr<loader::Loader> loader_;
  transport::LoaderStream stream_;
};

// The cores this process may run on: poprun binds each instance to its share of the host,
// and std::thread::hardware_concurrency() does not see that.
int CoresOfThisProcess() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return std::max(1, CPU_COUNT(&set));
}

struct Args {
  std::string data;
  std::string core = "reference";
  double us_per_sample = 2000;
  std::uint64_t epochs = 3;
  std::size_t batch_size = 32;
  int image_size = 224;
  int workers = 0;
  std::size_t prefetch_depth = 4;
  trainer::TrainerOptions trainer;
  std::uint64_t seed = 0;
  int hidden = 256;
  bool resume = false;
  std::string checkpoint_dir;
  std::string json;
  bool quiet_others = true;
};

int Run(trainer::MpiSession& mpi, const Args& args) {
  const int rank = mpi.rank();
  // MPI's rank and size decide the shard; the launcher's environment must agree with them,
  // or the job was launched in a way this program does not understand.
  const transport::InstanceInfo launched =
      transport::DetectInstance(transport::ProcessEnvironment());
  if (launched.count != 1 && (launched.index != rank || launched.count != mpi.size())) {
    throw std::runtime_error("the launcher says instance " + std::to_string(launched.index) +
                             " of " + std::to_string(launched.count) + ", MPI says " +
                             std::to_string(rank) + " of " + std::to_string(mpi.size()));
  }
  auto log = [rank](const std::string& line) {
    if (rank == 0) std::printf("[train] %s\n", line.c_str()), std::fflush(stdout);
  };
  const fs::path root(args.data);
  const fs::path train_dir = fs::is_directory(root / "train") ? root / "train" : root;
  const fs::path val_dir = root / "val";
  const bool has_val = fs::is_directory(val_dir) && train_dir != root;

  std::unique_ptr<loader::ImageFolder> train_source = loader::ImageFolder::Open(train_dir.string());
  const int classes = static_cast<int>(train_source->class_names().size());

  // The BLAS runs single-threaded: parallelism comes from replicas and instances, and the
  // loader's workers need the other cores.
  trainer::SetBlasThreads(1);

  trainer::TrainerOptions options = args.trainer;
  options.local_batch = args.batch_size;
  options.sample_bytes = static_cast<std::size_t>(args.image_size) * args.image_size * 3;
  options.checkpoint_dir = args.checkpoint_dir;

  trainer::Trainer::CoreFactory make_core;
  if (args.core == "synthetic") {
    const trainer::KernelCalibration calibration = trainer::CalibrateSyntheticKernel();
    log("synthetic core: " + std::to_string(args.us_per_sample) + " us per sample, kernel " +
        std::to_string(calibration.iterations_per_us) + " iterations/us");
    make_core = [calibration, &args] {
      return std::make_unique<trainer::SyntheticCore>(args.us_per_sample, calibration);
    };
  } else {
    trainer::ReferenceCoreOptions core_options;
    core_options.classes = classes;
    core_options.hidden = args.hidden;
    core_options.seed = args.seed;
    make_core = [core_options] { return std::make_unique<trainer::ReferenceCore>(core_options); };
  }

  std::unique_ptr<std::ofstream> json;
  if (!args.json.empty() && rank == 0) {
    json = std::make_unique<std::ofstream>(args.json, std::ios::app);
    if (!*json) throw std::runtime_error("cannot open --json file " + args.json);
  }
  auto report = [&](const trainer::EpochReport& r) {
    if (rank != 0) return;
    std::printf("[train] epoch %llu: %llu steps, loss %.4f",
                static_cast<unsigned long long>(r.epoch), static_cast<unsigned long long>(r.steps),
                r.loss);
    if (r.accuracy) std::printf(", accuracy %.1f %%", 100 * *r.accuracy);
    std::printf(", %.1f images/s, stall %.2f %%", r.images_per_second, r.stall_percent);
    if (r.val_accuracy)
      std::printf(", val accuracy %.1f %% (%llu images)", 100 * *r.val_accuracy,
                  static_cast<unsigned long long>(r.val_images));
    std::printf("\n");
    std::fflush(stdout);
    if (json) *json << trainer::ToJsonLine(r) << "\n" << std::flush;
  };

  trainer::Trainer trainer(make_core, mpi, options, log, report);

  loader::LoaderOptions loader_options;
  loader_options.batch_size = args.batch_size;
  loader_options.image_size = args.image_size;
  loader_options.workers = args.workers > 0 ? args.workers : CoresOfThisProcess();
  loader_options.prefetch_depth = args.prefetch_depth;
  loader_options.seed = args.seed;
  loader_options.shard = {rank, mpi.size()};
  // Every batch full: core buffers have one shape, and all instances take the same steps.
  loader_options.drop_last_batch = true;
  std::uint64_t first_epoch = 0;
  if (args.resume) {
    std::optional<trainer::Checkpoint> checkpoint = trainer::ReadCheckpoint(args.checkpoint_dir);
    if (!checkpoint) {
      log("resume: no checkpoint in " + args.checkpoint_dir + "; starting from scratch");
    } else {
      trainer.Restore(*checkpoint);
      const loader::LoaderState state = loader::LoaderState::Parse(checkpoint->loader_state);
      state.ApplyTo(loader_options);
      first_epoch = state.epoch;
      log("resume: step " + std::to_string(checkpoint->step) + ", " + checkpoint->loader_state);
    }
  }
  if (first_epoch >= args.epochs) {
    log("nothing to do: already at epoch " + std::to_string(first_epoch));
    return 0;
  }
  loader_options.epochs = args.epochs - first_epoch;
  loader::Loader train_loader(std::move(train_source), loader_options);
  transport::LoaderStream stream(train_loader);
  log("instance " + std::to_string(rank) + " of " + std::to_string(mpi.size()) + ": " +
      std::to_string(train_loader.batches_per_epoch()) + " batches per epoch, " +
      std::to_string(classes) + " classes, core " + args.core);

  trainer::Trainer::ValidationFactory make_validation;
  if (has_val) {
    make_validation = [&]() -> std::unique_ptr<transport::BatchStream> {
      loader::LoaderOptions o = loader_options;
      o.mode = loader::Mode::kEval;
      o.eval_resize = std::max(o.image_size, o.image_size * 8 / 7);
      o.shuffle = false;
      o.drop_last_batch = false;
      o.first_epoch = 0;
      o.first_epoch_position = 0;
      o.expected_dataset_size = 0;
      o.epochs = 1;
      return std::make_unique<OwningLoaderStream>(
          std::make_unique<loader::Loader>(loader::ImageFolder::Open(val_dir.string()), o));
    };
  }
  trainer.Train(
      stream, [&train_loader] { return train_loader.state().Serialize(); }, make_validation);
  log("done: " + std::to_string(trainer.step()) + " steps; parameter checksum " +
      std::to_string(trainer.CheckReplicasIdentical()) + " identical on all " +
      std::to_string(mpi.size() * options.replicas) + " replicas");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Data-parallel training on an ImageFolder dataset, fed by tilefeed."};
  app.add_option("--data", args.data, "Dataset folder (DIR/train and DIR/val, or one ImageFolder)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--core", args.core, "Compute core")
      ->check(CLI::IsMember({"synthetic", "reference"}))
      ->capture_default_str();
  app.add_option("--us-per-sample", args.us_per_sample, "Synthetic core: compute cost per sample")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--epochs", args.epochs, "Epochs to train")->capture_default_str();
  app.add_option("--batch-size", args.batch_size, "Local batch (per replica and micro-step)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--image-size", args.image_size, "Image side in pixels")
      ->check(CLI::Range(16, 4096))
      ->capture_default_str();
  app.add_option("--workers", args.workers,
                 "Loader decode threads (0: the cores this instance is bound to)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--prefetch-depth", args.prefetch_depth, "Loader batch slots")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--io-tiles", args.trainer.io_tiles,
                 "IO tile threads (at least one per replica is used)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--staging-depth", args.trainer.staging_depth, "Staged batches per replica")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--compute-threads", args.trainer.compute_threads,
                 "Threads of the compute tiles (replicas run side by side)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--replicas", args.trainer.replicas, "Compute replicas per instance")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--gradient-accumulation", args.trainer.gradient_accumulation,
                 "Micro-batches per replica per step")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--lr", args.trainer.sgd.learning_rate, "Learning rate")->capture_default_str();
  app.add_option("--momentum", args.trainer.sgd.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", args.trainer.sgd.weight_decay, "L2 weight decay")
      ->capture_default_str();
  app.add_option("--hidden", args.hidden, "Reference core: hidden units")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--seed", args.seed, "Data order, augmentation and initialisation seed")
      ->capture_default_str();
  app.add_option("--max-steps", args.trainer.max_steps, "Stop after this many steps (0: all)")
      ->capture_default_str();
  app.add_option("--check-every", args.trainer.check_every,
                 "Compare parameter checksums across replicas/instances every N steps")
      ->capture_default_str();
  app.add_option("--checkpoint-every", args.trainer.checkpoint_every,
                 "Instance 0 writes a checkpoint every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--checkpoint-dir", args.checkpoint_dir, "Checkpoint folder");
  app.add_flag("--resume", args.resume, "Continue from the checkpoint in --checkpoint-dir");
  app.add_option("--json", args.json, "Append per-epoch reports to this file as JSON lines");
  CLI11_PARSE(app, argc, argv);
  // poprun --replicas-per-instance R exports the layout; an explicit --replicas wins.
  if (app.count("--replicas") == 0) {
    if (const char* replicas = std::getenv("TILEFEED_REPLICAS_PER_INSTANCE")) {
      args.trainer.replicas = std::max(1, std::atoi(replicas));
    }
  }
  if ((args.resume || args.trainer.checkpoint_every > 0) && args.checkpoint_dir.empty()) {
    std::fprintf(stderr, "train: --resume and --checkpoint-every need --checkpoint-dir\n");
    return 2;
  }

  std::optional<trainer::MpiSession> mpi;
  try {
    mpi.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
  try {
    return Run(*mpi, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: instance %d: %s\n", mpi->rank(), e.what());
    // The other instances would wait for this one in their next collective forever.
    if (mpi->size() > 1) mpi->Abort(1);
    return 1;
  }
}
