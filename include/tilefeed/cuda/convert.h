#pragma once

// The conversion of a batch of uint8 NHWC images (the loader's output) into a consumer's
// OutputFormat (tilefeed/loader/output_format.h): element type, per-channel mean/std and
// layout. Two implementations of the one contract, which agree bit for bit:
//   ConvertOnHost   the loader's host conversion (loader::OutputConverter,
//                   loader/output_convert.h), the one host implementation: the
//                   reference for the kernel's tests, and for hosts without a GPU;
//   ConvertOnDevice a CUDA kernel, in tilefeed::cuda (built only where CMake finds CUDA).
// Each computes, in float32 with every operation rounded to nearest and nothing fused,
//   v = (x / 255.0f - mean[c]) / std[c]
// and rounds v to nearest-even into the dtype. Thread safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <span>

#include "tilefeed/loader/output_format.h"

// cudaStream_t is `CUstream_st*`; declared here so this header needs no CUDA header.
struct CUstream_st;

namespace tilefeed::cuda {

// A CUDA stream handle (cudaStream_t). nullptr is the legacy default stream.
using StreamHandle = CUstream_st*;

// The shape of one batch of images.
struct BatchShape {
  std::size_t samples = 0;  // images
  int height = 0;
  int width = 0;  // channels: always 3
  std::size_t elements() const {
    return samples * static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * 3;
  }
};

// Bytes of a converted batch of `shape` in `format`.
std::size_t ConvertedBytes(const BatchShape& shape, const loader::OutputFormat& format);

// Throws std::invalid_argument naming what is wrong with `format`: a std that is not > 0 and
// finite, a mean that is not finite, or kUint8 with a mean other than 0 or std other than 1
// (loader::OptionsProblem's check and message).
void CheckFormat(const loader::OutputFormat& format);

// Converts `src` (shape.elements() bytes, NHWC) into `dst` (ConvertedBytes() bytes, laid
// out and typed per `format`). REQUIRES: the spans have those sizes; CheckFormat(format).
void ConvertOnHost(std::span<const std::uint8_t> src, const BatchShape& shape,
                   const loader::OutputFormat& format, std::span<std::byte> dst);

}  // namespace tilefeed::cuda
