#pragma once

// Loader runs that tests compare byte for byte: the options a small codec test uses and
// every batch of a loader's epochs. Header-only (the support library does not link the
// loader; the tests that include this do).

#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "tilefeed/loader/loader.h"

namespace tilefeed::testing {

// Batches of 4 at 32x32, 2 workers, 2 slots, seed 7, 2 epochs; eval resizes to 40 first.
inline loader::LoaderOptions SmallCodecOptions(loader::Mode mode, loader::BadSamplePolicy policy) {
  loader::LoaderOptions options;
  options.batch_size = 4;
  options.image_size = 32;
  options.workers = 2;
  options.prefetch_depth = 2;
  options.seed = 7;
  options.epochs = 2;
  options.mode = mode;
  options.eval_resize = 40;
  options.bad_sample_policy = policy;
  return options;
}

// Every batch of `options.epochs` epochs: (images per batch, labels, sample indices).
inline auto CollectEpochs(std::unique_ptr<loader::Source> source,
                          const loader::LoaderOptions& options) {
  loader::Loader loader(std::move(source), options);
  std::vector<std::vector<std::uint8_t>> images;
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> indices;
  for (std::uint64_t epoch = 0; epoch < options.epochs; ++epoch) {
    for (loader::Batch& batch : loader) {
      images.emplace_back(batch.images().begin(), batch.images().end());
      labels.insert(labels.end(), batch.labels().begin(), batch.labels().end());
      indices.insert(indices.end(), batch.sample_indices().begin(), batch.sample_indices().end());
    }
  }
  return std::make_tuple(images, labels, indices);
}

}  // namespace tilefeed::testing
