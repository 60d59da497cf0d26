#include "transport/loader_terms.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tilefeed::transport {

SessionTerms TermsOf(const loader::LoaderOptions& options, const DatasetIdentity& dataset,
                     std::uint64_t end_epoch) {
  SessionTerms terms;
  terms.dataset = dataset;
  terms.slice_index = static_cast<std::uint32_t>(options.slice.index);
  terms.slice_count = static_cast<std::uint32_t>(options.slice.count);
  terms.seed = options.seed;
  terms.image_size = static_cast<std::uint32_t>(options.image_size);
  terms.batch_size = static_cast<std::uint32_t>(options.batch_size);
  terms.mode = options.mode == loader::Mode::kEval ? 1 : 0;
  terms.remainder = options.remainder == loader::Remainder::kDrop ? 1 : 0;
  terms.drop_last = options.drop_last_batch;
  terms.epochs = end_epoch;
  terms.first_epoch = options.first_epoch;
  terms.first_position = options.first_epoch_position;
  return terms;
}

loader::LoaderOptions SessionLoaderOptions(loader::LoaderOptions options,
                                           const SessionTerms& agreed, std::uint64_t dataset_size) {
  if (agreed.first_epoch >= agreed.epochs) {
    throw std::invalid_argument("the trainer is at epoch " + std::to_string(agreed.first_epoch) +
                                ", past the last epoch " + std::to_string(agreed.epochs - 1));
  }
  options.first_epoch = agreed.first_epoch;
  // A position after an epoch's padded last batch means the same as the end.
  options.first_epoch_position = std::min<std::uint64_t>(agreed.first_position, dataset_size);
  options.epochs = agreed.epochs - agreed.first_epoch;
  return options;
}

}  // namespace tilefeed::transport
