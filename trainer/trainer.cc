#include "tilefeed/trainer/trainer.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>

#include "tilefeed/trainer/mpi_session.h"
#include "trainer/checkpoint.h"
#include "trainer/compute_core.h"
#include "trainer/io_tiles.h"
#include "trainer/sgd.h"
#include "trainer/stall.h"

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

Trainer::BatchCheck CheckAgainst(std::unique_ptr<loader::Source> source,
                                 const loader::LoaderOptions& options, double pixel_share) {
  struct Own {
    Own(std::unique_ptr<loader::Source> s, const loader::LoaderOptions& o)
        : decoder(std::move(s), o) {}
    std::mutex mutex;
    loader::SampleDecoder decoder;  // guarded by mutex
  };
  auto own = std::make_shared<Own>(std::move(source), options);
  std::random_device random;
  const std::uint64_t key = (std::uint64_t{random()} << 32) ^ random();
  return [own, key, pixel_share, batch = options.batch_size](const transport::ReceivedBatch& b) {
    const loader::Source& source = own->decoder.source();
    for (std::size_t row = 0; row < b.size(); ++row) {
      const std::uint64_t sample = b.sample_indices()[row];
      const std::int32_t label = sample < source.size() ? source.Label(sample) : -1;
      std::string differs;
      if (b.labels()[row] != label) {
        differs = "label " + std::to_string(b.labels()[row]) +
                  "; this trainer's dataset has label " + std::to_string(label);
      } else if (loader::SampleRng(key, b.epoch(), sample).Uniform() < pixel_share) {
        std::lock_guard lock(own->mutex);
        const std::span<const std::uint8_t> mine = own->decoder.Decode(b.epoch(), sample);
        const int wrong = std::inner_product(mine.begin(), mine.end(),
                                             b.images().subspan(row * mine.size()).begin(), 0,
                                             std::plus<>(), std::not_equal_to<>());
        if (wrong > 0) {
          differs = std::to_string(wrong) + " of its " + std::to_string(mine.size()) +
                    " pixel bytes differ from this trainer's own decode";
        }
      }
      if (!differs.empty()) {
        throw TrainerError("reader check: sample " + std::to_string(sample) + " at position " +
                           std::to_string(b.index() * batch + row) + " of epoch " +
                           std::to_string(b.epoch()) + " (batch " + std::to_string(b.index()) +
                           ", row " + std::to_string(row) + "): " + differs);
      }
    }
  };
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

void Trainer::SaveCheckpoint(const loader::LoaderState& data_position) {
  if (collectives_.rank() != 0) return;
  Checkpoint checkpoint;
  checkpoint.global_batch = global_batch();
  checkpoint.step = step_;
  checkpoint.epoch = epoch_;
  checkpoint.core = replicas_[0]->core->name();
  checkpoint.data_position = data_position;
  checkpoint.dataset_digest = options_.dataset_digest;
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

namespace {

// What one completed step trained on and how long it took, on this instance.
struct StepRecord {
  BatchStats stats;  // summed over replicas and micro-steps
  std::uint64_t bad_samples = 0;
  loader::LoaderState position;  // where the stream stands after the step's last batch
  double wait_seconds = 0;
  double busy_seconds = 0;
  double allreduce_exposed_seconds = 0;
};

// One instance's record of an epoch: the sum of its completed steps.
struct EpochRecord {
  std::uint64_t epoch = 0;
  StallMeter meter;
  BatchStats stats;
  std::uint64_t bad_samples = 0;
  double allreduce_exposed_seconds = 0;
};

// An epoch's figures summed over every instance. They cross instances as one all-reduce of
// these doubles, in this order.
struct EpochSums {
  double loss_sum = 0;
  double correct = 0;
  double samples = 0;
  double wait_seconds = 0;
  double step_seconds = 0;
  double fill_seconds = 0;
  double allreduce_exposed_seconds = 0;
  double bad_samples = 0;

  // A collective: every instance calls it once per reported epoch.
  static EpochSums SumOverInstances(const EpochRecord& record, Collectives& collectives) {
    std::array<double, 8> values = {record.stats.loss_sum,
                                    static_cast<double>(record.stats.correct),
                                    static_cast<double>(record.stats.samples),
                                    record.meter.wait_seconds(),
                                    record.meter.step_seconds(),
                                    record.meter.fill_seconds(),
                                    record.allreduce_exposed_seconds,
                                    static_cast<double>(record.bad_samples)};
    collectives.AllreduceSum(std::span<double>(values));
    return EpochSums{values[0], values[1], values[2], values[3],
                     values[4], values[5], values[6], values[7]};
  }
};

}  // namespace

// One Train() call: the IO tiles and the compute arena it runs on, and what carries from
// step to step. Its stages are the step (micro-steps, then the update) and the epoch's
// report.
class Trainer::TrainRun {
 public:
  TrainRun(Trainer& trainer, transport::BatchStream& stream)
      : t_(trainer),
        replica_count_(trainer.replicas_.size()),
        accumulation_(trainer.options_.gradient_accumulation),
        overlap_(trainer.options_.allreduce == AllreduceMode::kOverlap),
        // At least one IO tile per replica, so each replica has a tile's landing bandwidth;
        // the tiles share one ordered ring and the batches are dealt round-robin from it.
        io_(stream, IoTilesOptions{std::max(trainer.options_.io_tiles, trainer.options_.replicas),
                                   trainer.options_.staging_depth * replica_count_,
                                   trainer.options_.local_batch, trainer.options_.sample_bytes,
                                   trainer.check_}),
        arena_(trainer.options_.compute_threads),
        scale_(1.0f / static_cast<float>(replica_count_ * static_cast<std::size_t>(accumulation_) *
                                         static_cast<std::size_t>(trainer.collectives_.size()))),
        steps_per_epoch_(stream.batches_per_epoch() /
                         (replica_count_ * static_cast<std::size_t>(accumulation_))) {
    items_.reserve(replica_count_);
  }

  bool done() const { return t_.options_.max_steps != 0 && t_.step_ >= t_.options_.max_steps; }
  bool stream_ended() const { return stream_ended_; }
  bool epoch_ended() const { return epoch_ended_; }

  // Steps through the trainer's epoch until the stream's epoch ends or max_steps is reached.
  EpochRecord TrainEpoch() {
    EpochRecord record;
    record.epoch = t_.epoch_;
    epoch_ended_ = false;
    while (!done()) {
      std::optional<StepRecord> step = Step();
      if (!step) break;  // a partial step is dropped, identically on every instance
      AfterStep(*step, record);
    }
    return record;
  }

  // Sums the epoch's record over the instances (collectives: every instance has the same
  // number of steps here), validates after a whole epoch, and hands on the report.
  void ReportEpoch(const EpochRecord& record, const ValidationFactory& make_validation) {
    const EpochSums sums = EpochSums::SumOverInstances(record, t_.collectives_);
    double slowest[1] = {record.meter.step_seconds()};
    t_.collectives_.AllreduceMax(std::span<double>(slowest));
    EpochReport report;
    report.epoch = record.epoch;
    report.steps = record.meter.steps();
    report.global_step = t_.step_;
    report.images = static_cast<std::uint64_t>(sums.samples);
    report.bad_samples = static_cast<std::uint64_t>(sums.bad_samples);
    report.seconds = slowest[0];
    report.images_per_second = slowest[0] > 0 ? sums.samples / slowest[0] : 0;
    report.loss = sums.samples > 0 ? sums.loss_sum / sums.samples : 0;
    if (t_.replicas_[0]->core->classifies() && sums.samples > 0) {
      report.accuracy = sums.correct / sums.samples;
    }
    report.stall_percent =
        sums.step_seconds > 0 ? 100.0 * sums.wait_seconds / sums.step_seconds : 0;
    report.wait_seconds = sums.wait_seconds;
    report.fill_seconds = sums.fill_seconds;
    report.allreduce = AllreduceModeName(t_.options_.allreduce);
    report.allreduce_exposed_seconds = sums.allreduce_exposed_seconds;
    if (epoch_ended_ && make_validation) t_.Validate(make_validation, report);
    if (t_.report_) t_.report_(report);
  }

 private:
  // One optimizer step: every micro-step's batches through every replica, then the
  // all-reduce and the update. nullopt if the epoch ended first.
  std::optional<StepRecord> Step() {
    for (auto& replica : t_.replicas_) std::ranges::fill(replica->gradients, 0.0f);
    StepRecord step;
    step_samples_.clear();
    for (int g = 0; g < accumulation_ && !epoch_ended_; ++g) {
      MicroStep(g == accumulation_ - 1, step);
    }
    if (epoch_ended_) return std::nullopt;
    Update(step);
    return step;
  }

  void MicroStep(bool last, StepRecord& step) {
    const auto wait_start = Clock::now();
    AcquireItems();
    const auto compute_start = Clock::now();
    step.wait_seconds += Seconds(wait_start, compute_start);
    if (!epoch_ended_) {
      // With overlap, the last micro-step runs its backward pass in the core's segments.
      Compute(overlap_ && last);
      AddItems(step);
    }
    for (std::size_t i = 0; i < items_.size(); ++i) io_.Release();
    step.busy_seconds += Seconds(compute_start, Clock::now());
  }

  // One batch per replica into items_, or fewer up to an end-of-epoch marker.
  void AcquireItems() {
    items_.clear();
    for (std::size_t r = 0; r < replica_count_; ++r) {
      const StagedBatch& item = io_.Acquire();
      items_.push_back(&item);
      if (item.end_of_epoch) {
        epoch_ended_ = true;
        stream_ended_ = item.end_of_stream;
        return;
      }
    }
  }

  // The compute tiles: the replicas run side by side in the arena. `staged`: the backward
  // pass runs segment by segment, and each segment's sum starts crossing instances as
  // soon as every replica has finished it, while the next segment computes.
  void Compute(bool staged) {
    arena_.execute([&] {
      tbb::parallel_for(std::size_t{0}, replica_count_, [&](std::size_t r) {
        Replica& replica = *t_.replicas_[r];
        const InputView view = ViewOf(*items_[r]);
        replica.stats = staged ? replica.core->BeginGradients(view, replica.gradients)
                               : replica.core->AccumulateGradients(view, replica.gradients);
      });
    });
    const std::size_t segments = staged ? t_.replicas_[0]->core->gradient_segments() : 0;
    for (std::size_t s = 0; s < segments; ++s) {
      arena_.execute([&] {
        tbb::parallel_for(std::size_t{0}, replica_count_, [&](std::size_t r) {
          t_.replicas_[r]->core->BackwardSegment(s, t_.replicas_[r]->gradients);
        });
      });
      const GradientSegment segment = t_.replicas_[0]->core->gradient_segment(s);
      t_.SumReplicas(segment.offset, segment.size);
      t_.collectives_.StartAllreduceSum(
          std::span<float>(t_.reduced_.data() + segment.offset, segment.size));
      // OpenMPI moves non-blocking collectives only inside MPI calls.
      t_.collectives_.Progress();
    }
  }

  // Adds what the micro-step's batches trained on to the step.
  void AddItems(StepRecord& step) {
    for (std::size_t r = 0; r < replica_count_; ++r) {
      step.stats.loss_sum += t_.replicas_[r]->stats.loss_sum;
      step.stats.correct += t_.replicas_[r]->stats.correct;
      step.stats.samples += t_.replicas_[r]->stats.samples;
    }
    for (const StagedBatch* item : items_) step.bad_samples += item->meta.substituted;
    step.position = items_.back()->position;
    if (t_.samples_) {
      for (const StagedBatch* item : items_) {
        step_samples_.insert(step_samples_.end(), item->sample_indices.begin(),
                             item->sample_indices.end());
      }
    }
  }

  // Local reduction in replica order, then across instances: one fixed summation order
  // (the overlap path did the same per segment and only waits here). Then every replica
  // applies the mean gradient.
  void Update(StepRecord& step) {
    const auto update_start = Clock::now();
    if (overlap_) {
      t_.collectives_.WaitAllreduces();
    } else {
      t_.SumReplicas(0, t_.reduced_.size());
      t_.collectives_.AllreduceSum(std::span<float>(t_.reduced_));
    }
    step.allreduce_exposed_seconds = Seconds(update_start, Clock::now());
    for (float& g : t_.reduced_) g *= scale_;
    arena_.execute([&] {
      tbb::parallel_for(std::size_t{0}, replica_count_, [&](std::size_t r) {
        t_.replicas_[r]->optimizer.Step(t_.replicas_[r]->core->parameters(), t_.reduced_);
      });
    });
    ++t_.step_;
    step.busy_seconds += Seconds(update_start, Clock::now());
  }

  // Adds a completed step to the epoch's record, then the per-step sinks and checks.
  void AfterStep(StepRecord& step, EpochRecord& record) {
    if (t_.samples_) t_.samples_(record.epoch, step_samples_);
    record.allreduce_exposed_seconds += step.allreduce_exposed_seconds;
    record.stats.loss_sum += step.stats.loss_sum;
    record.stats.correct += step.stats.correct;
    record.stats.samples += step.stats.samples;
    record.bad_samples += step.bad_samples;
    if (first_step_) {
      // The first wait of a run is the pipeline filling, not a stall of the steady state.
      record.meter.AddFill(step.wait_seconds);
      step.wait_seconds = 0;
      first_step_ = false;
    }
    record.meter.AddStep(step.wait_seconds, step.busy_seconds);
    if (t_.progress_) t_.progress_(Progress(step, record));
    if (t_.options_.check_every != 0 && t_.step_ % t_.options_.check_every == 0) {
      t_.CheckReplicasIdentical();
    }
    if (t_.options_.checkpoint_every != 0 && t_.step_ % t_.options_.checkpoint_every == 0) {
      t_.SaveCheckpoint(step.position);
    }
  }

  StepProgress Progress(const StepRecord& step, const EpochRecord& record) const {
    StepProgress progress;
    progress.epoch = record.epoch;
    progress.step_in_epoch = record.meter.steps();
    progress.steps_per_epoch = steps_per_epoch_;
    progress.global_step = t_.step_;
    const double seconds = record.meter.step_seconds();
    progress.images_per_second =
        seconds > 0 ? static_cast<double>(record.stats.samples) * t_.collectives_.size() / seconds
                    : 0;
    progress.stall_percent = 100 * record.meter.stall_fraction();
    progress.step_wait_seconds = step.wait_seconds;
    progress.step_busy_seconds = step.busy_seconds;
    return progress;
  }

  Trainer& t_;
  const std::size_t replica_count_;
  const int accumulation_;
  const bool overlap_;
  IoTiles io_;
  tbb::task_arena arena_;
  const float scale_;
  const std::uint64_t steps_per_epoch_;
  std::vector<const StagedBatch*> items_;    // this micro-step's batches, one per replica
  std::vector<std::uint64_t> step_samples_;  // for the sample sink
  bool first_step_ = true;
  bool stream_ended_ = false;
  bool epoch_ended_ = false;
};

std::uint64_t Trainer::Train(transport::BatchStream& stream,
                             const ValidationFactory& make_validation) {
  TrainRun run(*this, stream);
  while (!run.stream_ended() && !run.done()) {
    const EpochRecord record = run.TrainEpoch();
    if (record.meter.steps() > 0) run.ReportEpoch(record, make_validation);
    if (run.epoch_ended()) ++epoch_;
  }
  CheckReplicasIdentical();
  return step_;
}

}  // namespace tilefeed::trainer
