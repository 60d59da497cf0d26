#include "tilefeed/cuda/feed.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace tilefeed::cuda {

DeviceBatch::DeviceBatch(DeviceBatch&& other) noexcept { *this = std::move(other); }

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& other) noexcept {
  if (this != &other) {
    Release();
    feed_ = std::exchange(other.feed_, nullptr);
    buffer_ = other.buffer_;
    consumer_ = other.consumer_;
    epoch_ = other.epoch_;
    index_ = other.index_;
    shape_ = other.shape_;
  }
  return *this;
}

void DeviceBatch::Release() noexcept {
  if (feed_ != nullptr) std::exchange(feed_, nullptr)->Released(buffer_, consumer_);
}

DeviceFeed::DeviceFeed(transport::BatchStream& stream, FeedDevice& device, std::size_t buffers,
                       std::size_t max_host_batches)
    : stream_(stream), device_(device), max_host_batches_(max_host_batches), held_(buffers, false) {
  if (buffers == 0) throw std::invalid_argument("DeviceFeed: needs at least one device buffer");
  if (max_host_batches == 0) {
    throw std::invalid_argument("DeviceFeed: needs to hold at least one host batch");
  }
}

DeviceFeed::~DeviceFeed() {
  // A host batch's memory may be reused (or freed with its stream) once it is back, so
  // every copy still reading one must finish first.
  while (!in_flight_.empty()) Reap(true);
}

// Gives back, oldest first, the host batches whose copies are done; with `wait_oldest`,
// first waits for the oldest copy. Copies run in order on one stream, so the first copy
// not done ends the scan.
void DeviceFeed::Reap(bool wait_oldest) {
  if (wait_oldest && !in_flight_.empty()) device_.WaitCopy(in_flight_.front().buffer);
  while (!in_flight_.empty() && device_.CopyDone(in_flight_.front().buffer)) {
    in_flight_.pop_front();  // destroys the ReceivedBatch: the batch goes back
  }
}

std::optional<DeviceBatch> DeviceFeed::Next(StreamHandle consumer) {
  if (release_error_) std::rethrow_exception(release_error_);  // sticky: the ring is unsafe
  Reap(false);
  // Room for the batch about to come: the producer works ahead only into what we leave it.
  while (in_flight_.size() >= max_host_batches_) Reap(true);
  const std::size_t buffer = uploads_ % held_.size();
  if (held_[buffer]) {
    throw std::logic_error("DeviceFeed: all " + std::to_string(held_.size()) +
                           " device buffers are held by DeviceBatches still alive; release "
                           "one before asking for the next batch");
  }
  std::optional<transport::ReceivedBatch> host = stream_.Next();
  if (!host) return std::nullopt;
  const transport::BatchMeta& meta = host->meta();
  if (meta.layout != loader::Layout::kNhwc || meta.channels != 3) {
    throw std::invalid_argument(
        "DeviceFeed: the stream must carry 3-channel NHWC batches (the device converts to "
        "the consumer's layout), got " +
        std::to_string(meta.channels) + " channels " +
        (meta.layout == loader::Layout::kNhwc ? "NHWC" : "NCHW"));
  }
  const BatchShape shape{meta.size, meta.height, meta.width};
  device_.Upload(buffer, HostBatch{host->images(), host->labels(), shape});
  DeviceBatch batch;
  batch.feed_ = this;
  batch.buffer_ = buffer;
  batch.consumer_ = consumer;
  batch.epoch_ = host->epoch();
  batch.index_ = host->index();
  batch.shape_ = shape;
  in_flight_.push_back(InFlight{std::move(*host), buffer});
  held_[buffer] = true;
  ++uploads_;
  device_.HandOver(buffer, consumer);
  return batch;
}

// Runs in DeviceBatch's destructor, so it cannot throw: a device that fails to mark the
// release leaves the buffer held, and the next Next() throws the device's error.
void DeviceFeed::Released(std::size_t buffer, StreamHandle consumer) noexcept {
  try {
    device_.MarkReleased(buffer, consumer);
    held_[buffer] = false;
  } catch (...) {
    if (!release_error_) release_error_ = std::current_exception();
  }
}

}  // namespace tilefeed::cuda
