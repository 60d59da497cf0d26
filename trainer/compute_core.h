#pragma once

// ComputeCore: what runs on the compute tiles for one replica. A core owns its parameters
// (one flat float vector) and turns one landed uint8 batch into the gradient of its mean
// loss; normalisation (uint8 -> float, mean/std per channel) happens inside the core, so
// pixels cross the pipeline as uint8. The trainer owns the optimizer and the collectives.
//
// Two cores exist: SyntheticCore (trainer/synthetic_core.h), a calibrated kernel of fixed
// cost per sample for measuring stall, and ReferenceCore (trainer/reference_core.h), a
// real small classifier whose matrix work runs on OpenBLAS.
//
// Thread safety: a core is used by one thread at a time; distinct cores run concurrently.
// Calls are deterministic: the same parameters and batch give bit-identical gradients.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tilefeed/loader/loader.h"

namespace tilefeed::trainer {

// A read-only view of a landed batch; valid as long as the staged item it came from.
struct InputView {
  std::span<const std::uint8_t> images;  // size images of height x width x 3, in `layout`
  std::span<const std::int32_t> labels;
  std::size_t size = 0;
  int height = 0;
  int width = 0;
  loader::Layout layout = loader::Layout::kNhwc;
};

// Per-channel normalisation x' = (x - mean) / std, on the 0..255 scale (ImageNet defaults).
struct Normalization {
  std::array<float, 3> mean = {0.485f * 255, 0.456f * 255, 0.406f * 255};
  std::array<float, 3> std = {0.229f * 255, 0.224f * 255, 0.225f * 255};
};

// Normalises `input` into `out` as NCHW floats.
// REQUIRES: out.size() == input.size * 3 * input.height * input.width.
void NormalizeInto(const InputView& input, const Normalization& normalization,
                   std::span<float> out);

// What one forward (and backward) pass saw: sums over the batch, so they add up.
struct BatchStats {
  double loss_sum = 0;        // summed per-sample loss
  std::uint64_t correct = 0;  // samples whose argmax is the label
  std::uint64_t samples = 0;
};

// A contiguous piece of the gradient vector that a staged backward pass finishes at once.
struct GradientSegment {
  std::size_t offset = 0;
  std::size_t size = 0;
};

class ComputeCore {
 public:
  virtual ~ComputeCore() = default;
  // The parameters, one flat vector; the optimizer updates them in place.
  virtual std::span<float> parameters() = 0;
  // Adds the gradient of the batch's mean loss to `gradients`.
  // REQUIRES: gradients.size() == parameters().size(); input.size >= 1.
  virtual BatchStats AccumulateGradients(const InputView& input, std::span<float> gradients) = 0;
  // Staged backward, for overlapping the gradient all-reduce with the rest of the backward
  // pass: BeginGradients runs the forward pass and the loss (and may add some gradient);
  // then BackwardSegment(i, gradients) for i = 0 .. gradient_segments() - 1, in that order
  // (backward order: last layer first), adds the rest. After BackwardSegment(i) returns, the
  // elements of gradient_segment(i) are final for this batch; the segments are disjoint and
  // cover the vector. Begin plus every segment adds bit for bit what AccumulateGradients
  // adds. The default is one segment, the whole vector, all done by BeginGradients.
  virtual BatchStats BeginGradients(const InputView& input, std::span<float> gradients) {
    return AccumulateGradients(input, gradients);
  }
  virtual std::size_t gradient_segments() const { return 1; }
  virtual GradientSegment gradient_segment(std::size_t /*index*/) {
    return {0, parameters().size()};
  }
  virtual void BackwardSegment(std::size_t /*index*/, std::span<float> /*gradients*/) {}
  // Forward only (eval mode).
  virtual BatchStats Evaluate(const InputView& input) = 0;
  // Whether correct counts mean anything (a classifier) or not (the synthetic kernel).
  virtual bool classifies() const = 0;
  virtual std::string name() const = 0;
};

}  // namespace tilefeed::trainer
