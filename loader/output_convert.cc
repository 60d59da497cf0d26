#include "loader/output_convert.h"

#include <bit>
#include <cassert>
#include <cmath>

namespace tilefeed::loader {

std::uint16_t ToFloat16Bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  }
  const int exponent = static_cast<int>(magnitude >> 23) - 127 + 15;
  if (exponent >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;           // with the implicit 1
  int shift = 13;                                                         // 24 bits -> 11
  std::uint32_t base = static_cast<std::uint32_t>(exponent) << 10;
  if (exponent <= 0) {  // a float16 subnormal (or zero): shift out the exponent's deficit
    if (exponent < -10) return static_cast<std::uint16_t>(sign);
    shift += 1 - exponent;
    base = 0;
  } else {
    mantissa &= 0x7fffffu;  // normal: the implicit 1 is the exponent field's
  }
  const std::uint32_t kept = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  std::uint32_t result = base + kept;  // a mantissa carry rolls into the exponent, as it must
  if (rest > half || (rest == half && (kept & 1u) != 0)) ++result;
  return static_cast<std::uint16_t>(sign | result);
}

std::uint16_t ToBFloat16Bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

OutputConverter::OutputConverter(const OutputFormat& format) : format_(format) {
  for (int c = 0; c < 3; ++c) {
    assert(std::isfinite(format.mean[c]) && std::isfinite(format.std[c]) && format.std[c] > 0);
    for (int x = 0; x < 256; ++x) {
      // The contract: float32, each operation rounded to nearest (no contraction: a
      // division and a subtraction).
      volatile float scaled = static_cast<float>(x) / 255.0f;
      volatile float centred = scaled - format.mean[c];
      const float v = centred / format.std[c];
      std::uint32_t bits = 0;
      switch (format.dtype) {
        case OutputDType::kUint8:
          bits = static_cast<std::uint32_t>(x);
          break;
        case OutputDType::kFloat16:
          bits = ToFloat16Bits(v);
          break;
        case OutputDType::kBFloat16:
          bits = ToBFloat16Bits(v);
          break;
        case OutputDType::kFloat32:
          bits = std::bit_cast<std::uint32_t>(v);
          break;
      }
      table_[c][x] = bits;
    }
  }
}

std::size_t OutputConverter::ImageBytes(int height, int width) const {
  return static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * 3 *
         ElementSize(format_.dtype);
}

template <typename T>
void OutputConverter::ConvertAs(const std::uint8_t* in, std::size_t count, std::size_t pixels,
                                T* out) const {
  std::array<std::array<T, 256>, 3> table;  // narrowed once per call: a 1.5 KiB L1-resident copy
  for (int c = 0; c < 3; ++c) {
    for (int x = 0; x < 256; ++x) table[c][x] = static_cast<T>(table_[c][x]);
  }
  for (std::size_t n = 0; n < count; ++n, in += pixels * 3, out += pixels * 3) {
    if (format_.layout == Layout::kNhwc) {
      for (std::size_t p = 0; p < pixels; ++p) {
        out[3 * p] = table[0][in[3 * p]];
        out[3 * p + 1] = table[1][in[3 * p + 1]];
        out[3 * p + 2] = table[2][in[3 * p + 2]];
      }
    } else {
      T* r = out;
      T* g = out + pixels;
      T* b = out + 2 * pixels;
      for (std::size_t p = 0; p < pixels; ++p) {
        r[p] = table[0][in[3 * p]];
        g[p] = table[1][in[3 * p + 1]];
        b[p] = table[2][in[3 * p + 2]];
      }
    }
  }
}

void OutputConverter::Convert(std::span<const std::uint8_t> in, std::size_t count, int height,
                              int width, std::span<std::byte> out) const {
  const std::size_t pixels = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  assert(in.size() >= count * pixels * 3);
  assert(out.size() >= count * ImageBytes(height, width));
  (void)in.size();
  switch (ElementSize(format_.dtype)) {
    case 1:
      ConvertAs(in.data(), count, pixels, reinterpret_cast<std::uint8_t*>(out.data()));
      break;
    case 2:
      ConvertAs(in.data(), count, pixels, reinterpret_cast<std::uint16_t*>(out.data()));
      break;
    default:
      ConvertAs(in.data(), count, pixels, reinterpret_cast<std::uint32_t*>(out.data()));
      break;
  }
}

}  // namespace tilefeed::loader
