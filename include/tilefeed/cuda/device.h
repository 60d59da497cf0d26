#pragma once

// The CUDA pieces of tilefeed::cuda (target tilefeed_cuda, built only where CMake finds
// CUDA): the conversion kernel, pinned slot memory for the loader, and CudaDevice, the
// FeedDevice that DeviceFeed (feed.h) drives on a real GPU. Uses the CUDA runtime of the
// current device; CUDA headers stay out of this header.
//
// Errors: a failed CUDA call throws CudaError naming the call and CUDA's message.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "tilefeed/cuda/convert.h"
#include "tilefeed/cuda/feed.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/output_format.h"

namespace tilefeed::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether a CUDA device is usable here; if not, `why` (when given) says what CUDA said.
bool DeviceAvailable(std::string* why = nullptr);

// Enqueues on `stream` the conversion of `src` (device memory, shape.elements() bytes,
// uint8 NHWC) into `dst` (device memory, ConvertedBytes(shape, format) bytes). Returns at
// once. REQUIRES: CheckFormat(format); src and dst do not overlap; both stay valid until
// the kernel has run.
void ConvertOnDevice(const std::uint8_t* src, void* dst, const BatchShape& shape,
                     const loader::OutputFormat& format, StreamHandle stream);

// Loader slots in page-locked host memory (cudaHostAlloc), so that their copies to the
// device run asynchronously at full bandwidth. Give it to LoaderOptions::slot_memory.
class PinnedSlotMemory : public loader::SlotMemory {
 public:
  PinnedSlotMemory() = default;
  ~PinnedSlotMemory() override;
  PinnedSlotMemory(const PinnedSlotMemory&) = delete;
  PinnedSlotMemory& operator=(const PinnedSlotMemory&) = delete;
  Spans Slot(std::size_t slot, std::size_t slots, std::size_t samples,
             std::size_t image_bytes) override;

 private:
  std::vector<void*> blocks_;
};

// FeedDevice on the current CUDA device: `buffers` device buffers, each holding one batch
// of up to shape.elements() image bytes as uint8 (copy target) and in `format` (the output:
// any batch no larger, e.g. the smaller epochs of an image-size schedule), and
// int32 labels; a dedicated non-blocking copy stream; per buffer an event for "copy done"
// (host slot may go back), one for "converted" (consumer may read) and one for
// "released" (the consumer's stream no longer reads the buffer).
// Thread safety: one consumer thread (DeviceFeed's).
class CudaDevice : public FeedDevice {
 public:
  CudaDevice(std::size_t buffers, const BatchShape& shape, const loader::OutputFormat& format);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  void Upload(std::size_t buffer, const HostBatch& batch) override;
  bool CopyDone(std::size_t buffer) override;
  void WaitCopy(std::size_t buffer) override;
  void HandOver(std::size_t buffer, StreamHandle consumer) override;
  void MarkReleased(std::size_t buffer, StreamHandle consumer) override;

  // Device memory of buffer `buffer`: the converted images and the labels. Valid while
  // this object lives; readable on a consumer stream after HandOver().
  const void* images(std::size_t buffer) const;
  const std::int32_t* labels(std::size_t buffer) const;
  StreamHandle copy_stream() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilefeed::cuda
