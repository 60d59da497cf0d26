#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tilefeed/cuda/convert.h"

namespace tilefeed::cuda {

std::size_t ConvertedBytes(const BatchShape& shape, const loader::OutputFormat& format) {
  return shape.elements() * loader::ElementSize(format.dtype);
}

void CheckFormat(const loader::OutputFormat& format) {
  for (int c = 0; c < 3; ++c) {
    const float mean = format.mean[c];
    const float std = format.std[c];
    if (!std::isfinite(mean)) {
      throw std::invalid_argument("output format: mean[" + std::to_string(c) + "] is not finite");
    }
    if (!std::isfinite(std) || !(std > 0.0f)) {
      throw std::invalid_argument("output format: std[" + std::to_string(c) +
                                  "] = " + std::to_string(std) + " must be finite and > 0");
    }
    if (format.dtype == loader::OutputDType::kUint8 && (mean != 0.0f || std != 1.0f)) {
      throw std::invalid_argument(
          "output format: dtype uint8 takes no normalisation (mean 0, std 1); pick float16, "
          "bfloat16 or float32 to normalise");
    }
  }
}

std::uint16_t ToBFloat16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

std::uint16_t ToFloat16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity (>= 65520)
  if (magnitude < 0x38800000u) {                        // below 2^-14: subnormal or zero
    if (magnitude < 0x33000000u) return sign;           // below half of 2^-24: zero
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(magnitude >> 23);  // 14..24
    const std::uint32_t half = 1u << (shift - 1);
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    if (rest > half || (rest == half && (result & 1u))) ++result;
    return sign | static_cast<std::uint16_t>(result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t result = magnitude - 0x38000000u;
  result += 0xfffu + ((result >> 13) & 1u);
  return sign | static_cast<std::uint16_t>(result >> 13);
}

namespace {

// The contract's formula; volatile-free: every operation is a separate float32 op, and
// the compiler may not fuse a division and a subtraction.
float Normalise(std::uint8_t x, float mean, float std) {
  const float scaled = static_cast<float>(x) / 255.0f;
  const float centred = scaled - mean;
  return centred / std;
}

void Store(const loader::OutputFormat& format, std::byte* dst, std::size_t at, float v) {
  switch (format.dtype) {
    case loader::OutputDType::kFloat16: {
      const std::uint16_t h = ToFloat16(v);
      std::memcpy(dst + at * 2, &h, 2);
      return;
    }
    case loader::OutputDType::kBFloat16: {
      const std::uint16_t h = ToBFloat16(v);
      std::memcpy(dst + at * 2, &h, 2);
      return;
    }
    case loader::OutputDType::kFloat32:
      std::memcpy(dst + at * 4, &v, 4);
      return;
    case loader::OutputDType::kUint8:
      dst[at] = static_cast<std::byte>(static_cast<std::uint8_t>(v));
      return;
  }
}

}  // namespace

void ConvertOnHost(std::span<const std::uint8_t> src, const BatchShape& shape,
                   const loader::OutputFormat& format, std::span<std::byte> dst) {
  const std::size_t plane = static_cast<std::size_t>(shape.height) * shape.width;
  const bool nchw = format.layout == loader::OutputLayout::kNCHW;
  for (std::size_t i = 0; i < shape.elements(); ++i) {
    const std::size_t c = i % 3;
    const std::size_t pixel = i / 3;  // n * plane + y * width + x
    const std::size_t at = nchw ? ((pixel / plane) * 3 + c) * plane + pixel % plane : i;
    if (format.dtype == loader::OutputDType::kUint8) {
      dst[at] = static_cast<std::byte>(src[i]);
    } else {
      Store(format, dst.data(), at, Normalise(src[i], format.mean[c], format.std[c]));
    }
  }
}

}  // namespace tilefeed::cuda
