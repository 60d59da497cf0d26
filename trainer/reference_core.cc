#include "trainer/reference_core.h"

#include <cblas.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <random>

namespace tilefeed::trainer {
namespace {

// Row-major C[m x n] = alpha * op(A) * op(B) + beta * C.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
              trans_b ? k : n, beta, c, n);
}

// The same with explicit leading dimensions (a block of columns of a row-major matrix).
void GemmLd(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }

ReferenceCore::ReferenceCore(const ReferenceCoreOptions& options) : options_(options) {
  assert(options.classes >= 1 && options.pool >= 1 && options.hidden >= 1);
  const std::size_t features = feature_count();
  const std::size_t hidden = static_cast<std::size_t>(options.hidden);
  const std::size_t classes = static_cast<std::size_t>(options.classes);
  parameters_.assign(hidden * features + hidden + classes * hidden + classes, 0.0f);
  // mt19937_64 and a hand-made uniform map: std::uniform_real_distribution's output is
  // implementation-defined, and a checkpoint must mean the same thing everywhere.
  std::mt19937_64 rng(options.seed ^ 0x7469'6c65'6665'6564ULL);
  auto uniform = [&](float limit) {
    return static_cast<float>((static_cast<double>(rng() >> 11) * 0x1.0p-53 * 2 - 1) * limit);
  };
  float* w1 = parameters_.data();
  float* w2 = w1 + hidden * features + hidden;
  const float limit1 = std::sqrt(6.0f / static_cast<float>(features));
  const float limit2 = std::sqrt(6.0f / static_cast<float>(hidden));
  for (std::size_t i = 0; i < hidden * features; ++i) w1[i] = uniform(limit1);
  for (std::size_t i = 0; i < classes * hidden; ++i) w2[i] = uniform(limit2);
}

std::size_t ReferenceCore::feature_count() const {
  return static_cast<std::size_t>(options_.pool) * options_.pool * 3;
}

std::vector<float> ReferenceCore::Features(const InputView& input) {
  assert(input.height >= options_.pool && input.width >= options_.pool);
  const std::size_t plane = static_cast<std::size_t>(input.height) * input.width;
  normalized_.resize(input.size * 3 * plane);
  const int pool = options_.pool;
  std::vector<float> out(input.size * feature_count());
  // Samples are independent, so they spread over the compute tiles' arena (the caller's)
  // without changing a bit of the result.
  tbb::parallel_for(std::size_t{0}, input.size, [&](std::size_t n) {
    const InputView one{input.images.subspan(n * 3 * plane, 3 * plane),
                        input.labels.subspan(n, 1),
                        1,
                        input.height,
                        input.width,
                        input.layout};
    float* normalized = normalized_.data() + n * 3 * plane;
    NormalizeInto(one, options_.normalization, std::span<float>(normalized, 3 * plane));
    // Adaptive average pooling (PyTorch's bin edges): bin i covers rows
    // [floor(i*H/p), ceil((i+1)*H/p)).
    for (int c = 0; c < 3; ++c) {
      const float* src = normalized + static_cast<std::size_t>(c) * plane;
      float* dst = out.data() + n * feature_count() + static_cast<std::size_t>(c) * pool * pool;
      for (int by = 0; by < pool; ++by) {
        const int y0 = by * input.height / pool;
        const int y1 = ((by + 1) * input.height + pool - 1) / pool;
        for (int bx = 0; bx < pool; ++bx) {
          const int x0 = bx * input.width / pool;
          const int x1 = ((bx + 1) * input.width + pool - 1) / pool;
          float sum = 0;
          for (int y = y0; y < y1; ++y) {
            for (int x = x0; x < x1; ++x) sum += src[static_cast<std::size_t>(y) * input.width + x];
          }
          dst[by * pool + bx] = sum / static_cast<float>((y1 - y0) * (x1 - x0));
        }
      }
    }
  });
  return out;
}

BatchStats ReferenceCore::Forward(const InputView& input, bool backward) {
  const int batch = static_cast<int>(input.size);
  const int features = static_cast<int>(feature_count());
  const int hidden = options_.hidden;
  const int classes = options_.classes;
  const float* w1 = parameters_.data();
  const float* b1 = w1 + static_cast<std::size_t>(hidden) * features;
  const float* w2 = b1 + hidden;
  const float* b2 = w2 + static_cast<std::size_t>(classes) * hidden;

  features_ = Features(input);
  // hidden = relu(X W1^T + b1)
  hidden_.resize(static_cast<std::size_t>(batch) * hidden);
  for (std::size_t n = 0; n < std::size_t(batch); ++n) {
    std::copy(b1, b1 + hidden, hidden_.data() + n * hidden);
  }
  Gemm(false, true, batch, hidden, features, 1.0f, features_.data(), w1, 1.0f, hidden_.data());
  for (float& h : hidden_) h = std::max(h, 0.0f);
  // logits = H W2^T + b2
  logits_.resize(static_cast<std::size_t>(batch) * classes);
  for (std::size_t n = 0; n < std::size_t(batch); ++n) {
    std::copy(b2, b2 + classes, logits_.data() + n * classes);
  }
  Gemm(false, true, batch, classes, hidden, 1.0f, hidden_.data(), w2, 1.0f, logits_.data());

  // Softmax cross-entropy; logits_ becomes d(mean loss)/d(logits) in place.
  BatchStats stats;
  stats.samples = input.size;
  for (int n = 0; n < batch; ++n) {
    float* z = logits_.data() + static_cast<std::ptrdiff_t>(n) * classes;
    const int label = input.labels[static_cast<std::size_t>(n)];
    assert(label >= 0 && label < classes);
    const int argmax = static_cast<int>(std::max_element(z, z + classes) - z);
    if (argmax == label) ++stats.correct;
    const float top = z[argmax];
    double total = 0;
    for (int k = 0; k < classes; ++k) total += std::exp(static_cast<double>(z[k] - top));
    stats.loss_sum += std::log(total) - static_cast<double>(z[label] - top);
    if (!backward) continue;
    for (int k = 0; k < classes; ++k) {
      const double p = std::exp(static_cast<double>(z[k] - top)) / total;
      z[k] = static_cast<float>((p - (k == label ? 1.0 : 0.0)) / batch);
    }
  }
  batch_ = batch;
  return stats;
}

std::pair<int, int> ReferenceCore::ChunkRows(std::size_t chunk) const {
  const int hidden = options_.hidden;
  const int chunks = std::clamp(options_.backward_chunks, 1, hidden);
  const int c = static_cast<int>(chunk);
  return {c * hidden / chunks, (c + 1) * hidden / chunks};
}

std::size_t ReferenceCore::gradient_segments() const {
  return 2 + static_cast<std::size_t>(std::clamp(options_.backward_chunks, 1, options_.hidden));
}

GradientSegment ReferenceCore::gradient_segment(std::size_t index) {
  const std::size_t features = feature_count();
  const auto hidden = static_cast<std::size_t>(options_.hidden);
  const auto classes = static_cast<std::size_t>(options_.classes);
  if (index == 0) return {hidden * features + hidden, classes * hidden + classes};  // W2, b2
  if (index == 1) return {hidden * features, hidden};                               // b1
  const auto [first, last] = ChunkRows(index - 2);
  return {static_cast<std::size_t>(first) * features,
          static_cast<std::size_t>(last - first) * features};
}

BatchStats ReferenceCore::BeginGradients(const InputView& input, std::span<float> gradients) {
  assert(gradients.size() == parameters_.size());
  (void)gradients;
  return Forward(input, true);
}

void ReferenceCore::BackwardSegment(std::size_t index, std::span<float> gradients) {
  assert(gradients.size() == parameters_.size() && index < gradient_segments());
  const int batch = batch_;
  const int features = static_cast<int>(feature_count());
  const int hidden = options_.hidden;
  const int classes = options_.classes;
  const float* w2 = parameters_.data() + static_cast<std::size_t>(hidden) * features + hidden;
  float* gw1 = gradients.data();
  float* gb1 = gw1 + static_cast<std::size_t>(hidden) * features;
  float* gw2 = gb1 + hidden;
  float* gb2 = gw2 + static_cast<std::size_t>(classes) * hidden;
  if (index == 0) {
    // dW2 += dZ^T H, db2 += column sums of dZ.
    Gemm(true, false, classes, hidden, batch, 1.0f, logits_.data(), hidden_.data(), 1.0f, gw2);
    for (int n = 0; n < batch; ++n) {
      for (int k = 0; k < classes; ++k) {
        gb2[k] += logits_[static_cast<std::size_t>(n) * classes + k];
      }
    }
    // dH = dZ W2, masked by the ReLU (needed by every later segment).
    grad_hidden_.resize(hidden_.size());
    Gemm(false, false, batch, hidden, classes, 1.0f, logits_.data(), w2, 0.0f, grad_hidden_.data());
    for (std::size_t i = 0; i < hidden_.size(); ++i) {
      if (hidden_[i] <= 0) grad_hidden_[i] = 0;
    }
    return;
  }
  if (index == 1) {
    // db1 += column sums of dH.
    for (int n = 0; n < batch; ++n) {
      for (int j = 0; j < hidden; ++j) {
        gb1[j] += grad_hidden_[static_cast<std::size_t>(n) * hidden + j];
      }
    }
    return;
  }
  // dW1[rows] += dH[:, rows]^T X.
  const auto [first, last] = ChunkRows(index - 2);
  GemmLd(true, false, last - first, features, batch, 1.0f, grad_hidden_.data() + first, hidden,
         features_.data(), features, 1.0f, gw1 + static_cast<std::size_t>(first) * features,
         features);
}

BatchStats ReferenceCore::AccumulateGradients(const InputView& input, std::span<float> gradients) {
  const BatchStats stats = BeginGradients(input, gradients);
  for (std::size_t i = 0; i < gradient_segments(); ++i) BackwardSegment(i, gradients);
  return stats;
}

BatchStats ReferenceCore::Evaluate(const InputView& input) { return Forward(input, false); }

}  // namespace tilefeed::trainer
