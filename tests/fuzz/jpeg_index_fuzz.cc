// libFuzzer target: the stored JPEG interval index and the interval-skipping crop decode
// on arbitrary bytes. Input layout (make_seeds writes it for transcoded files):
//   byte 0      flags: corrupt-data policy, DCT scales, fast upsampling, flip, and
//               whether to also pass the parsed index straight after damaging it
//   bytes 1..4  crop x, y, width, height as fractions of the image (and the output size)
//   bytes 5..6  n, the stored index's length (little-endian)
//   n bytes     the stored index (SerializeIndex)
//   the rest    the JPEG
// Every outcome but a DecodeError or pixels is a bug: ParseIndex must refuse what does not
// match the JPEG, and DecodeInto must never read outside it.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codecs/jpeg_index.h"
#include "tilefeed/codecs/jpeg.h"

namespace {

namespace codecs = tilefeed::codecs;

int Scaled(std::uint8_t byte, int range) { return range * byte / 256; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 7) return 0;
  const std::size_t index_size = data[5] | std::size_t{data[6]} << 8;
  if (size - 7 < index_size) return 0;
  const auto stored = std::span(reinterpret_cast<const std::byte*>(data + 7), index_size);
  const auto jpeg =
      std::span(reinterpret_cast<const std::byte*>(data + 7 + index_size), size - 7 - index_size);
  codecs::JpegOptions options;
  options.max_pixels = 1 << 22;  // keeps each run fast and within the fuzzer's RSS limit
  options.corrupt_data =
      data[0] & 1 ? codecs::CorruptDataPolicy::kAccept : codecs::CorruptDataPolicy::kFail;
  options.decode_scaling =
      data[0] & 2 ? codecs::DecodeScaling::kFast : codecs::DecodeScaling::kExact;
  options.fast_upsample = (data[0] & 4) != 0;
  codecs::IndexedJpegDecoder decoder(options);
  try {
    codecs::JpegIntervalIndex index = codecs::ParseIndex(stored, jpeg);
    if (data[0] & 16) {
      // A hand-made index that skipped ParseIndex: DecodeInto's own checks must hold.
      index.offsets[data[1] % index.offsets.size()] += data[2];
    }
    if (std::int64_t{index.width} * index.height > options.max_pixels) return 0;
    codecs::CropPlan plan;
    plan.crop.x = Scaled(data[1], index.width);
    plan.crop.y = Scaled(data[2], index.height);
    plan.crop.width = 1 + Scaled(data[3], index.width - plan.crop.x);
    plan.crop.height = 1 + Scaled(data[4], index.height - plan.crop.y);
    plan.flip = (data[0] & 8) != 0;
    const int out_w = 1 + data[3] % 64;
    const int out_h = 1 + data[4] % 64;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * 3);
    decoder.DecodeInto(jpeg, index, plan, codecs::PixelView::Interleaved(out.data(), out_w, out_h));
  } catch (const codecs::DecodeError&) {
  }
  return 0;
}
