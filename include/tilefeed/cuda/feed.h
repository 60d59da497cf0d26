#pragma once

// DeviceFeed: a GPU's IO tiles, the one path from host batches to a GPU. It takes batches
// from a transport::BatchStream -- a LoaderStream over a loader in this process (its slots
// ideally page-locked: PinnedSlotMemory), or a remote reader's stream -- and lands each in
// one of a ring of device buffers, copied and converted on the device's own copy stream,
// while the consumer's stream computes on the batch before. Two rules keep the ring safe:
//   * a host batch (a ReceivedBatch: a loader slot, a shared ring slot, a message) goes
//     back to its stream only after the device has finished copying out of it
//     (CopyDone); never while a copy may still read it;
//   * a device buffer is written again only after the consumer's stream has passed the
//     point where the consumer released it (MarkReleased, waited for on the device).
// The device is behind FeedDevice: CudaDevice (device.h) on a GPU, a fake in the tests.
//
// Host batches held: at most `max_host_batches`, counting the one just received; before
// asking the stream for another the feed gives back the oldest (waiting for its copy if
// need be). Pick it below the batches the stream can lend at once, so that the producer
// always has room to work ahead: for a LoaderStream, the loader's prefetch_depth - 1 (at
// least 1); for a ZmqBatchStream, its credits - 1 (at least 1).
//
// Ownership: the stream and the device outlive the feed; DeviceBatches must not outlive
// it. Thread safety: one consumer thread calls Next() and releases DeviceBatches.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <span>
#include <vector>

#include "tilefeed/cuda/convert.h"
#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::cuda {

// A host batch as the device sees it: memory to copy from.
struct HostBatch {
  std::span<const std::uint8_t> images;  // uint8 NHWC
  std::span<const std::int32_t> labels;
  BatchShape shape;
};

// What DeviceFeed asks of a device. All calls come from the feed's consumer thread.
class FeedDevice {
 public:
  virtual ~FeedDevice() = default;
  // Enqueues on the device's copy stream, in order: a wait for `buffer`'s last release
  // mark (if any), the copy of `batch` into `buffer`, its conversion. Returns at once.
  virtual void Upload(std::size_t buffer, const HostBatch& batch) = 0;
  // Whether the copy of `buffer`'s last Upload has finished reading host memory.
  virtual bool CopyDone(std::size_t buffer) = 0;
  // Blocks until CopyDone(buffer).
  virtual void WaitCopy(std::size_t buffer) = 0;
  // Makes work enqueued on `consumer` from now on wait for `buffer`'s last Upload.
  virtual void HandOver(std::size_t buffer, StreamHandle consumer) = 0;
  // Marks the point of `consumer` after which it no longer reads `buffer`.
  virtual void MarkReleased(std::size_t buffer, StreamHandle consumer) = 0;
};

class DeviceFeed;

// One batch in a device buffer. Move-only; releasing it (Release() or the destructor)
// marks the buffer released on the consumer stream it was handed to.
class DeviceBatch {
 public:
  DeviceBatch() = default;
  ~DeviceBatch() { Release(); }
  DeviceBatch(DeviceBatch&& other) noexcept;
  DeviceBatch& operator=(DeviceBatch&& other) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  std::size_t buffer() const { return buffer_; }  // which device buffer holds it
  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t index() const { return index_; }  // batch number within the epoch
  const BatchShape& shape() const { return shape_; }
  void Release() noexcept;

 private:
  friend class DeviceFeed;
  DeviceFeed* feed_ = nullptr;
  std::size_t buffer_ = 0;
  StreamHandle consumer_ = nullptr;
  std::uint64_t epoch_ = 0;
  std::uint64_t index_ = 0;
  BatchShape shape_;
};

class DeviceFeed {
 public:
  // REQUIRES: `device` has `buffers` buffers; stream and device outlive the feed. Throws
  // std::invalid_argument for 0 buffers or 0 max_host_batches.
  DeviceFeed(transport::BatchStream& stream, FeedDevice& device, std::size_t buffers,
             std::size_t max_host_batches);
  // Waits for the copies in flight, then gives their host batches back.
  ~DeviceFeed();
  DeviceFeed(const DeviceFeed&) = delete;
  DeviceFeed& operator=(const DeviceFeed&) = delete;

  // The next batch, landed (or landing) in a device buffer and handed over to `consumer`:
  // work enqueued on `consumer` after this call sees it. nullopt at the end of an epoch
  // (the following call starts the next) or once the stream ended. Throws what the
  // stream's Next() throws, std::invalid_argument for a batch that is not 3-channel NHWC
  // (the device converts from that), what the device threw (also from an earlier
  // release, which cannot throw itself), and std::logic_error when every device buffer is
  // held by a DeviceBatch that is still alive (the consumer keeps `buffers` batches).
  std::optional<DeviceBatch> Next(StreamHandle consumer);

  // Host batches whose copies are still in flight (at most max_host_batches).
  std::size_t copies_in_flight() const { return in_flight_.size(); }

 private:
  friend class DeviceBatch;
  struct InFlight {
    transport::ReceivedBatch host;  // destroying it gives the batch back
    std::size_t buffer = 0;
  };
  void Reap(bool wait_oldest);
  void Released(std::size_t buffer, StreamHandle consumer) noexcept;

  transport::BatchStream& stream_;
  FeedDevice& device_;
  std::size_t max_host_batches_;
  std::vector<bool> held_;          // per buffer: a DeviceBatch is alive
  std::deque<InFlight> in_flight_;  // in upload order, which is copy-completion order
  std::uint64_t uploads_ = 0;
  std::exception_ptr release_error_;  // a failed MarkReleased, rethrown by Next()
};

}  // namespace tilefeed::cuda
