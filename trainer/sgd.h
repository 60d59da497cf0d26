#pragma once

// SGD with momentum and L2 weight decay, PyTorch's rule (dampening 0, not Nesterov):
//   g <- g + weight_decay * p;   v <- momentum * v + g;   p <- p - lr * v
// The optimizer owns the velocity; the parameters belong to the core.
// Thread safety: one thread at a time.

#include <cstddef>
#include <span>
#include <vector>

#include "tilefeed/trainer/trainer.h"  // SgdOptions

namespace tilefeed::trainer {

class SgdMomentum {
 public:
  // Zero velocity for `parameter_count` parameters.
  SgdMomentum(std::size_t parameter_count, const SgdOptions& options)
      : options_(options), velocity_(parameter_count, 0.0f) {}

  // Applies one update to `parameters` with `gradients`.
  // REQUIRES: both have the parameter count.
  void Step(std::span<float> parameters, std::span<const float> gradients);

  std::span<float> velocity() { return velocity_; }
  std::span<const float> velocity() const { return velocity_; }
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<float> velocity_;
};

}  // namespace tilefeed::trainer
