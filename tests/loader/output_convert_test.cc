#include "loader/output_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

namespace tilefeed::loader {
namespace {

TEST(OutputConvert, Float16BitsRoundToNearestEven) {
  EXPECT_EQ(ToFloat16Bits(0.0f), 0x0000);
  EXPECT_EQ(ToFloat16Bits(-0.0f), 0x8000);
  EXPECT_EQ(ToFloat16Bits(1.0f), 0x3c00);
  EXPECT_EQ(ToFloat16Bits(-2.0f), 0xc000);
  EXPECT_EQ(ToFloat16Bits(65504.0f), 0x7bff);               // the largest float16
  EXPECT_EQ(ToFloat16Bits(65520.0f), 0x7c00);               // halfway to 2^16: rounds to infinity
  EXPECT_EQ(ToFloat16Bits(1e9f), 0x7c00);                   // overflow
  EXPECT_EQ(ToFloat16Bits(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(ToFloat16Bits(std::ldexp(1.0f, -25)), 0x0000);  // a tie to even: zero
  EXPECT_EQ(ToFloat16Bits(std::ldexp(3.0f, -25)), 0x0002);  // a tie to even: 2
  EXPECT_EQ(ToFloat16Bits(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to even (1); 1 + 3 x 2^-11 goes up.
  EXPECT_EQ(ToFloat16Bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(ToFloat16Bits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(ToFloat16Bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(ToFloat16Bits(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
}

TEST(OutputConvert, BFloat16BitsRoundToNearestEven) {
  EXPECT_EQ(ToBFloat16Bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even; 1 + 3 x 2^-8 goes up.
  EXPECT_EQ(ToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(ToBFloat16Bits(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_EQ(ToBFloat16Bits(-1.5f), 0xbfc0);
  EXPECT_EQ(ToBFloat16Bits(std::numeric_limits<float>::quiet_NaN()) & 0x7fc0, 0x7fc0);
}

TEST(OutputConvert, Float32IsTheContractOpByOpInEitherLayout) {
  OutputFormat format;
  format.dtype = OutputDType::kFloat32;
  format.mean = kImageNetMean;
  format.std = kImageNetStd;
  const int height = 2, width = 3;
  std::vector<std::uint8_t> in(std::size_t{2} * height * width * 3);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 37 + 11);
  for (Layout layout : {Layout::kNhwc, Layout::kNchw}) {
    format.layout = layout;
    const OutputConverter converter(format);
    std::vector<float> out(in.size());
    converter.Convert(in, 2, height, width, std::as_writable_bytes(std::span(out)));
    for (int n = 0; n < 2; ++n) {
      for (int p = 0; p < height * width; ++p) {
        for (int c = 0; c < 3; ++c) {
          const float x = in[(n * height * width + p) * 3 + c];
          const float expected = (x / 255.0f - format.mean[c]) / format.std[c];
          const std::size_t at = layout == Layout::kNhwc ? (n * height * width + p) * 3 + c
                                                         : (n * 3 + c) * height * width + p;
          EXPECT_EQ(std::bit_cast<std::uint32_t>(out[at]), std::bit_cast<std::uint32_t>(expected))
              << "n=" << n << " p=" << p << " c=" << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tilefeed::loader
