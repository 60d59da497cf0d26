// tilefeed::cuda on a GPU: the kernel against the one host implementation of the contract
// (loader::OutputConverter, which the loader's workers and ConvertOnHost run), bit for bit, and
// DeviceFeed + CudaDevice end to end. Every test is skipped, with CUDA's reason, where no
// CUDA device is usable (the CI machines), so this binary passes there too.

#include "tilefeed/cuda/device.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loader/output_convert.h"
#include "tests/cuda/raw_source.h"
#include "tilefeed/cuda/convert.h"
#include "tilefeed/cuda/feed.h"

namespace tilefeed::cuda {
namespace {

#define TILEFEED_SKIP_WITHOUT_GPU()                                        \
  do {                                                                     \
    std::string why;                                                       \
    if (!DeviceAvailable(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (false)

template <typename T>
struct DeviceMemory {
  explicit DeviceMemory(std::size_t bytes) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), bytes), cudaSuccess);
  }
  ~DeviceMemory() { cudaFree(ptr); }
  T* ptr = nullptr;
};

std::vector<loader::OutputFormat> Formats() {
  std::vector<loader::OutputFormat> formats;
  for (auto dtype : {loader::OutputDType::kFloat32, loader::OutputDType::kFloat16,
                     loader::OutputDType::kBFloat16, loader::OutputDType::kUint8}) {
    for (auto layout : {loader::Layout::kNhwc, loader::Layout::kNchw}) {
      loader::OutputFormat f;
      f.dtype = dtype;
      f.layout = layout;
      if (dtype != loader::OutputDType::kUint8) {
        f.mean = loader::kImageNetMean;
        f.std = loader::kImageNetStd;
      }
      formats.push_back(f);
    }
  }
  // Far from ImageNet's: large values, float16's overflow to infinity, a negative mean.
  loader::OutputFormat wide;
  wide.dtype = loader::OutputDType::kFloat16;
  wide.mean = {0.5f, -0.25f, 1.0f};
  wide.std = {1e-5f, 3e-3f, 0.7f};
  formats.push_back(wide);
  wide.dtype = loader::OutputDType::kBFloat16;
  formats.push_back(wide);
  wide.dtype = loader::OutputDType::kFloat32;
  formats.push_back(wide);
  return formats;
}

TEST(CudaConvert, EqualsTheHostReferenceBitForBit) {
  TILEFEED_SKIP_WITHOUT_GPU();
  const BatchShape shape{5, 17, 23};  // odd sizes: partial blocks and planes
  std::vector<std::uint8_t> src(shape.elements());
  std::mt19937 random(3);
  for (auto& x : src) x = static_cast<std::uint8_t>(random());
  for (std::size_t v = 0; v < 256; ++v) src[v] = static_cast<std::uint8_t>(v);
  DeviceMemory<std::uint8_t> device_src(src.size());
  ASSERT_EQ(cudaMemcpy(device_src.ptr, src.data(), src.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  for (const loader::OutputFormat& format : Formats()) {
    const std::size_t bytes = ConvertedBytes(shape, format);
    std::vector<std::byte> want(bytes), got(bytes, std::byte{0xA5});
    loader::OutputConverter(format).Convert(src, shape.samples, shape.height, shape.width, want);
    DeviceMemory<std::byte> device_dst(bytes);
    ASSERT_EQ(cudaMemset(device_dst.ptr, 0xA5, bytes), cudaSuccess);  // poison
    ConvertOnDevice(device_src.ptr, device_dst.ptr, shape, format, nullptr);
    ASSERT_EQ(cudaMemcpy(got.data(), device_dst.ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
        << "dtype " << static_cast<int>(format.dtype) << " layout "
        << static_cast<int>(format.layout) << " std[0] " << format.std[0];
  }
}

TEST(CudaFeed, LandsEveryBatchConvertedOnTheConsumersStream) {
  TILEFEED_SKIP_WITHOUT_GPU();
  constexpr int kSide = 24;
  loader::OutputFormat format;
  format.dtype = loader::OutputDType::kBFloat16;
  format.layout = loader::Layout::kNchw;
  format.mean = loader::kImageNetMean;
  format.std = loader::kImageNetStd;
  loader::LoaderOptions options = testing::RawOptions(8, kSide, 2);
  loader::Loader reference(std::make_unique<testing::RawSource>(50, kSide), options);
  options.slot_memory = std::make_shared<PinnedSlotMemory>();
  loader::Loader loader(std::make_unique<testing::RawSource>(50, kSide), options);
  CudaDevice device(2, BatchShape{8, kSide, kSide}, format);
  transport::LoaderStream stream(loader);
  DeviceFeed feed(stream, device, 2, options.prefetch_depth - 1);
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  std::size_t batches = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (;;) {
      std::optional<loader::Batch> want = reference.Next();
      std::optional<DeviceBatch> got = feed.Next(consumer);
      ASSERT_EQ(want.has_value(), got.has_value());
      if (!want) break;
      ASSERT_EQ(got->shape().samples, want->size());
      const std::size_t bytes = ConvertedBytes(got->shape(), format);
      std::vector<std::byte> expected(bytes), landed(bytes);
      ConvertOnHost(want->images(), got->shape(), format, expected);
      std::vector<std::int32_t> labels(want->size());
      ASSERT_EQ(cudaMemcpyAsync(landed.data(), device.images(got->buffer()), bytes,
                                cudaMemcpyDeviceToHost, consumer),
                cudaSuccess);
      ASSERT_EQ(
          cudaMemcpyAsync(labels.data(), device.labels(got->buffer()),
                          labels.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, consumer),
          cudaSuccess);
      got->Release();  // after the reads above, on the same stream
      ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
      EXPECT_EQ(std::memcmp(landed.data(), expected.data(), bytes), 0) << "batch " << batches;
      EXPECT_TRUE(std::equal(labels.begin(), labels.end(), want->labels().begin()));
      ++batches;
    }
  }
  EXPECT_EQ(batches, 2 * loader.batches_per_epoch());
  cudaStreamDestroy(consumer);
}

}  // namespace
}  // namespace tilefeed::cuda
