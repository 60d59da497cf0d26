// Uses the installed tilefeed::cuda_feed without a GPU: the host conversion of a 1x1x2
// image into float32 NCHW, checked against the contract's formula.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "tilefeed/cuda/convert.h"
#include "tilefeed/cuda/feed.h"

int main() {
  tilefeed::loader::OutputFormat format;
  format.dtype = tilefeed::loader::OutputDType::kFloat32;
  format.layout = tilefeed::loader::Layout::kNchw;
  format.mean = {0.5f, 0.5f, 0.5f};
  format.std = {0.25f, 0.25f, 0.25f};
  tilefeed::cuda::CheckFormat(format);
  const tilefeed::cuda::BatchShape shape{1, 1, 2};
  const std::array<std::uint8_t, 6> pixels{0, 255, 51, 255, 0, 102};  // NHWC
  std::array<std::byte, 6 * sizeof(float)> out{};
  tilefeed::cuda::ConvertOnHost(pixels, shape, format, out);
  std::array<float, 6> got{};
  std::memcpy(got.data(), out.data(), out.size());
  const std::array<float, 6> want{-2.0f,
                                  2.0f,
                                  2.0f,
                                  -2.0f,
                                  (51 / 255.0f - 0.5f) / 0.25f,
                                  (102 / 255.0f - 0.5f) / 0.25f};  // NCHW: channel planes
  if (got != want) {
    std::fprintf(stderr, "cuda_feed_consumer: ConvertOnHost gave a wrong result\n");
    return 1;
  }
  std::printf("cuda_feed_consumer: ConvertOnHost float32 NCHW ok\n");
  return 0;
}
