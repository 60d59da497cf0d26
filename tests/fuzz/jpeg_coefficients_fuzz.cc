// libFuzzer target: the coefficient record parser (ReadCoefficientInfo,
// CheckCoefficients) and the coefficient crop decode on arbitrary bytes. Input layout
// (make_seeds writes it for packed files):
//   byte 0      flags: DCT scales, fast IDCT, fast upsampling, flip
//   bytes 1..4  crop x, y, width, height as fractions of the image (and the output size)
//   the rest    the record (PackCoefficients)
// Every outcome but a DecodeError or pixels is a bug: the parser must refuse what does not
// add up, and the decode must never read or write outside its buffers.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/codecs/jpeg_coefficients.h"

namespace {

namespace codecs = tilefeed::codecs;

int Scaled(std::uint8_t byte, int range) { return range * byte / 256; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  const auto record = std::span(reinterpret_cast<const std::byte*>(data + 5), size - 5);
  codecs::JpegOptions options;
  options.max_pixels = 1 << 22;  // keeps each run fast and within the fuzzer's RSS limit
  options.scales = data[0] & 1 ? codecs::DctScales::kEighths : codecs::DctScales::kPowersOfTwo;
  options.fast_dct = (data[0] & 2) != 0;
  options.fast_upsample = (data[0] & 4) != 0;
  codecs::CoefficientDecoder decoder(options);
  try {
    const codecs::ImageInfo info = codecs::ReadCoefficientInfo(record, options.max_pixels);
    if (data[0] & 16) codecs::CheckCoefficients(record, options.max_pixels);
    codecs::CropPlan plan;
    plan.crop.x = Scaled(data[1], info.width);
    plan.crop.y = Scaled(data[2], info.height);
    plan.crop.width = 1 + Scaled(data[3], info.width - plan.crop.x);
    plan.crop.height = 1 + Scaled(data[4], info.height - plan.crop.y);
    plan.flip = (data[0] & 8) != 0;
    const int out_w = 1 + data[3] % 64;
    const int out_h = 1 + data[4] % 64;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * 3);
    decoder.DecodeInto(record, plan, codecs::PixelView::Interleaved(out.data(), out_w, out_h));
  } catch (const codecs::DecodeError&) {
  }
  return 0;
}
