// libFuzzer target: the PNG header probe, crop-before-decode and Verify on arbitrary
// bytes. The crop, output size and flip come from the input's first bytes so the fuzzer
// explores them along with the file. Every outcome but a DecodeError or pixels is a bug.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codecs/png.h"

namespace {

namespace codecs = tilefeed::codecs;

int Scaled(std::uint8_t byte, int range) { return range * byte / 256; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 6) return 0;
  codecs::PngOptions options;
  options.max_pixels = 1 << 22;  // keeps each run fast and within the fuzzer's RSS limit
  options.max_chunk_bytes = 1 << 20;
  codecs::PngDecoder decoder(options);
  const auto png = std::span(reinterpret_cast<const std::byte*>(data + 5), size - 5);
  try {
    const codecs::ImageInfo info = decoder.ReadInfo(png);
    codecs::CropPlan plan;
    plan.crop.x = Scaled(data[1], info.width);
    plan.crop.y = Scaled(data[2], info.height);
    plan.crop.width = 1 + Scaled(data[3], info.width - plan.crop.x);
    plan.crop.height = 1 + Scaled(data[4], info.height - plan.crop.y);
    plan.flip = (data[0] & 8) != 0;
    const int out_w = 1 + data[3] % 64;
    const int out_h = 1 + data[4] % 64;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * 3);
    decoder.DecodeInto(png, plan, codecs::PixelView::Interleaved(out.data(), out_w, out_h));
    if (data[0] & 16) decoder.Verify(png);
  } catch (const codecs::DecodeError&) {
  }
  return 0;
}
