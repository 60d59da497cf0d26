#pragma once

// ReferenceCore: a real small image classifier, enough to show that data reaches the model
// and the model learns. The normalised input is average-pooled to pool x pool x 3 features
// (adaptive pooling, so any image size works), then FC(hidden) + ReLU, then FC(classes);
// softmax cross-entropy. The three matrix products of each layer run on OpenBLAS
// (cblas_sgemm), single-threaded per call so replicas and instances do not fight over cores
// and results do not depend on a BLAS thread count.
//
// Parameters, one flat vector: W1 [hidden x features], b1 [hidden], W2 [classes x hidden],
// b2 [classes]; features are ordered channel, row, column.
//
// The backward pass comes in segments, in the order it produces them: [W2, b2] (and dH),
// b1, then W1 in backward_chunks blocks of rows, so the trainer can start all-reducing the
// last layer while W1's gradient is still being computed. AccumulateGradients runs the same
// segments back to back, so both paths give the same bits.
//
// Thread safety: as ComputeCore.

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "trainer/compute_core.h"

namespace tilefeed::trainer {

struct ReferenceCoreOptions {
  int classes = 10;         // output classes
  int pool = 16;            // input pooled to pool x pool x 3 features
  int hidden = 256;         // hidden units
  std::uint64_t seed = 0;   // parameter initialisation
  int backward_chunks = 4;  // W1's gradient in this many row blocks (overlap granularity)
  Normalization normalization;
};

class ReferenceCore final : public ComputeCore {
 public:
  // Initialises the parameters (He-uniform weights, zero biases) from options.seed.
  // REQUIRES: classes >= 1, pool >= 1, hidden >= 1.
  explicit ReferenceCore(const ReferenceCoreOptions& options);

  std::span<float> parameters() override { return parameters_; }
  BatchStats AccumulateGradients(const InputView& input, std::span<float> gradients) override;
  BatchStats BeginGradients(const InputView& input, std::span<float> gradients) override;
  std::size_t gradient_segments() const override;
  GradientSegment gradient_segment(std::size_t index) override;
  void BackwardSegment(std::size_t index, std::span<float> gradients) override;
  BatchStats Evaluate(const InputView& input) override;
  bool classifies() const override { return true; }
  std::string name() const override { return "reference"; }

  // The pooled features of `input` (batch x features), after normalisation.
  // REQUIRES: input.height >= pool and input.width >= pool.
  std::vector<float> Features(const InputView& input);
  std::size_t feature_count() const;

 private:
  // Forward pass and loss; leaves d(mean loss)/d(logits) in logits_ when `backward`.
  BatchStats Forward(const InputView& input, bool backward);
  // W1's row block `chunk`: rows [first, last).
  std::pair<int, int> ChunkRows(std::size_t chunk) const;

  ReferenceCoreOptions options_;
  std::vector<float> parameters_;
  // Scratch, kept between calls so steady-state steps do not allocate.
  std::vector<float> normalized_, features_, hidden_, logits_, grad_hidden_;
  int batch_ = 0;  // the batch of the last BeginGradients
};

// Sets the BLAS library's own thread count (process-wide; call from main).
void SetBlasThreads(int threads);

}  // namespace tilefeed::trainer
