#include "transport/frame.h"

#include <xxhash.h>
// A batch's checksum covers every image byte: the library's run-time choice of SSE2, AVX2
// or AVX-512 (Debian builds the plain XXH3 names for SSE2 alone). Same hashes.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <bit>
#include <cassert>
#include <memory>
#include <string>

#include "transport/wire.h"

namespace tilefeed::transport {
namespace {

// Labels and indices go on the wire as their in-memory bytes.
static_assert(std::endian::native == std::endian::little,
              "the frame format is little-endian; a big-endian port must byte-swap");

// Field offsets of the encoded header. The header checksum covers [0, kChecksumOffset).
constexpr std::size_t kMagicOffset = 0;
constexpr std::size_t kVersionOffset = 4;
constexpr std::size_t kHeaderSizeOffset = 6;
constexpr std::size_t kEpochOffset = 8;
constexpr std::size_t kIndexOffset = 16;
constexpr std::size_t kSizeOffset = 24;
constexpr std::size_t kHeightOffset = 28;
constexpr std::size_t kWidthOffset = 32;
constexpr std::size_t kChannelsOffset = 36;
constexpr std::size_t kDtypeOffset = 40;
constexpr std::size_t kLayoutOffset = 41;
constexpr std::size_t kReservedOffset = 42;
constexpr std::size_t kSubstitutedOffset = 44;
constexpr std::size_t kPayloadBytesOffset = 48;
constexpr std::size_t kPayloadChecksumOffset = 56;
constexpr std::size_t kChecksumOffset = 64;
static_assert(kChecksumOffset + 8 == kFrameHeaderSize);

constexpr std::uint8_t kDtypeUint8 = 1;

[[noreturn]] void Reject(std::string_view peer, const std::string& reason) {
  throw TransportError("frame from " + std::string(peer) + ": " + reason);
}

struct StateDeleter {
  void operator()(XXH3_state_t* state) const noexcept { XXH3_freeState(state); }
};

}  // namespace

BatchMeta FrameHeader::meta() const {
  return BatchMeta{epoch,
                   index,
                   size,
                   static_cast<int>(height),
                   static_cast<int>(width),
                   static_cast<int>(channels),
                   layout,
                   substituted};
}

std::uint64_t PayloadChecksum(std::span<const std::uint8_t> images,
                              std::span<const std::int32_t> labels,
                              std::span<const std::uint64_t> indices) {
  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  if (!state || XXH3_64bits_reset(state.get()) == XXH_ERROR) throw std::bad_alloc();
  // Streaming gives the same digest as one pass over the concatenation.
  XXH3_64bits_update(state.get(), images.data(), images.size_bytes());
  XXH3_64bits_update(state.get(), labels.data(), labels.size_bytes());
  XXH3_64bits_update(state.get(), indices.data(), indices.size_bytes());
  return XXH3_64bits_digest(state.get());
}

FrameHeader MakeFrameHeader(const BatchMeta& meta, std::span<const std::uint8_t> images,
                            std::span<const std::int32_t> labels,
                            std::span<const std::uint64_t> indices, bool checksum) {
  FrameHeader header;
  header.epoch = meta.epoch;
  header.index = meta.index;
  header.size = static_cast<std::uint32_t>(meta.size);
  header.height = static_cast<std::uint32_t>(meta.height);
  header.width = static_cast<std::uint32_t>(meta.width);
  header.channels = static_cast<std::uint32_t>(meta.channels);
  header.layout = meta.layout;
  header.substituted = meta.substituted;
  assert(images.size() == header.image_bytes());
  assert(labels.size() == meta.size && indices.size() == meta.size);
  header.payload_bytes = header.image_bytes() + header.label_bytes() + header.index_bytes();
  header.payload_checksum = checksum ? PayloadChecksum(images, labels, indices) : 0;
  return header;
}

EncodedFrameHeader EncodeFrameHeader(const FrameHeader& header) {
  EncodedFrameHeader out{};
  detail::PutField<std::uint32_t>(out, kMagicOffset, kFrameMagic);
  detail::PutField<std::uint16_t>(out, kVersionOffset, kFrameVersion);
  detail::PutField<std::uint16_t>(out, kHeaderSizeOffset,
                                  static_cast<std::uint16_t>(kFrameHeaderSize));
  detail::PutField<std::uint64_t>(out, kEpochOffset, header.epoch);
  detail::PutField<std::uint64_t>(out, kIndexOffset, header.index);
  detail::PutField<std::uint32_t>(out, kSizeOffset, header.size);
  detail::PutField<std::uint32_t>(out, kHeightOffset, header.height);
  detail::PutField<std::uint32_t>(out, kWidthOffset, header.width);
  detail::PutField<std::uint32_t>(out, kChannelsOffset, header.channels);
  detail::PutField<std::uint8_t>(out, kDtypeOffset, kDtypeUint8);
  detail::PutField<std::uint8_t>(out, kLayoutOffset,
                                 header.layout == loader::Layout::kNchw ? 1 : 0);
  detail::PutField<std::uint16_t>(out, kReservedOffset, 0);
  detail::PutField<std::uint32_t>(out, kSubstitutedOffset, header.substituted);
  detail::PutField<std::uint64_t>(out, kPayloadBytesOffset, header.payload_bytes);
  detail::PutField<std::uint64_t>(out, kPayloadChecksumOffset, header.payload_checksum);
  detail::PutField<std::uint64_t>(out, kChecksumOffset, XXH3_64bits(out.data(), kChecksumOffset));
  return out;
}

FrameHeader ParseFrameHeader(std::span<const std::byte> bytes, std::string_view peer) {
  if (bytes.size() != kFrameHeaderSize) {
    Reject(peer, "header is " + std::to_string(bytes.size()) + " bytes, expected " +
                     std::to_string(kFrameHeaderSize));
  }
  if (detail::GetField<std::uint32_t>(bytes, kMagicOffset) != kFrameMagic)
    Reject(peer, "bad magic");
  if (const auto version = detail::GetField<std::uint16_t>(bytes, kVersionOffset);
      version != kFrameVersion) {
    Reject(peer, "unsupported version " + std::to_string(version));
  }
  if (detail::GetField<std::uint16_t>(bytes, kHeaderSizeOffset) != kFrameHeaderSize) {
    Reject(peer, "header size field is " +
                     std::to_string(detail::GetField<std::uint16_t>(bytes, kHeaderSizeOffset)));
  }
  if (XXH3_64bits(bytes.data(), kChecksumOffset) !=
      detail::GetField<std::uint64_t>(bytes, kChecksumOffset)) {
    Reject(peer, "header checksum mismatch");
  }
  FrameHeader h;
  h.epoch = detail::GetField<std::uint64_t>(bytes, kEpochOffset);
  h.index = detail::GetField<std::uint64_t>(bytes, kIndexOffset);
  h.size = detail::GetField<std::uint32_t>(bytes, kSizeOffset);
  h.height = detail::GetField<std::uint32_t>(bytes, kHeightOffset);
  h.width = detail::GetField<std::uint32_t>(bytes, kWidthOffset);
  h.channels = detail::GetField<std::uint32_t>(bytes, kChannelsOffset);
  h.substituted = detail::GetField<std::uint32_t>(bytes, kSubstitutedOffset);
  h.payload_bytes = detail::GetField<std::uint64_t>(bytes, kPayloadBytesOffset);
  h.payload_checksum = detail::GetField<std::uint64_t>(bytes, kPayloadChecksumOffset);
  if (detail::GetField<std::uint8_t>(bytes, kDtypeOffset) != kDtypeUint8)
    Reject(peer, "dtype is not uint8");
  const auto layout = detail::GetField<std::uint8_t>(bytes, kLayoutOffset);
  if (layout > 1) Reject(peer, "unknown layout " + std::to_string(layout));
  h.layout = layout == 1 ? loader::Layout::kNchw : loader::Layout::kNhwc;
  if (detail::GetField<std::uint16_t>(bytes, kReservedOffset) != 0)
    Reject(peer, "reserved field is not 0");
  if (h.size == 0 || h.size > kMaxFrameBatch) {
    Reject(peer, "batch size " + std::to_string(h.size) + " out of range");
  }
  if (h.height == 0 || h.height > kMaxFrameDim || h.width == 0 || h.width > kMaxFrameDim) {
    Reject(peer,
           "image " + std::to_string(h.height) + "x" + std::to_string(h.width) + " out of range");
  }
  if (h.channels == 0 || h.channels > kMaxFrameChannels) {
    Reject(peer, std::to_string(h.channels) + " channels out of range");
  }
  if (h.substituted > h.size) {
    Reject(peer, std::to_string(h.substituted) + " substituted samples in a batch of " +
                     std::to_string(h.size));
  }
  // The bounds above keep every product below 2^64, but check anyway: the bounds may grow.
  std::uint64_t image_bytes = 0;
  std::uint64_t expected = 0;
  if (__builtin_mul_overflow(std::uint64_t{h.height} * h.width, h.channels, &image_bytes) ||
      __builtin_mul_overflow(image_bytes, h.size, &image_bytes) ||
      __builtin_add_overflow(image_bytes, std::uint64_t{h.size} * 12, &expected)) {
    Reject(peer, "payload size overflows");
  }
  if (h.payload_bytes != expected) {
    Reject(peer, "payload is " + std::to_string(h.payload_bytes) + " bytes, shape needs " +
                     std::to_string(expected));
  }
  if (h.payload_bytes > kMaxFramePayload) {
    Reject(peer, "payload of " + std::to_string(h.payload_bytes) + " bytes over the limit");
  }
  return h;
}

void VerifyPayload(const FrameHeader& header, std::span<const std::uint8_t> images,
                   std::span<const std::int32_t> labels, std::span<const std::uint64_t> indices,
                   std::string_view peer) {
  if (images.size() != header.image_bytes() || labels.size() != header.size ||
      indices.size() != header.size) {
    Reject(peer,
           "payload parts are " + std::to_string(images.size()) + "/" +
               std::to_string(labels.size_bytes()) + "/" + std::to_string(indices.size_bytes()) +
               " bytes, header says " + std::to_string(header.image_bytes()) + "/" +
               std::to_string(header.label_bytes()) + "/" + std::to_string(header.index_bytes()));
  }
  if (PayloadChecksum(images, labels, indices) != header.payload_checksum) {
    Reject(peer, "payload checksum mismatch");
  }
}

}  // namespace tilefeed::transport
