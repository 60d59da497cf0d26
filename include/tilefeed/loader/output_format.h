#pragma once

// What a consumer wants a batch's pixels to look like: element type, layout and per-channel
// normalisation: what Batch::output() (or a DeviceBatch) holds. A conversion stage (on the
// host, in C++, into the slot; or on a GPU by the cuda component) turns the workers' uint8
// NHWC into it; for dtype kUint8 the workers decode straight into `layout`.
//
// The contract, identical on every path so that host and device agree bit for bit:
//   for a uint8 pixel value x of channel c, in float32, each operation rounded to nearest:
//     v = (x / 255.0f - mean[c]) / std[c]
//   then v is rounded to nearest-even into `dtype` (float16, bfloat16 or float32).
// mean and std are in torchvision's units (images scaled to [0, 1]), as in
// torchvision.transforms.Normalize: ImageNet's are kImageNetMean / kImageNetStd.
// dtype kUint8 means no conversion: mean must be 0 and std 1 (loader::OptionsProblem checks).
//
// Plain value type; no thread-safety concerns.

#include <array>
#include <cstddef>

namespace tilefeed::loader {

enum class OutputDType { kUint8, kFloat16, kBFloat16, kFloat32 };

enum class Layout {
  kNhwc,  // channels last: what the JPEG decoders write
  kNchw,  // channels first: what torchvision models take
};

inline constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

struct OutputFormat {
  // Element type of the converted batch.
  OutputDType dtype = OutputDType::kUint8;
  // Memory layout of the batch.
  Layout layout = Layout::kNhwc;
  // Per-channel mean, in [0, 1] units (subtracted after dividing by 255).
  std::array<float, 3> mean = {0.0f, 0.0f, 0.0f};
  // Per-channel standard deviation, in [0, 1] units; every entry > 0.
  std::array<float, 3> std = {1.0f, 1.0f, 1.0f};
};

// Bytes per element of `dtype`.
constexpr std::size_t ElementSize(OutputDType dtype) {
  switch (dtype) {
    case OutputDType::kUint8:
      return 1;
    case OutputDType::kFloat16:
    case OutputDType::kBFloat16:
      return 2;
    case OutputDType::kFloat32:
      return 4;
  }
  return 0;
}

}  // namespace tilefeed::loader
