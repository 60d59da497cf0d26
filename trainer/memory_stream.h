#pragma once

// InMemoryStream: a BatchStream over batches already in memory, replayed in order epoch
// after epoch. It is the baseline of a stall measurement -- the same IO tiles and core, with
// no loader behind them -- and lets tests feed a trainer exactly the samples they choose.
//
// Its data position counts the held batches as the whole dataset of one instance: seed 0,
// dataset_size the samples of one epoch, position the samples of the epoch handed out.
//
// Ownership: the stream owns its batches; a ReceivedBatch it returns borrows them and must
// not outlive the stream. Replaying copies nothing (the IO tiles land the batch as usual).
// Thread safety: Next() may be called from several IO tile threads (a mutex serializes
// it); ended(), batches_per_epoch() and position() from any thread.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::trainer {

// One batch held in memory. On replay meta.epoch and meta.index say where it was handed out.
struct HeldBatch {
  transport::BatchMeta meta;
  std::vector<std::uint8_t> images;  // meta.size images
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> sample_indices;
};

// Copies the next `count` batches of `source` into memory, stepping over epoch ends; fewer
// when the source ends first. Throws what source.Next() throws.
std::vector<HeldBatch> CaptureBatches(transport::BatchStream& source, std::size_t count);

class InMemoryStream final : public transport::BatchStream {
 public:
  // One epoch is `batches`, in order; the stream ends after `epochs` epochs (0: never).
  // REQUIRES: !batches.empty().
  InMemoryStream(std::vector<HeldBatch> batches, std::uint64_t epochs);

  std::optional<transport::ReceivedBatch> Next() override;
  bool ended() const override;
  std::size_t batches_per_epoch() const override { return batches_.size(); }
  loader::LoaderState position() const override;

 private:
  const std::vector<HeldBatch> batches_;
  const std::uint64_t epochs_;
  std::uint64_t samples_ = 0;  // in one epoch: the held batches' sizes summed
  mutable std::mutex mutex_;
  std::uint64_t epoch_ = 0;      // guarded by mutex_
  std::size_t next_ = 0;         // guarded by mutex_: the batch of epoch_ handed out next
  std::uint64_t delivered_ = 0;  // guarded by mutex_: samples of epoch_ handed out
};

}  // namespace tilefeed::trainer
