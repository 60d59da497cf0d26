#include "trainer/sgd.h"

#include <cassert>

namespace tilefeed::trainer {

void SgdMomentum::Step(std::span<float> parameters, std::span<const float> gradients) {
  assert(parameters.size() == velocity_.size() && gradients.size() == velocity_.size());
  const float lr = options_.learning_rate;
  const float momentum = options_.momentum;
  const float decay = options_.weight_decay;
  for (std::size_t i = 0; i < velocity_.size(); ++i) {
    const float g = gradients[i] + decay * parameters[i];
    velocity_[i] = momentum * velocity_[i] + g;
    parameters[i] -= lr * velocity_[i];
  }
}

}  // namespace tilefeed::trainer
