#include "transport/loader_terms.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace tilefeed::transport {

SessionTerms TermsOf(const loader::LoaderOptions& options, const loader::DatasetIdentity& dataset,
                     std::uint64_t end_epoch, const loader::LoaderState& start) {
  SessionTerms terms;
  terms.dataset = {dataset.samples, dataset.digest};  // no class count on the wire
  terms.slice_index = static_cast<std::uint32_t>(options.slice.index);
  terms.slice_count = static_cast<std::uint32_t>(options.slice.count);
  terms.seed = options.seed;
  terms.image_size = options.image_size;
  terms.batch_size = static_cast<std::uint32_t>(options.batch_size);
  terms.mode = options.mode == loader::Mode::kEval ? 1 : 0;
  terms.augment = loader::AugmentSpecText(options.augment);
  terms.decode_scaling = options.jpeg.decode_scaling;
  terms.remainder = options.remainder == loader::Remainder::kDrop ? 1 : 0;
  terms.drop_last = options.drop_last_batch;
  terms.epochs = end_epoch;
  terms.first_epoch = start.epoch;
  terms.first_position = start.position;
  return terms;
}

SessionLoader SessionLoaderOf(loader::LoaderOptions options, const SessionTerms& agreed,
                              std::uint64_t dataset_size) {
  if (agreed.first_epoch >= agreed.epochs) {
    throw std::invalid_argument("the trainer is at epoch " + std::to_string(agreed.first_epoch) +
                                ", past the last epoch " + std::to_string(agreed.epochs - 1));
  }
  options.epochs = agreed.epochs - agreed.first_epoch;
  // A position after an epoch's padded last batch means the same as the end.
  const loader::LoaderState start{options.seed, agreed.first_epoch,
                                  std::min<std::uint64_t>(agreed.first_position, dataset_size),
                                  dataset_size};
  return {std::move(options), start};
}

}  // namespace tilefeed::transport
