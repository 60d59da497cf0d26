// libFuzzer target: the LZ4 raw tensor decoder on arbitrary bytes. A DecodeError is the
// only acceptable failure; the output buffer is exactly the size the header declares.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codecs/raw.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace codecs = tilefeed::codecs;
  const auto encoded = std::span(reinterpret_cast<const std::byte*>(data), size);
  constexpr std::int64_t kMaxPixels = 1 << 20;
  try {
    const codecs::RawInfo info = codecs::ReadRawInfo(encoded, kMaxPixels);
    std::vector<std::uint8_t> out(info.pixel_bytes());
    codecs::DecodeRawInto(encoded, out, kMaxPixels);
  } catch (const codecs::DecodeError&) {
  }
  return 0;
}
