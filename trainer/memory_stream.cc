#include "trainer/memory_stream.h"

#include <cassert>
#include <utility>

namespace tilefeed::trainer {

std::vector<HeldBatch> CaptureBatches(transport::BatchStream& source, std::size_t count) {
  std::vector<HeldBatch> out;
  out.reserve(count);
  while (out.size() < count) {
    std::optional<transport::ReceivedBatch> batch = source.Next();
    if (!batch) {
      if (source.ended()) break;
      continue;  // an epoch end; the next call starts the next epoch
    }
    HeldBatch held;
    held.meta = batch->meta();
    held.images.assign(batch->images().begin(), batch->images().end());
    held.labels.assign(batch->labels().begin(), batch->labels().end());
    held.sample_indices.assign(batch->sample_indices().begin(), batch->sample_indices().end());
    out.push_back(std::move(held));
  }
  return out;
}

InMemoryStream::InMemoryStream(std::vector<HeldBatch> batches, std::uint64_t epochs)
    : batches_(std::move(batches)), epochs_(epochs) {
  assert(!batches_.empty());
  for (const HeldBatch& held : batches_) samples_ += held.meta.size;
}

std::optional<transport::ReceivedBatch> InMemoryStream::Next() {
  std::lock_guard lock(mutex_);
  if (epochs_ != 0 && epoch_ >= epochs_) return std::nullopt;
  if (next_ == batches_.size()) {
    ++epoch_;
    next_ = 0;
    delivered_ = 0;
    return std::nullopt;
  }
  const HeldBatch& held = batches_[next_];
  transport::BatchMeta meta = held.meta;
  meta.epoch = epoch_;
  meta.index = next_++;
  delivered_ += meta.size;
  // No owner: the memory stays with the stream.
  return transport::ReceivedBatch(meta, held.images, held.labels, held.sample_indices, nullptr);
}

loader::LoaderState InMemoryStream::position() const {
  std::lock_guard lock(mutex_);
  return {0, epoch_, delivered_, samples_};
}

bool InMemoryStream::ended() const {
  std::lock_guard lock(mutex_);
  return epochs_ != 0 && epoch_ >= epochs_;
}

}  // namespace tilefeed::trainer
