#pragma once

// Stall accounting: how much of the compute tiles' time went to waiting for input. A step's
// time is its input wait (blocked in IoTiles::Acquire) plus its busy time (compute,
// all-reduce, optimizer); stall = wait / (wait + busy). The first step of a run waits for
// the pipeline to fill; that wait is kept apart as fill time, because it is paid once per
// run, not per step, and would otherwise hide the steady state in short runs.
//
// EpochReport is what the trainer reports per epoch; ToJsonLine() writes it as one JSON
// object for --json files.
// Thread safety: plain values.

#include <cstdint>
#include <optional>
#include <string>

namespace tilefeed::trainer {

class StallMeter {
 public:
  // Records one step. REQUIRES: both >= 0.
  void AddStep(double wait_seconds, double busy_seconds);
  // Records the one-off pipeline fill before the first step.
  void AddFill(double seconds) { fill_seconds_ += seconds; }

  std::uint64_t steps() const { return steps_; }
  double wait_seconds() const { return wait_seconds_; }
  double busy_seconds() const { return busy_seconds_; }
  double fill_seconds() const { return fill_seconds_; }
  // wait + busy: the steady-state time of the recorded steps.
  double step_seconds() const { return wait_seconds_ + busy_seconds_; }
  // wait / (wait + busy), in [0, 1]; 0 before any time was recorded.
  double stall_fraction() const;
  // Adds another meter's figures (e.g. another instance's).
  void Merge(const StallMeter& other);

 private:
  std::uint64_t steps_ = 0;
  double wait_seconds_ = 0;
  double busy_seconds_ = 0;
  double fill_seconds_ = 0;
};

// One epoch, summed over every replica and instance.
struct EpochReport {
  std::uint64_t epoch = 0;
  std::uint64_t steps = 0;         // optimizer steps in this epoch
  std::uint64_t global_step = 0;   // steps since the start of training, after this epoch
  std::uint64_t images = 0;        // samples trained on, all instances
  std::uint64_t bad_samples = 0;   // of those, bad samples the loaders replaced (skip policy)
  double seconds = 0;              // steady-state wall time (slowest instance)
  double images_per_second = 0;    // images / seconds
  double loss = 0;                 // mean training loss per sample
  std::optional<double> accuracy;  // training accuracy (classifier cores only)
  double stall_percent = 0;        // 100 * stall fraction over all instances
  double wait_seconds = 0;         // input wait, summed over instances
  double fill_seconds = 0;         // pipeline fill before the run's first step
  std::string allreduce;           // the gradient all-reduce mode ("blocking", "overlap")
  // Gradient all-reduce time not hidden behind compute, summed over instances: from the end
  // of the backward pass to the summed gradient (blocking: the local sum and MPI_Allreduce;
  // overlap: the wait for the pending MPI_Iallreduces). Includes waiting for slower instances.
  double allreduce_exposed_seconds = 0;
  std::optional<double> val_loss;
  std::optional<double> val_accuracy;
  std::uint64_t val_images = 0;
};

// The report as one line of JSON (no trailing newline); absent optionals are null.
std::string ToJsonLine(const EpochReport& report);

}  // namespace tilefeed::trainer
