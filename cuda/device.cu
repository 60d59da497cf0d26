// The CUDA side of tilefeed::cuda: one translation unit, so that the CUDA runtime's
// headers stay here.
//
// The kernel computes output_format.h's formula with explicitly rounded intrinsics
// (__fdiv_rn, __fsub_rn): no division is turned into a multiplication by a reciprocal
// and nothing is contracted, whatever the compiler flags (--use_fast_math included), so
// the device's bits equal ConvertOnHost's.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "tilefeed/cuda/device.h"

namespace tilefeed::cuda {
namespace {

void Check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("CUDA: ") + call + ": " + cudaGetErrorString(status));
  }
}

struct Normalisation {
  float mean[3];
  float std[3];
};

template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// One thread per pixel (3 bytes in, 3 elements out), grid-stride. For NCHW the writes of a
// warp are 32 consecutive elements of each plane; the reads are 96 consecutive bytes.
template <typename T, bool kNchw>
__global__ void ConvertKernel(const std::uint8_t* __restrict__ src, T* __restrict__ dst,
                              std::size_t pixels, std::size_t plane, Normalisation norm) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t p = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pixels;
       p += stride) {
    const std::size_t image = p / plane;
    const std::size_t offset = p - image * plane;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const std::uint8_t x = src[p * 3 + c];
      const std::size_t at = kNchw ? (image * 3 + c) * plane + offset : p * 3 + c;
      if constexpr (std::is_same_v<T, std::uint8_t>) {
        dst[at] = x;  // no conversion: a layout change at most
      } else {
        const float scaled = __fdiv_rn(static_cast<float>(x), 255.0f);
        dst[at] = FromFloat<T>(__fdiv_rn(__fsub_rn(scaled, norm.mean[c]), norm.std[c]));
      }
    }
  }
}

template <typename T>
void Launch(const std::uint8_t* src, void* dst, const BatchShape& shape, bool nchw,
            const Normalisation& norm, cudaStream_t stream) {
  const std::size_t plane = static_cast<std::size_t>(shape.height) * shape.width;
  const std::size_t pixels = shape.samples * plane;
  if (pixels == 0) return;
  constexpr int kThreads = 256;
  const std::size_t wanted = (pixels + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
  if (nchw) {
    ConvertKernel<T, true>
        <<<blocks, kThreads, 0, stream>>>(src, static_cast<T*>(dst), pixels, plane, norm);
  } else {
    ConvertKernel<T, false>
        <<<blocks, kThreads, 0, stream>>>(src, static_cast<T*>(dst), pixels, plane, norm);
  }
  Check(cudaGetLastError(), "ConvertKernel launch");
}

}  // namespace

bool DeviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why != nullptr) {
      *why = status != cudaSuccess ? std::string(cudaGetErrorString(status))
                                   : std::string("no CUDA device");
    }
    return false;
  }
  return true;
}

void ConvertOnDevice(const std::uint8_t* src, void* dst, const BatchShape& shape,
                     const loader::OutputFormat& format, StreamHandle stream) {
  Normalisation norm{};
  for (int c = 0; c < 3; ++c) {
    norm.mean[c] = format.mean[c];
    norm.std[c] = format.std[c];
  }
  const bool nchw = format.layout == loader::Layout::kNchw;
  switch (format.dtype) {
    case loader::OutputDType::kFloat32:
      return Launch<float>(src, dst, shape, nchw, norm, stream);
    case loader::OutputDType::kFloat16:
      return Launch<__half>(src, dst, shape, nchw, norm, stream);
    case loader::OutputDType::kBFloat16:
      return Launch<__nv_bfloat16>(src, dst, shape, nchw, norm, stream);
    case loader::OutputDType::kUint8:
      return Launch<std::uint8_t>(src, dst, shape, nchw, norm, stream);
  }
}

PinnedSlotMemory::~PinnedSlotMemory() {
  for (void* block : blocks_) cudaFreeHost(block);
}

loader::SlotMemory::Spans PinnedSlotMemory::Slot(std::size_t /*slot*/, std::size_t /*slots*/,
                                                 std::size_t samples, std::size_t image_bytes) {
  // One page-locked block per slot: images, then labels and indices 64-byte aligned.
  const std::size_t images = (samples * image_bytes + 63) / 64 * 64;
  const std::size_t labels = (samples * sizeof(std::int32_t) + 63) / 64 * 64;
  const std::size_t total = images + labels + samples * sizeof(std::uint64_t);
  void* block = nullptr;
  Check(cudaHostAlloc(&block, total, cudaHostAllocPortable), "cudaHostAlloc");
  blocks_.push_back(block);
  auto* bytes = static_cast<std::uint8_t*>(block);
  return Spans{{bytes, samples * image_bytes},
               {reinterpret_cast<std::int32_t*>(bytes + images), samples},
               {reinterpret_cast<std::uint64_t*>(bytes + images + labels), samples}};
}

struct CudaDevice::Impl {
  BatchShape shape;
  loader::OutputFormat format;
  cudaStream_t stream = nullptr;
  struct Buffer {
    std::uint8_t* raw = nullptr;  // the copy's target, uint8 NHWC
    void* images = nullptr;       // converted
    std::int32_t* labels = nullptr;
    cudaEvent_t copied = nullptr;     // host memory no longer read
    cudaEvent_t converted = nullptr;  // the consumer may read
    cudaEvent_t released = nullptr;   // the consumer no longer reads
    bool release_pending = false;
  };
  std::vector<Buffer> buffers;
};

CudaDevice::CudaDevice(std::size_t buffers, const BatchShape& shape,
                       const loader::OutputFormat& format)
    : impl_(std::make_unique<Impl>()) {
  CheckFormat(format);
  impl_->shape = shape;
  impl_->format = format;
  Check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  impl_->buffers.resize(buffers);
  for (Impl::Buffer& b : impl_->buffers) {
    Check(cudaMalloc(reinterpret_cast<void**>(&b.raw), shape.elements()), "cudaMalloc");
    Check(cudaMalloc(&b.images, ConvertedBytes(shape, format)), "cudaMalloc");
    Check(cudaMalloc(reinterpret_cast<void**>(&b.labels), shape.samples * sizeof(std::int32_t)),
          "cudaMalloc");
    for (cudaEvent_t* e : {&b.copied, &b.converted, &b.released}) {
      Check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
    }
  }
}

CudaDevice::~CudaDevice() {
  cudaStreamSynchronize(impl_->stream);
  for (Impl::Buffer& b : impl_->buffers) {
    for (cudaEvent_t e : {b.copied, b.converted, b.released}) cudaEventDestroy(e);
    cudaFree(b.raw);
    cudaFree(b.images);
    cudaFree(b.labels);
  }
  cudaStreamDestroy(impl_->stream);
}

void CudaDevice::Upload(std::size_t buffer, const HostBatch& batch) {
  Impl::Buffer& b = impl_->buffers.at(buffer);
  // Smaller images than the buffers were made for are fine: an image-size schedule's
  // epochs before its largest size.
  if (batch.shape.elements() > impl_->shape.elements()) {
    throw std::invalid_argument("CudaDevice: a batch larger than the buffers it was made for");
  }
  cudaStream_t s = impl_->stream;
  if (b.release_pending) Check(cudaStreamWaitEvent(s, b.released, 0), "cudaStreamWaitEvent");
  b.release_pending = false;
  Check(cudaMemcpyAsync(b.raw, batch.images.data(), batch.images.size_bytes(),
                        cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync (images)");
  Check(cudaMemcpyAsync(b.labels, batch.labels.data(), batch.labels.size_bytes(),
                        cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync (labels)");
  Check(cudaEventRecord(b.copied, s), "cudaEventRecord");
  ConvertOnDevice(b.raw, b.images, batch.shape, impl_->format, s);
  Check(cudaEventRecord(b.converted, s), "cudaEventRecord");
}

bool CudaDevice::CopyDone(std::size_t buffer) {
  const cudaError_t status = cudaEventQuery(impl_->buffers.at(buffer).copied);
  if (status == cudaErrorNotReady) return false;
  Check(status, "cudaEventQuery");
  return true;
}

void CudaDevice::WaitCopy(std::size_t buffer) {
  Check(cudaEventSynchronize(impl_->buffers.at(buffer).copied), "cudaEventSynchronize");
}

void CudaDevice::HandOver(std::size_t buffer, StreamHandle consumer) {
  Check(cudaStreamWaitEvent(consumer, impl_->buffers.at(buffer).converted, 0),
        "cudaStreamWaitEvent");
}

void CudaDevice::MarkReleased(std::size_t buffer, StreamHandle consumer) {
  Impl::Buffer& b = impl_->buffers.at(buffer);
  Check(cudaEventRecord(b.released, consumer), "cudaEventRecord");
  b.release_pending = true;
}

const void* CudaDevice::images(std::size_t buffer) const {
  return impl_->buffers.at(buffer).images;
}
const std::int32_t* CudaDevice::labels(std::size_t buffer) const {
  return impl_->buffers.at(buffer).labels;
}
StreamHandle CudaDevice::copy_stream() const { return impl_->stream; }

}  // namespace tilefeed::cuda
