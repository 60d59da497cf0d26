// Uses the installed headers and libraries the way a user's program would, and checks
// answers that are known in advance.

#include <tilefeed/codecs/jpeg.h>
#include <tilefeed/codecs/jpeg_encoder.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

namespace codecs = tilefeed::codecs;

int main() {
  const int eighths = codecs::ChooseScaleEighths(448, 448, 224, 224, codecs::DecodeScaling::kExact);
  std::printf("ChooseScaleEighths(448x448 -> 224x224, exact) = %d/8\n", eighths);
  if (eighths != 4) {
    std::fprintf(stderr, "expected 4/8\n");
    return 1;
  }

  // A round trip through both C libraries the static archives depend on (libjpeg for
  // encoding, TurboJPEG/libjpeg for the header), so a missing link dependency shows here.
  std::vector<std::uint8_t> pixels(std::size_t{40} * 24 * 3, 128);
  const std::vector<std::byte> jpeg = codecs::EncodeJpeg(
      codecs::ConstPixelView{pixels.data(), 40, 24, 3, std::ptrdiff_t{40} * 3}, {});
  codecs::JpegDecoder decoder;
  const codecs::ImageInfo info = decoder.ReadInfo(std::span<const std::byte>(jpeg));
  std::printf("EncodeJpeg: %zu bytes; ReadInfo: %dx%d, %d components\n", jpeg.size(), info.width,
              info.height, info.components);
  if (info.width != 40 || info.height != 24 || info.components != 3) {
    std::fprintf(stderr, "expected 40x24, 3 components\n");
    return 1;
  }
  std::printf("tilefeed consumer OK\n");
  return 0;
}
