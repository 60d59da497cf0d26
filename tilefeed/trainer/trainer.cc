#include "tilefeed/trainer/trainer.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace tilefeed::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

InputView ViewOf(const StagedBatch& item) {
  return InputView{item.images,      item.labels,     item.meta.size,
                   item.meta.height, item.meta.width, item.meta.layout};
}

std::span<std::byte> Bytes(std::span<float> values) { return std::as_writable_bytes(values); }

}  // namespace

struct Trainer::Replica {
  std::unique_ptr<ComputeCore> core;
  SgdMomentum optimizer;
  std::vector<float> gradients;
  BatchStats stats;  // this step's

  Replica(std::unique_ptr<ComputeCore> c, const SgdOptions& sgd)
      : core(std::move(c)),
        optimizer(core->parameters().size(), sgd),
        gradients(core->parameters().size(), 0.0f) {}
};

const char* AllreduceModeName(AllreduceMode mode) {
  return mode == AllreduceMode::kOverlap ? "overlap" : "blocking";
}

AllreduceMode ParseAllreduceMode(const std::string& name) {
  if (name == "overlap") return AllreduceMode::kOverlap;
  if (name == "blocking") return AllreduceMode::kBlocking;
  throw TrainerError("trainer: unknown all-reduce mode '" + name +
                     "' (expected overlap or blocking)");
}

BatchLayout FitGlobalBatch(std::uint64_t saved_global_batch, BatchLayout current, int replicas,
                           int instances, bool local_batch_fixed, bool accumulation_fixed) {
  const std::uint64_t parallel =
      static_cast<std::uint64_t>(replicas) * static_cast<std::uint64_t>(instances);
  const std::uint64_t per_micro_step = current.local_batch * parallel;
  const std::uint64_t per_sample =
      parallel * static_cast<std::uint64_t>(current.gradient_accumulation);
  const std::uint64_t now =
      per_micro_step * static_cast<std::uint64_t>(current.gradient_accumulation);
  if (saved_global_batch == 0 || saved_global_batch == now) return current;
  constexpr std::uint64_t kMaxAccumulation = 4096;
  if (!accumulation_fixed && saved_global_batch % per_micro_step == 0 &&
      saved_global_batch / per_micro_step <= kMaxAccumulation) {
    return {current.local_batch, static_cast<int>(saved_global_batch / per_micro_step)};
  }
  if (!local_batch_fixed && saved_global_batch % per_sample == 0) {
    return {static_cast<std::size_t>(saved_global_batch / per_sample),
            current.gradient_accumulation};
  }
  const std::string r = std::to_string(replicas);
  const std::string n = std::to_string(instances);
  throw TrainerError(
      "resume: the checkpoint was written with global batch " + std::to_string(saved_global_batch) +
      "; here local batch " + std::to_string(current.local_batch) + " x replicas " + r +
      " x instances " + n + " x gradient accumulation " +
      std::to_string(current.gradient_accumulation) + " = " + std::to_string(now) + ", and " +
      std::to_string(saved_global_batch) +
      (accumulation_fixed ? ""
                          : " is not a multiple of " + std::to_string(per_micro_step) +
                                " (local batch x replicas x instances)") +
      (accumulation_fixed || local_batch_fixed ? "" : " nor") +
      (local_batch_fixed ? ""
                         : " of " + std::to_string(per_sample) +
                               " (replicas x instances x gradient accumulation)") +
      (accumulation_fixed && local_batch_fixed
           ? " cannot be kept with --batch-size and --gradient-accumulation as given"
           : "") +
      ": choose --batch-size B and --gradient-accumulation G with B x " + r + " x " + n +
      " x G = " + std::to_string(saved_global_batch) +
      ", or pass --new-global-batch to continue with " + std::to_string(now));
}

std::uint64_t ParameterChecksum(std::span<const float> parameters) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::byte b : std::as_bytes(parameters)) {
    hash ^= static_cast<std::uint64_t>(b);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

Trainer::Trainer(const CoreFactory& make_core, Collectives& collectives,
                 const TrainerOptions& options, LogSink log, ReportSink report)
    : collectives_(collectives),
      options_(options),
      log_(std::move(log)),
      report_(std::move(report)) {
  if (options.replicas < 1 || options.gradient_accumulation < 1 || options.io_tiles < 1 ||
      options.staging_depth < 1 || options.compute_threads < 1 || options.local_batch < 1) {
    throw TrainerError(
        "trainer: replicas, gradient accumulation, IO tiles, staging depth, compute threads and "
        "local batch must all be at least 1");
  }
  if (options.checkpoint_every > 0 && options.checkpoint_dir.empty()) {
    throw TrainerError("trainer: checkpoint_every needs a checkpoint directory");
  }
  for (int r = 0; r < options.replicas; ++r) {
    replicas_.push_back(std::make_unique<Replica>(make_core(), options.sgd));
  }
  reduced_.assign(replicas_[0]->gradients.size(), 0.0f);
  // Instance 0's initial parameters win everywhere, whatever seed the others used.
  std::span<float> first = replicas_[0]->core->parameters();
  collectives_.Broadcast(Bytes(first), 0);
  for (std::size_t r = 1; r < replicas_.size(); ++r) {
    std::span<float> p = replicas_[r]->core->parameters();
    if (p.size() != first.size()) throw TrainerError("trainer: replicas differ in size");
    std::copy(first.begin(), first.end(), p.begin());
  }
  char line[256];
  std::snprintf(line, sizeof(line),
                "global batch: local batch %zu x replicas %d x instances %d x gradient "
                "accumulation %d = %zu",
                options.local_batch, options.replicas, collectives_.size(),
                options.gradient_accumulation, global_batch());
  Log(line);
}

Trainer::~Trainer() = default;

std::size_t Trainer::global_batch() const {
  return options_.local_batch * static_cast<std::size_t>(options_.replicas) *
         static_cast<std::size_t>(collectives_.size()) *
         static_cast<std::size_t>(options_.gradient_accumulation);
}

void Trainer::Log(const std::string& line) const {
  if (log_) log_(line);
}

std::span<const float> Trainer::parameters() const { return replicas_[0]->core->parameters(); }
std::span<const float> Trainer::velocity() const { return replicas_[0]->optimizer.velocity(); }

void Trainer::Restore(const Checkpoint& checkpoint) {
  if (checkpoint.core != replicas_[0]->core->name()) {
    throw TrainerError("trainer: the checkpoint is for the " + checkpoint.core + " core, not " +
                       replicas_[0]->core->name());
  }
  if (checkpoint.parameters.size() != reduced_.size() ||
      checkpoint.velocity.size() != reduced_.size()) {
    throw TrainerError("trainer: the checkpoint holds " +
                       std::to_string(checkpoint.parameters.size()) +
                       " parameters; the model has " + std::to_string(reduced_.size()));
  }
  for (auto& replica : replicas_) {
    std::ranges::copy(checkpoint.parameters, replica->core->parameters().begin());
    std::ranges::copy(checkpoint.velocity, replica->optimizer.velocity().begin());
  }
  step_ = checkpoint.step;
  epoch_ = checkpoint.epoch;
  CheckReplicasIdentical();
}

std::uint64_t Trainer::CheckReplicasIdentical() {
  const std::uint64_t local = ParameterChecksum(replicas_[0]->core->parameters());
  for (std::size_t r = 1; r < replicas_.size(); ++r) {
    if (ParameterChecksum(replicas_[r]->core->parameters()) != local) {
      throw TrainerError("trainer: replica " + std::to_string(r) + " of instance " +
                         std::to_string(collectives_.rank()) + " diverged from replica 0 at step " +
                         std::to_string(step_));
    }
  }
  const auto [low, high] = collectives_.AllreduceMinMax(local);
  if (low != high) {
    throw TrainerError("trainer: instances diverged at step " + std::to_string(step_) +
                       ": parameter checksums differ (this instance " + std::to_string(local) +
                       ", min " + std::to_string(low) + ", max " + std::to_string(high) + ")");
  }
  return local;
}

void Trainer::SumReplicas(std::size_t offset, std::size_t size) {
  float* out = reduced_.data() + offset;
  const float* first = replicas_[0]->gradients.data() + offset;
  std::copy(first, first + size, out);
  for (std::size_t r = 1; r < replicas_.size(); ++r) {
    const float* g = replicas_[r]->gradients.data() + offset;
    for (std::size_t i = 0; i < size; ++i) out[i] += g[i];
  }
}

void Trainer::SaveCheckpoint(const std::string& loader_state) {
  if (collectives_.rank() != 0) return;
  Checkpoint checkpoint;
  checkpoint.global_batch = global_batch();
  checkpoint.step = step_;
  checkpoint.epoch = epoch_;
  checkpoint.core = replicas_[0]->core->name();
  checkpoint.loader_state = loader_state;
  const std::span<float> p = replicas_[0]->core->parameters();
  checkpoint.parameters.assign(p.begin(), p.end());
  const std::span<const float> v = replicas_[0]->optimizer.velocity();
  checkpoint.velocity.assign(v.begin(), v.end());
  WriteCheckpoint(options_.checkpoint_dir, checkpoint);
  Log("checkpoint: step " + std::to_string(step_) + " -> " +
      CheckpointPath(options_.checkpoint_dir).string());
}

void Trainer::Validate(const ValidationFactory& make_validation, EpochReport& report) {
  std::unique_ptr<transport::BatchStream> stream = make_validation();
  ComputeCore& core = *replicas_[0]->core;
  double sums[3] = {0, 0, 0};  // loss, correct, samples
  while (std::optional<transport::ReceivedBatch> batch = stream->Next()) {
    const InputView view{batch->images(),      batch->labels(),     batch->size(),
                         batch->meta().height, batch->meta().width, batch->meta().layout};
    const BatchStats stats = core.Evaluate(view);
    sums[0] += stats.loss_sum;
    sums[1] += static_cast<double>(stats.correct);
    sums[2] += static_cast<double>(stats.samples);
  }
  collectives_.AllreduceSum(std::span<double>(sums));
  if (sums[2] > 0) {
    report.val_loss = sums[0] / sums[2];
    if (core.classifies()) report.val_accuracy = sums[1] / sums[2];
    report.val_images = static_cast<std::uint64_t>(sums[2]);
  }
}

std::uint64_t Trainer::Train(transport::BatchStream& stream, IoTiles::PositionProbe position,
                             const ValidationFactory& make_validation) {
  const std::size_t replica_count = replicas_.size();
  const int accumulation = options_.gradient_accumulation;
  // At least one IO tile per replica, so each replica has a tile's landing bandwidth; the
  // tiles share one ordered ring and the batches are dealt round-robin from it.
  IoTiles io(stream,
             IoTilesOptions{std::max(options_.io_tiles, options_.replicas),
                            options_.staging_depth * replica_count, options_.local_batch,
                            options_.sample_bytes},
             std::move(position));
  tbb::task_arena arena(options_.compute_threads);
  const float scale =
      1.0f / static_cast<float>(replica_count * static_cast<std::size_t>(accumulation) *
                                static_cast<std::size_t>(collectives_.size()));
  bool first_step = true;
  bool stream_ended = false;
  const std::uint64_t steps_per_epoch =
      stream.batches_per_epoch() / (replica_count * static_cast<std::size_t>(accumulation));
  std::vector<const StagedBatch*> items;
  items.reserve(replica_count);
  std::vector<std::uint64_t> step_samples;  // for the sample sink
  auto done = [&] { return options_.max_steps != 0 && step_ >= options_.max_steps; };
  const bool overlap = options_.allreduce == AllreduceMode::kOverlap;

  while (!stream_ended && !done()) {
    StallMeter meter;
    double allreduce_exposed = 0;
    double loss_sum = 0;
    std::uint64_t correct = 0;
    std::uint64_t samples = 0;
    std::uint64_t bad_samples = 0;
    bool epoch_ended = false;
    const std::uint64_t epoch = epoch_;
    while (!done()) {
      for (auto& replica : replicas_) std::ranges::fill(replica->gradients, 0.0f);
      double wait = 0;
      double busy = 0;
      BatchStats step_stats;  // counted only if the step completes
      std::uint64_t step_bad_samples = 0;
      std::string step_position;
      step_samples.clear();
      for (int g = 0; g < accumulation && !epoch_ended; ++g) {
        const auto wait_start = Clock::now();
        items.clear();
        for (std::size_t r = 0; r < replica_count; ++r) {
          const StagedBatch& item = io.Acquire();
          items.push_back(&item);
          if (item.end_of_epoch) {
            epoch_ended = true;
            stream_ended = item.end_of_stream;
            break;
          }
        }
        const auto compute_start = Clock::now();
        wait += Seconds(wait_start, compute_start);
        if (!epoch_ended) {
          // With overlap, the last micro-step runs its backward pass in the core's segments:
          // each segment's sum starts crossing instances as soon as every replica has
          // finished it, while the next segment computes.
          const bool staged = overlap && g == accumulation - 1;
          // The compute tiles: replicas run side by side in the arena.
          arena.execute([&] {
            tbb::parallel_for(std::size_t{0}, replica_count, [&](std::size_t r) {
              Replica& replica = *replicas_[r];
              const InputView view = ViewOf(*items[r]);
              replica.stats = staged ? replica.core->BeginGradients(view, replica.gradients)
                                     : replica.core->AccumulateGradients(view, replica.gradients);
            });
          });
          const std::size_t segments = staged ? replicas_[0]->core->gradient_segments() : 0;
          for (std::size_t s = 0; s < segments; ++s) {
            arena.execute([&] {
              tbb::parallel_for(std::size_t{0}, replica_count, [&](std::size_t r) {
                replicas_[r]->core->BackwardSegment(s, replicas_[r]->gradients);
              });
            });
            const GradientSegment segment = replicas_[0]->core->gradient_segment(s);
            SumReplicas(segment.offset, segment.size);
            collectives_.StartAllreduceSum(
                std::span<float>(reduced_.data() + segment.offset, segment.size));
            // OpenMPI moves non-blocking collectives only inside MPI calls.
            collectives_.Progress();
          }
          for (std::size_t r = 0; r < replica_count; ++r) {
            step_stats.loss_sum += replicas_[r]->stats.loss_sum;
            step_stats.correct += replicas_[r]->stats.correct;
            step_stats.samples += replicas_[r]->stats.samples;
          }
          for (const StagedBatch* item : items) step_bad_samples += item->meta.substituted;
          step_position = items.back()->position;
          if (samples_) {
            for (const StagedBatch* item : items) {
              step_samples.insert(step_samples.end(), item->sample_indices.begin(),
                                  item->sample_indices.end());
            }
          }
        }
        for (std::size_t i = 0; i < items.size(); ++i) io.Release();
        busy += Seconds(compute_start, Clock::now());
      }
      if (epoch_ended) break;  // a partial step is dropped, identically on every instance

      const auto update_start = Clock::now();
      // Local reduction in replica order, then across instances: one fixed summation order
      // (the overlap path did the same per segment and only waits here).
      if (overlap) {
        collectives_.WaitAllreduces();
      } else {
        SumReplicas(0, reduced_.size());
        collectives_.AllreduceSum(std::span<float>(reduced_));
      }
      allreduce_exposed += Seconds(update_start, Clock::now());
      for (float& g : reduced_) g *= scale;
      arena.execute([&] {
        tbb::parallel_for(std::size_t{0}, replica_count, [&](std::size_t r) {
          replicas_[r]->optimizer.Step(replicas_[r]->core->parameters(), reduced_);
        });
      });
      ++step_;
      busy += Seconds(update_start, Clock::now());
      if (samples_) samples_(epoch, step_samples);
      loss_sum += step_stats.loss_sum;
      correct += step_stats.correct;
      samples += step_stats.samples;
      bad_samples += step_bad_samples;
      if (first_step) {
        // The first wait of a run is the pipeline filling, not a stall of the steady state.
        meter.AddFill(wait);
        wait = 0;
        first_step = false;
      }
      meter.AddStep(wait, busy);
      if (progress_) {
        StepProgress progress;
        progress.epoch = epoch;
        progress.step_in_epoch = meter.steps();
        progress.steps_per_epoch = steps_per_epoch;
        progress.global_step = step_;
        const double seconds = meter.step_seconds();
        progress.images_per_second =
            seconds > 0 ? static_cast<double>(samples) * collectives_.size() / seconds : 0;
        progress.stall_percent = 100 * meter.stall_fraction();
        progress.step_wait_seconds = wait;
        progress.step_busy_seconds = busy;
        progress_(progress);
      }
      if (options_.check_every != 0 && step_ % options_.check_every == 0) {
        CheckReplicasIdentical();
      }
      if (options_.checkpoint_every != 0 && step_ % options_.checkpoint_every == 0) {
        SaveCheckpoint(step_position);
      }
    }
    // Every instance has the same number of steps here, so these collectives match.
    if (meter.steps() > 0) {
      double sums[8] = {loss_sum,
                        static_cast<double>(correct),
                        static_cast<double>(samples),
                        meter.wait_seconds(),
                        meter.step_seconds(),
                        meter.fill_seconds(),
                        allreduce_exposed,
                        static_cast<double>(bad_samples)};
      collectives_.AllreduceSum(std::span<double>(sums));
      double slowest[1] = {meter.step_seconds()};
      collectives_.AllreduceMax(std::span<double>(slowest));
      EpochReport report;
      report.epoch = epoch;
      report.steps = meter.steps();
      report.global_step = step_;
      report.images = static_cast<std::uint64_t>(sums[2]);
      report.bad_samples = static_cast<std::uint64_t>(sums[7]);
      report.seconds = slowest[0];
      report.images_per_second = slowest[0] > 0 ? sums[2] / slowest[0] : 0;
      report.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
      if (replicas_[0]->core->classifies() && sums[2] > 0) report.accuracy = sums[1] / sums[2];
      report.stall_percent = sums[4] > 0 ? 100.0 * sums[3] / sums[4] : 0;
      report.wait_seconds = sums[3];
      report.fill_seconds = sums[5];
      report.allreduce = AllreduceModeName(options_.allreduce);
      report.allreduce_exposed_seconds = sums[6];
      if (epoch_ended && make_validation) Validate(make_validation, report);
      if (report_) report_(report);
    }
    if (epoch_ended) ++epoch_;
  }
  CheckReplicasIdentical();
  return step_;
}

}  // namespace tilefeed::trainer
