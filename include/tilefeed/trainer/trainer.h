#pragma once

// Trainer: the attached training core of one instance. It runs R compute replicas, each
// with its own copy of the model (a ComputeCore) and optimizer, fed by IO tiles that land
// the instance's batches in a staging ring; the instance's batches are dealt round-robin
// to the replicas. A step takes G micro-batches per replica (gradient accumulation), sums
// the replicas' gradients in a fixed order, all-reduces the sum across instances, and every
// replica of every instance applies the identical update, so all copies stay bit-identical
// (checked every check_every steps by comparing parameter checksums).
//
//   global batch = local batch x replicas x instances x gradient accumulation
//
// At the end of an epoch a partial step (fewer than R x G batches left) is dropped; every
// instance has the same number of batches per epoch, so all drop the same.
//
// Ownership: the Trainer owns the cores, optimizers and gradient buffers; the Collectives
// and the streams are borrowed. Log lines and epoch reports go to the sinks it is given,
// from the calling thread, on every instance (main decides who prints).
// Thread safety: one thread (the one that owns the Collectives) drives a Trainer.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::trainer {

class Collectives;  // tilefeed/trainer/mpi_session.h
class ComputeCore;
struct Checkpoint;
struct EpochReport;

// Replicas or instances that diverged, a resume that does not fit, a bad option.
class TrainerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How the summed gradient crosses instances. kBlocking: after the whole backward pass, one
// MPI_Allreduce of the whole vector. kOverlap: the last micro-step's backward runs in the
// core's segments (last layer first); each segment is reduced over the replicas and its
// MPI_Iallreduce started as soon as it is final, with MPI_Test between segments so OpenMPI
// moves it along while the next segment computes; the step waits for all before the update.
// Both sum every element in the same order (replicas in order, then instances), so they
// give the same parameters.
enum class AllreduceMode { kBlocking, kOverlap };

// "blocking" / "overlap".
const char* AllreduceModeName(AllreduceMode mode);
// Throws TrainerError for any other name.
AllreduceMode ParseAllreduceMode(const std::string& name);

// SGD with momentum and L2 weight decay (PyTorch's rule; trainer/sgd.h).
struct SgdOptions {
  float learning_rate = 0.02f;  // step size
  float momentum = 0.9f;        // velocity decay; 0 = plain SGD
  float weight_decay = 1e-4f;   // L2 penalty added to the gradient
};

struct TrainerOptions {
  std::size_t local_batch = 32;        // samples per batch (per replica, per micro-step)
  std::size_t sample_bytes = 0;        // bytes of one uint8 image (core buffer size)
  int replicas = 1;                    // compute replicas in this instance
  int gradient_accumulation = 1;       // micro-batches per replica per step
  int io_tiles = 1;                    // IO tile threads; at least one per replica is used
  std::size_t staging_depth = 3;       // staged batches per replica
  int compute_threads = 1;             // threads of the compute tiles' TBB arena
  std::uint64_t max_steps = 0;         // stop after this many steps in all (0: when data ends)
  std::uint64_t check_every = 20;      // compare parameter checksums every N steps (0: at end only)
  std::uint64_t checkpoint_every = 0;  // instance 0 writes a checkpoint every N steps (0: never)
  std::filesystem::path checkpoint_dir;
  std::uint64_t dataset_digest = 0;  // recorded in checkpoints (loader::Identify; 0: unknown)
  AllreduceMode allreduce = AllreduceMode::kOverlap;
  SgdOptions sgd;
};

// Where the running epoch stands after a step, for a live progress line. This instance's
// figures, not all-reduced (a progress line must not cost a collective per step); since
// instances step in lockstep, images_per_second scales this instance's rate by the
// instance count.
struct StepProgress {
  std::uint64_t epoch = 0;
  std::uint64_t step_in_epoch = 0;    // steps of this epoch done by this Train() call
  std::uint64_t steps_per_epoch = 0;  // full steps the stream's epoch holds (0: unknown)
  std::uint64_t global_step = 0;      // steps since the start of training
  double images_per_second = 0;       // all instances, steady state of this epoch so far
  double stall_percent = 0;           // this instance, this epoch so far (fill excluded)
  // This step alone, this instance: its input wait (0 for a run's first step, whose wait is
  // the pipeline's fill) and the rest of its time (compute, all-reduce, update).
  double step_wait_seconds = 0;
  double step_busy_seconds = 0;
};

class Trainer {
 public:
  using CoreFactory = std::function<std::unique_ptr<ComputeCore>()>;
  using LogSink = std::function<void(const std::string&)>;
  using ReportSink = std::function<void(const EpochReport&)>;
  using ProgressSink = std::function<void(const StepProgress&)>;
  // Told the dataset indices of the samples a completed step trained on (this instance's
  // batches, replica by replica, micro-step by micro-step) and the epoch they belong to.
  using SampleSink = std::function<void(std::uint64_t epoch, std::span<const std::uint64_t>)>;
  // Told every batch before it lands, by the IO tiles (concurrently); what it throws ends
  // Train() (CheckAgainst() below).
  using BatchCheck = std::function<void(const transport::ReceivedBatch&)>;
  // Makes a fresh stream over one epoch of validation data (eval mode, this instance's slice).
  using ValidationFactory = std::function<std::unique_ptr<transport::BatchStream>()>;

  // Makes the replicas' cores and broadcasts instance 0's parameters to every replica of
  // every instance (a collective: every instance constructs its Trainer). Logs the global
  // batch. Throws TrainerError for bad options.
  Trainer(const CoreFactory& make_core, Collectives& collectives, const TrainerOptions& options,
          LogSink log = {}, ReportSink report = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Calls `progress` after every step of later Train() calls, from the training thread;
  // the sink decides how often to show it. An empty sink turns it off.
  void SetProgressSink(ProgressSink progress) { progress_ = std::move(progress); }
  // Calls `samples` after every completed step of later Train() calls (a dropped partial
  // step at an epoch's end trained on nothing and is not reported). Empty: off.
  void SetSampleSink(SampleSink samples) { samples_ = std::move(samples); }
  // Checks every batch of later Train() calls with `check`. Empty: off.
  void SetBatchCheck(BatchCheck check) { check_ = std::move(check); }

  // Continues from `checkpoint`: parameters, velocity, step and epoch counters. Every
  // instance calls it with the same checkpoint. Throws TrainerError if it does not fit.
  void Restore(const Checkpoint& checkpoint);

  // Trains on `stream` until it ends or max_steps steps are done in all; after each full
  // epoch evaluates on make_validation() if given. Checkpoints save the stream's position()
  // after each step's last batch. Returns the steps done in all.
  // Throws what the stream throws, MpiError, CheckpointError, TrainerError.
  std::uint64_t Train(transport::BatchStream& stream,
                      const ValidationFactory& make_validation = {});

  // Compares the parameter checksums of all replicas and instances (a collective); throws
  // TrainerError if any differ. Returns the checksum.
  std::uint64_t CheckReplicasIdentical();

  // Replica 0's parameters; valid until the next Train() or Restore().
  std::span<const float> parameters() const;
  std::span<const float> velocity() const;
  std::uint64_t step() const { return step_; }
  std::uint64_t epoch() const { return epoch_; }
  std::size_t global_batch() const;

 private:
  struct Replica;
  class TrainRun;  // one Train() call: its step and epoch-report stages
  void Log(const std::string& line) const;
  void SaveCheckpoint(const loader::LoaderState& data_position);
  // reduced_[offset, offset + size) = the replicas' gradients summed in replica order.
  void SumReplicas(std::size_t offset, std::size_t size);
  void Validate(const ValidationFactory& make_validation, EpochReport& report);

  Collectives& collectives_;
  TrainerOptions options_;
  LogSink log_;
  ReportSink report_;
  ProgressSink progress_;
  SampleSink samples_;
  BatchCheck check_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<float> reduced_;  // the summed gradient every replica applies
  std::uint64_t step_ = 0;
  std::uint64_t epoch_ = 0;
};

// A step's shape: samples per batch and micro-batches per replica.
struct BatchLayout {
  std::size_t local_batch = 0;
  int gradient_accumulation = 1;
};

// The layout that keeps a checkpoint's global batch when a run resumes with `replicas` x
// `instances` (perhaps another instance count): `current` when it already gives
// `saved_global_batch` (or that is 0, unknown); otherwise another gradient accumulation if
// `accumulation_fixed` is false and one fits, else another local batch if
// `local_batch_fixed` is false and one fits. Throws TrainerError with the arithmetic when
// none does.
BatchLayout FitGlobalBatch(std::uint64_t saved_global_batch, BatchLayout current, int replicas,
                           int instances, bool local_batch_fixed, bool accumulation_fixed);

// Checks a reader's batches against `source` (the order is transport's check): every label,
// and the pixels of a share `pixel_share` of the samples, drawn with a key the reader cannot
// know, against this trainer's own decode with `options` (those of its session terms).
// Throws TrainerError naming the sample, epoch, position and what differs.
Trainer::BatchCheck CheckAgainst(std::unique_ptr<loader::Source> source,
                                 const loader::LoaderOptions& options, double pixel_share);

// FNV-1a 64 of the parameters' bytes: equal checksums, equal bits (almost surely).
std::uint64_t ParameterChecksum(std::span<const float> parameters);

}  // namespace tilefeed::trainer
