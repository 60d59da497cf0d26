// libFuzzer target: coefficient records (column groups, nonzero masks, value streams;
// stored or Huffman groups) through every reader: ReadCoefficientInfo, CheckCoefficients,
// UnpackCoefficients and the decode of two crops (the second reusing the decoder, from the
// unpacked blocks or the record). Input layout (make_seeds writes it for packed files of
// both codings):
//   byte 0      flags: DCT scales, fast IDCT, fast upsampling, flip, unpacked decode
//   bytes 1..8  two crops' x, y, width, height as fractions of the image
//   the rest    the record (PackCoefficients)
// Every outcome but a DecodeError or pixels is a bug: the group table, the Huffman tables
// and bit streams, and the streams they hold must be refused when they do not add up (and
// a retired layout by name), and the unpacking must never read or write outside its
// buffers.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codecs/jpeg_coefficients.h"
#include "tilefeed/codecs/jpeg.h"

namespace {

namespace codecs = tilefeed::codecs;

int Scaled(std::uint8_t byte, int range) { return range * byte / 256; }

codecs::CropPlan PlanFor(const std::uint8_t* b, const codecs::ImageInfo& info, bool flip) {
  codecs::CropPlan plan;
  plan.crop.x = Scaled(b[0], info.width);
  plan.crop.y = Scaled(b[1], info.height);
  plan.crop.width = 1 + Scaled(b[2], info.width - plan.crop.x);
  plan.crop.height = 1 + Scaled(b[3], info.height - plan.crop.y);
  plan.flip = flip;
  return plan;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 9) return 0;
  const auto record = std::span(reinterpret_cast<const std::byte*>(data + 9), size - 9);
  codecs::JpegOptions options;
  options.max_pixels = 1 << 20;  // keeps each run fast and within the fuzzer's RSS limit
  options.decode_scaling =
      data[0] & 1 ? codecs::DecodeScaling::kFast : codecs::DecodeScaling::kExact;
  options.fast_dct = (data[0] & 2) != 0;
  options.fast_upsample = (data[0] & 4) != 0;
  codecs::CoefficientDecoder decoder(options);
  try {
    const codecs::ImageInfo info = codecs::ReadCoefficientInfo(record, options.max_pixels);
    codecs::CheckCoefficients(record, options.max_pixels);
    const bool unpacked = (data[0] & 16) != 0;
    codecs::UnpackedCoefficients blocks;
    if (unpacked) blocks = codecs::UnpackCoefficients(record, options.max_pixels);
    for (int i = 0; i < 2; ++i) {
      const codecs::CropPlan plan =
          PlanFor(data + 1 + 4 * std::ptrdiff_t{i}, info, (data[0] & 8) != 0);
      const int out_w = 1 + data[3 + 4 * i] % 48;
      const int out_h = 1 + data[4 + 4 * i] % 48;
      std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * 3);
      const auto view = codecs::PixelView::Interleaved(out.data(), out_w, out_h);
      if (unpacked) {
        decoder.DecodeUnpackedInto(blocks, plan, view);
      } else {
        decoder.DecodeInto(record, plan, view);
      }
    }
  } catch (const codecs::DecodeError&) {
  }
  return 0;
}
