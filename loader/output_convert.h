#pragma once

// The host conversion of uint8 NHWC images into an OutputFormat (output_format.h): the
// loader's workers run it on each chunk of rows they decoded, into the slot, so a batch
// arrives already in the element type, layout and normalisation the consumer asked for.
//
// Exactly output_format.h's contract, bit for bit: a uint8 value has 256 possible results
// per channel, so the constructor evaluates the contract's float32 formula once for each
// (channel, value) and Convert() is a table lookup per element (no floating point, no
// dependence on the compiler's vectorisation or contraction of the formula).
//
// Thread safety: a constructed converter is immutable; Convert() may run on any number of
// threads at once (each on its own output).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tilefeed/loader/output_format.h"

namespace tilefeed::loader {

// float32 -> float16 bits (IEEE binary16), rounded to nearest-even; overflow gives infinity.
std::uint16_t ToFloat16Bits(float value);
// float32 -> bfloat16 bits, rounded to nearest-even (NaN stays NaN).
std::uint16_t ToBFloat16Bits(float value);

class OutputConverter {
 public:
  // REQUIRES: `format` passes loader::OptionsProblem (finite mean, finite std > 0).
  explicit OutputConverter(const OutputFormat& format);

  const OutputFormat& format() const { return format_; }

  // Bytes of one converted image of height x width (3 channels).
  std::size_t ImageBytes(int height, int width) const;

  // Converts `count` images of height x width, uint8 NHWC at `in`, into `out` (ImageBytes()
  // each, consecutive). REQUIRES: in.size() >= count x height x width x 3 and out.size() >=
  // count x ImageBytes(height, width).
  void Convert(std::span<const std::uint8_t> in, std::size_t count, int height, int width,
               std::span<std::byte> out) const;

 private:
  template <typename T>
  void ConvertAs(const std::uint8_t* in, std::size_t count, std::size_t pixels, T* out) const;

  OutputFormat format_;
  // The contract's result for (channel, value), as the bits of format_.dtype.
  std::array<std::array<std::uint32_t, 256>, 3> table_{};
};

}  // namespace tilefeed::loader
