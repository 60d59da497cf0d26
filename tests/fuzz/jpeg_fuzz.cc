// libFuzzer target: the JPEG header probe and crop-before-decode on arbitrary bytes.
// The crop, output size and flip come from the input's first bytes so the fuzzer
// explores them along with the file. Every outcome but a DecodeError or pixels is a bug.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tilefeed/codecs/jpeg.h"

namespace {

namespace codecs = tilefeed::codecs;

int Scaled(std::uint8_t byte, int range) { return range * byte / 256; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 6) return 0;
  codecs::JpegOptions options;
  options.max_pixels = 1 << 22;  // keeps each run fast and within the fuzzer's RSS limit
  options.corrupt_data =
      data[0] & 1 ? codecs::CorruptDataPolicy::kAccept : codecs::CorruptDataPolicy::kFail;
  options.decode_scaling =
      data[0] & 2 ? codecs::DecodeScaling::kFast : codecs::DecodeScaling::kExact;
  options.fast_upsample = (data[0] & 4) != 0;
  codecs::JpegDecoder decoder(options);
  const auto jpeg = std::span(reinterpret_cast<const std::byte*>(data + 5), size - 5);
  try {
    const codecs::ImageInfo info = decoder.ReadInfo(jpeg);
    codecs::CropPlan plan;
    plan.crop.x = Scaled(data[1], info.width);
    plan.crop.y = Scaled(data[2], info.height);
    plan.crop.width = 1 + Scaled(data[3], info.width - plan.crop.x);
    plan.crop.height = 1 + Scaled(data[4], info.height - plan.crop.y);
    plan.flip = (data[0] & 8) != 0;
    const int out_w = 1 + data[3] % 64;
    const int out_h = 1 + data[4] % 64;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * 3);
    decoder.DecodeInto(jpeg, plan, codecs::PixelView::Interleaved(out.data(), out_w, out_h));
    if (data[0] & 16) {
      std::vector<std::uint8_t> full(static_cast<std::size_t>(info.width) * info.height * 3);
      decoder.DecodeFull(jpeg,
                         codecs::PixelView::Interleaved(full.data(), info.width, info.height));
    }
  } catch (const codecs::DecodeError&) {
  }
  return 0;
}
