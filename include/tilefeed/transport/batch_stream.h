#pragma once

// The one receiving API of tilefeed: a trainer's IO tiles read batches from a
// BatchStream and get the same ReceivedBatch view whether the batches come from a
// loader in the same process (LoaderStream), another process on the same host
// (shared-memory ring) or another host (ZeroMQ).
//
// A ReceivedBatch is a move-only, read-only view; its memory (a loader slot, a shared
// ring slot, a ZeroMQ message) goes back to where it came from when the handle is
// destroyed. Every stream also says where its consumer stands in the data, as the one
// typed data position (loader::LoaderState): what a checkpoint saves and a resume
// continues from, whichever stream wrote it.
//
// This header is the whole interface and needs only tilefeed::loader, not ZeroMQ: it is
// header-only so that components without the transport library (tilefeed::cuda_feed, the
// Python module) take batches from any stream, and feed a GPU from a local LoaderStream.
//
// Thread safety: a BatchStream's Next() may be called from several IO tile threads;
// implementations serialize it. position() may be called from any thread; to pair it with
// a batch, call it under the same lock as the Next() that returned the batch. A
// ReceivedBatch is used by one thread at a time.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>

#include "tilefeed/loader/loader.h"

namespace tilefeed::transport {

// A failure to move batches: a frame that fails a check, a dead peer, a socket error.
// what() names the peer or endpoint and the reason.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shape and position of one batch, as every stream reports it.
struct BatchMeta {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;  // batch number within the epoch
  std::size_t size = 0;     // samples
  int height = 0;
  int width = 0;
  int channels = 3;
  loader::Layout layout = loader::Layout::kNhwc;
  // Bad samples the loader replaced in this batch (BadSamplePolicy::kSkip): the batch is
  // still full, and the trainer counts them into its epoch report.
  std::uint32_t substituted = 0;
};

// The meta of a loader batch (what a stream or a reader reports for it).
inline BatchMeta MetaOf(const loader::Batch& batch) {
  return BatchMeta{batch.epoch(),  batch.index(),
                   batch.size(),   batch.height(),
                   batch.width(),  batch.channels(),
                   batch.layout(), static_cast<std::uint32_t>(batch.substituted())};
}

class ReceivedBatch {
 public:
  // Whatever keeps the batch's memory alive; destroying it gives the memory back.
  class Owner {
   public:
    virtual ~Owner() = default;
  };

  ReceivedBatch() = default;
  ReceivedBatch(const BatchMeta& meta, std::span<const std::uint8_t> images,
                std::span<const std::int32_t> labels, std::span<const std::uint64_t> indices,
                std::unique_ptr<Owner> owner)
      : meta_(meta),
        images_(images),
        labels_(labels),
        indices_(indices),
        owner_(std::move(owner)) {}

  const BatchMeta& meta() const { return meta_; }
  std::uint64_t epoch() const { return meta_.epoch; }
  std::uint64_t index() const { return meta_.index; }
  std::size_t size() const { return meta_.size; }
  // Valid until this handle is destroyed or moved from.
  std::span<const std::uint8_t> images() const { return images_; }
  std::span<const std::int32_t> labels() const { return labels_; }
  std::span<const std::uint64_t> sample_indices() const { return indices_; }

 private:
  BatchMeta meta_;
  std::span<const std::uint8_t> images_;
  std::span<const std::int32_t> labels_;
  std::span<const std::uint64_t> indices_;
  std::unique_ptr<Owner> owner_;
};

class BatchStream {
 public:
  virtual ~BatchStream() = default;
  // The next batch; nullopt at the end of an epoch (the next call starts the next one)
  // or at the end of the stream (ended() is then true). Throws TransportError or
  // loader::LoaderError.
  virtual std::optional<ReceivedBatch> Next() = 0;
  // True once the stream has no more batches at all.
  virtual bool ended() const = 0;
  virtual std::size_t batches_per_epoch() const = 0;
  // Where the data stands after the last batch Next() returned: `position` samples of
  // `epoch` delivered to all instances together (after an epoch's end, or the stream's,
  // the start of the next epoch), as loader::Loader::state() counts them. A checkpoint
  // saves it; a Loader started at it (a local loader) or SessionTerms' first epoch and
  // position (a remote reader) continue from it.
  virtual loader::LoaderState position() const = 0;
};

// Batches straight from a Loader in this process: no copy, the loader slot is the memory.
class LoaderStream final : public BatchStream {
 public:
  // REQUIRES: `loader` outlives this stream and every batch it returned.
  explicit LoaderStream(loader::Loader& loader) : loader_(loader) {}
  std::optional<ReceivedBatch> Next() override {
    std::optional<loader::Batch> batch = loader_.Next();
    if (!batch) return std::nullopt;
    const BatchMeta meta = MetaOf(*batch);
    const auto images = batch->images();
    const auto labels = batch->labels();
    const auto indices = batch->sample_indices();
    return ReceivedBatch(meta, images, labels, indices,
                         std::make_unique<SlotOwner>(std::move(*batch)));
  }
  bool ended() const override { return loader_.ended(); }
  std::size_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  loader::LoaderState position() const override { return loader_.state(); }

 private:
  // Holds the loader's slot until the ReceivedBatch goes.
  struct SlotOwner final : ReceivedBatch::Owner {
    explicit SlotOwner(loader::Batch b) : batch(std::move(b)) {}
    loader::Batch batch;
  };
  loader::Loader& loader_;
};

}  // namespace tilefeed::transport
