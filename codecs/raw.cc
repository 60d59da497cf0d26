#include "codecs/raw.h"

#include <lz4.h>

#include <cstring>
#include <string>

#include "codecs/byte_order.h"

namespace tilefeed::codecs {
namespace {

constexpr unsigned char kMagic[4] = {'T', 'F', 'R', '1'};

[[noreturn]] void Fail(DecodeErrorKind kind, const std::string& reason) {
  throw DecodeError(kind, "raw tensor: " + reason);
}

struct Header {
  RawInfo info;
  std::size_t compressed_size = 0;
};

// Validates everything the header claims against the input and the limits, so that the
// LZ4 call that follows only ever sees sizes that fit the buffers on both sides.
Header ParseHeader(std::span<const std::byte> encoded, std::int64_t max_pixels) {
  if (encoded.size() < kRawHeaderSize) {
    Fail(DecodeErrorKind::kTruncated, std::to_string(encoded.size()) + " bytes, shorter than the " +
                                          std::to_string(kRawHeaderSize) + "-byte header");
  }
  const std::byte* p = encoded.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
    Fail(DecodeErrorKind::kCorrupt, "bad magic (expected \"TFR1\")");
  }
  Header header;
  header.info.height = static_cast<int>(detail::Load<std::uint16_t>(p + 4));
  header.info.width = static_cast<int>(detail::Load<std::uint16_t>(p + 6));
  header.info.channels = std::to_integer<int>(p[8]);
  if (header.info.height == 0 || header.info.width == 0) {
    Fail(DecodeErrorKind::kCorrupt, "zero height or width");
  }
  if (header.info.channels < 1 || header.info.channels > 4) {
    Fail(DecodeErrorKind::kCorrupt,
         std::to_string(header.info.channels) + " channels (must be 1..4)");
  }
  if (p[9] != std::byte{0} || p[10] != std::byte{0} || p[11] != std::byte{0}) {
    Fail(DecodeErrorKind::kCorrupt, "reserved header bytes are not zero");
  }
  const std::int64_t pixels = std::int64_t{header.info.height} * header.info.width;
  if (pixels > max_pixels) {
    Fail(DecodeErrorKind::kTooLarge,
         std::to_string(header.info.width) + "x" + std::to_string(header.info.height) +
             " exceeds the limit of " + std::to_string(max_pixels) + " pixels");
  }
  // LZ4's API counts in int.
  if (header.info.pixel_bytes() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE)) {
    Fail(DecodeErrorKind::kTooLarge,
         std::to_string(header.info.pixel_bytes()) + " bytes exceed the LZ4 block limit");
  }
  header.compressed_size = detail::Load<std::uint32_t>(p + 12);
  const std::size_t available = encoded.size() - kRawHeaderSize;
  if (header.compressed_size > available) {
    Fail(DecodeErrorKind::kTruncated, "block of " + std::to_string(header.compressed_size) +
                                          " bytes but only " + std::to_string(available) +
                                          " follow the header");
  }
  if (header.compressed_size < available) {
    Fail(DecodeErrorKind::kCorrupt,
         std::to_string(available - header.compressed_size) + " trailing bytes after the block");
  }
  const auto bound =
      static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(header.info.pixel_bytes())));
  if (header.compressed_size == 0 || header.compressed_size > bound) {
    Fail(DecodeErrorKind::kCorrupt, "block size " + std::to_string(header.compressed_size) +
                                        " impossible for " +
                                        std::to_string(header.info.pixel_bytes()) + " bytes");
  }
  return header;
}

}  // namespace

std::vector<std::byte> EncodeRaw(std::span<const std::uint8_t> pixels, const RawInfo& info) {
  if (info.height < 1 || info.height > 0xffff || info.width < 1 || info.width > 0xffff ||
      info.channels < 1 || info.channels > 4) {
    Fail(DecodeErrorKind::kInvalidArgument, "cannot encode " + std::to_string(info.width) + "x" +
                                                std::to_string(info.height) + "x" +
                                                std::to_string(info.channels));
  }
  if (pixels.size() != info.pixel_bytes()) {
    Fail(DecodeErrorKind::kInvalidArgument, std::to_string(pixels.size()) +
                                                " pixel bytes for a tensor of " +
                                                std::to_string(info.pixel_bytes()));
  }
  if (pixels.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE)) {
    Fail(DecodeErrorKind::kTooLarge,
         std::to_string(pixels.size()) + " bytes exceed the LZ4 block limit");
  }
  const int input_size = static_cast<int>(pixels.size());
  const int bound = LZ4_compressBound(input_size);
  std::vector<std::byte> encoded(kRawHeaderSize + static_cast<std::size_t>(bound));
  const int compressed = LZ4_compress_default(
      reinterpret_cast<const char*>(pixels.data()),
      reinterpret_cast<char*>(encoded.data() + kRawHeaderSize), input_size, bound);
  // With a destination of LZ4_compressBound bytes compression cannot fail.
  if (compressed <= 0) {
    Fail(DecodeErrorKind::kInvalidArgument, "LZ4_compress_default failed");
  }
  encoded.resize(kRawHeaderSize + static_cast<std::size_t>(compressed));
  std::byte* p = encoded.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  detail::StoreLe(p + 4, static_cast<std::uint16_t>(info.height));
  detail::StoreLe(p + 6, static_cast<std::uint16_t>(info.width));
  p[8] = static_cast<std::byte>(info.channels);
  p[9] = p[10] = p[11] = std::byte{0};
  detail::StoreLe(p + 12, static_cast<std::uint32_t>(compressed));
  return encoded;
}

RawInfo ReadRawInfo(std::span<const std::byte> encoded, std::int64_t max_pixels) {
  return ParseHeader(encoded, max_pixels).info;
}

void DecodeRawInto(std::span<const std::byte> encoded, std::span<std::uint8_t> out,
                   std::int64_t max_pixels) {
  const Header header = ParseHeader(encoded, max_pixels);
  const std::size_t expected = header.info.pixel_bytes();
  if (out.size() != expected) {
    Fail(DecodeErrorKind::kInvalidArgument, "output buffer of " + std::to_string(out.size()) +
                                                " bytes for a tensor of " +
                                                std::to_string(expected));
  }
  // The capacity passed is exactly the expected size, so a block that claims more output
  // is stopped by LZ4 itself before it writes past `out`.
  const int decoded =
      LZ4_decompress_safe(reinterpret_cast<const char*>(encoded.data() + kRawHeaderSize),
                          reinterpret_cast<char*>(out.data()),
                          static_cast<int>(header.compressed_size), static_cast<int>(expected));
  if (decoded < 0) {
    Fail(DecodeErrorKind::kCorrupt,
         "corrupt LZ4 block (LZ4_decompress_safe returned " + std::to_string(decoded) + ")");
  }
  if (static_cast<std::size_t>(decoded) != expected) {
    Fail(DecodeErrorKind::kCorrupt, "LZ4 block decoded to " + std::to_string(decoded) +
                                        " bytes, header says " + std::to_string(expected));
  }
}

}  // namespace tilefeed::codecs
