#pragma once

// IoTiles: the consumer side of the input pipeline inside the training core. K threads
// (the IO tiles) take batches from a transport::BatchStream and land them -- copy them,
// like a host-to-device transfer -- in a staging ring of preallocated core buffers, then
// drop the ReceivedBatch so its loader slot goes back at once. The compute tiles take the
// landed batches in stream order while the IO tiles land the next ones.
//
// Order: each IO tile takes a ticket together with its batch (under one lock, so ticket
// order is stream order), and ticket t lands in slot t % capacity once ticket t - capacity
// has been released. The consumer takes tickets 0, 1, 2, ... so with any K it sees every
// batch and every end-of-epoch exactly once, in stream order.
//
// Each item carries the stream's position() right after it was taken (under the lock that
// serializes Next()), so a checkpoint after a step names exactly the data it trained on.
//
// Ownership: IoTiles owns its threads and buffers; the stream must outlive it. The
// destructor stops and joins the tiles.
// Thread safety: Acquire() and Release() are called by one consumer thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::trainer {

// One landed item: a batch in the core's buffer, or the end of an epoch.
struct StagedBatch {
  bool end_of_epoch = false;   // no batch: the stream's epoch ended here
  bool end_of_stream = false;  // with end_of_epoch: no batches follow at all
  transport::BatchMeta meta;
  std::vector<std::uint8_t> images;  // meta.size images; capacity preallocated
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> sample_indices;  // the dataset index of each sample
  loader::LoaderState position;               // the stream's, right after this item was taken
};

struct IoTilesOptions {
  int tiles = 1;                      // IO tile threads
  std::size_t capacity = 3;           // staged items (core buffers)
  std::size_t max_batch_samples = 0;  // buffer size: samples per batch
  std::size_t sample_bytes = 0;       // buffer size: bytes per sample
  // Told each batch before it lands, from the tile's thread; what it throws is the item's.
  std::function<void(const transport::ReceivedBatch&)> check;
};

class IoTiles {
 public:
  // Allocates the buffers and starts the tiles.
  // REQUIRES: tiles >= 1, capacity >= 1; `stream` outlives this object.
  IoTiles(transport::BatchStream& stream, const IoTilesOptions& options);
  ~IoTiles();
  IoTiles(const IoTiles&) = delete;
  IoTiles& operator=(const IoTiles&) = delete;

  // Blocks until the next item in stream order has landed and returns it; the reference
  // stays valid until the Release() that gives it back. After an end_of_stream item it
  // must not be called again. Rethrows what the stream or the check threw
  // (TransportError, loader::LoaderError), or TransportError for a batch that does not fit.
  // REQUIRES: fewer than capacity items acquired and not released.
  const StagedBatch& Acquire();
  // Gives back the oldest acquired item's buffer.
  // REQUIRES: an acquired item not yet released.
  void Release();

  std::size_t capacity() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tilefeed::trainer
