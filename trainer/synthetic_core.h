#pragma once

// SyntheticCore: a compute core whose cost per sample is set, for measuring stall exactly.
// A step normalises the batch (the real per-pixel work every core does) and then runs a
// fixed arithmetic loop over the normalised pixels for as many iterations as make the whole
// step cost `us_per_sample` microseconds per sample, as calibrated once by
// CalibrateSyntheticKernel() (the normalisation's calibrated cost is taken off the loop's;
// a budget smaller than the normalisation skips it, so 0 us per sample costs nothing but
// one pass summing the pixels). Evaluate() only sums.
// It computes for real; it never sleeps.
//
// Its three parameters learn the per-channel mean of the normalised input (loss: half the
// squared distance), so gradients, all-reduce, checkpoints and bit-identity are exercised
// like a real model's. The gradient does not depend on the loop, so instances calibrated
// differently still stay bit-identical.
//
// Thread safety: as ComputeCore. A calibration is a plain value shared by all replicas.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trainer/compute_core.h"

namespace tilefeed::trainer {

// This machine's speed for the two parts of a synthetic step.
struct KernelCalibration {
  double iterations_per_us = 0;       // kernel loop iterations per microsecond
  double normalize_ns_per_pixel = 0;  // NormalizeInto, per pixel (3 channels)
};

// Times the kernel loop and the normalisation (best of a few runs each, about `seconds`
// in total): the best run is the one least disturbed by other processes on the core.
KernelCalibration CalibrateSyntheticKernel(double seconds = 0.2);

class SyntheticCore final : public ComputeCore {
 public:
  // REQUIRES: us_per_sample >= 0; calibration.iterations_per_us > 0.
  SyntheticCore(double us_per_sample, const KernelCalibration& calibration,
                const Normalization& normalization = {});

  std::span<float> parameters() override { return parameters_; }
  BatchStats AccumulateGradients(const InputView& input, std::span<float> gradients) override;
  BatchStats Evaluate(const InputView& input) override;
  bool classifies() const override { return false; }
  std::string name() const override { return "synthetic"; }
  // The loop's result, kept so the compiler cannot drop the loop.
  float sink() const { return sink_; }

 private:
  BatchStats Run(const InputView& input, std::span<float> gradients, bool burn);

  double us_per_sample_;
  KernelCalibration calibration_;
  Normalization normalization_;
  std::vector<float> parameters_ = std::vector<float>(3, 0.0f);
  std::vector<float> normalized_;
  float sink_ = 0;
};

// The kernel loop itself: `iterations` dependent multiply-adds over `data`. Exposed for
// calibration and tests.
float SyntheticKernel(std::span<const float> data, std::uint64_t iterations);

}  // namespace tilefeed::trainer
