#pragma once

// Short training runs on a tiny ImageFolder, shared by the checkpoint and MPI tests.

#include <filesystem>
#include <optional>
#include <vector>

#include "loader/image_folder.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/trainer/mpi_session.h"
#include "tilefeed/trainer/trainer.h"
#include "tilefeed/transport/batch_stream.h"
#include "trainer/checkpoint.h"
#include "trainer/reference_core.h"
#include "trainer/stall.h"

namespace tilefeed::testing {

struct RunConfig {
  std::filesystem::path data;
  std::filesystem::path checkpoint_dir;
  std::uint64_t epochs = 2;
  std::uint64_t max_steps = 0;
  std::uint64_t checkpoint_every = 0;
  bool resume = false;
  int replicas = 1;
  int accumulation = 1;
  int io_tiles = 2;
  std::size_t batch = 4;
  int classes = 3;
  trainer::AllreduceMode allreduce = trainer::AllreduceMode::kOverlap;
};

struct RunResult {
  std::vector<float> parameters;
  std::vector<float> velocity;
  std::uint64_t steps = 0;
  std::size_t global_batch = 0;
  std::vector<trainer::EpochReport> reports;
};

inline RunResult TrainTiny(const RunConfig& config, trainer::Collectives& collectives) {
  constexpr int kSide = 32;
  trainer::TrainerOptions options;
  options.local_batch = config.batch;
  options.sample_bytes = static_cast<std::size_t>(kSide) * kSide * 3;
  options.replicas = config.replicas;
  options.gradient_accumulation = config.accumulation;
  options.io_tiles = config.io_tiles;
  options.compute_threads = 2;
  options.max_steps = config.max_steps;
  options.check_every = 1;
  options.checkpoint_every = config.checkpoint_every;
  options.checkpoint_dir = config.checkpoint_dir;
  options.allreduce = config.allreduce;
  trainer::ReferenceCoreOptions core_options;
  core_options.classes = config.classes;
  core_options.pool = 4;
  core_options.hidden = 16;
  core_options.seed = 3;
  RunResult result;
  trainer::Trainer trainer([&] { return std::make_unique<trainer::ReferenceCore>(core_options); },
                           collectives, options, {},
                           [&](const trainer::EpochReport& r) { result.reports.push_back(r); });
  loader::LoaderOptions lo;
  lo.batch_size = config.batch;
  lo.image_size = kSide;
  lo.workers = 2;
  lo.prefetch_depth = 3;
  lo.seed = 5;
  lo.slice = {collectives.rank(), collectives.size()};
  lo.drop_last_batch = true;
  std::optional<loader::LoaderState> start;
  if (config.resume) {
    const std::optional<trainer::Checkpoint> checkpoint =
        trainer::ReadCheckpoint(config.checkpoint_dir);
    if (checkpoint) {
      trainer.Restore(*checkpoint);
      start = checkpoint->data_position;
    }
  }
  lo.epochs = config.epochs - (start ? start->epoch : 0);
  loader::Loader loader(loader::ImageFolder::Open(config.data.string()), lo, start);
  transport::LoaderStream stream(loader);
  result.steps = trainer.Train(stream);
  result.parameters.assign(trainer.parameters().begin(), trainer.parameters().end());
  result.velocity.assign(trainer.velocity().begin(), trainer.velocity().end());
  result.global_batch = trainer.global_batch();
  return result;
}

}  // namespace tilefeed::testing
