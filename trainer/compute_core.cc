#include "trainer/compute_core.h"

#include <cassert>

namespace tilefeed::trainer {

void NormalizeInto(const InputView& input, const Normalization& normalization,
                   std::span<float> out) {
  const std::size_t plane = static_cast<std::size_t>(input.height) * input.width;
  assert(out.size() == input.size * 3 * plane);
  // Multiplying by 1/std keeps the inner loop free of divisions.
  std::array<float, 3> scale{};
  for (int c = 0; c < 3; ++c) scale[c] = 1.0f / normalization.std[c];
  for (std::size_t n = 0; n < input.size; ++n) {
    const std::uint8_t* src = input.images.data() + n * 3 * plane;
    float* dst = out.data() + n * 3 * plane;
    if (input.layout == loader::Layout::kNchw) {
      for (int c = 0; c < 3; ++c) {
        const float mean = normalization.mean[c];
        const float s = scale[c];
        for (std::size_t i = 0; i < plane; ++i)
          dst[c * plane + i] = (static_cast<float>(src[c * plane + i]) - mean) * s;
      }
    } else {
      // One channel at a time: contiguous stores, and a stride-3 load GCC vectorizes.
      for (int c = 0; c < 3; ++c) {
        const float mean = normalization.mean[c];
        const float s = scale[c];
        float* out_c = dst + c * plane;
        const std::uint8_t* in_c = src + c;
        for (std::size_t i = 0; i < plane; ++i)
          out_c[i] = (static_cast<float>(in_c[3 * i]) - mean) * s;
      }
    }
  }
}

}  // namespace tilefeed::trainer
