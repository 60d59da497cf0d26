#pragma once

// The wire format of one batch: a fixed-size, versioned FrameHeader followed by the
// payload, which is the batch's images (uint8, size x h x w x c), then its labels (int32,
// one per sample), then its sample indices (uint64, one per sample), all little-endian.
//
// Frames come from other processes and hosts, so ParseFrameHeader trusts nothing: it
// checks the magic, version and header size, a checksum of the header itself, every field's
// range, and that the sizes agree with each other (with overflow-checked arithmetic) before
// any size is used. VerifyPayload then checks the payload against the header's XXH3-64.
//
// Everything here is a pure function of its arguments; thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::transport {

inline constexpr std::uint32_t kFrameMagic = 0x31424654;  // "TFB1", little-endian
// Version 2 carries the substituted-sample count where version 1 repeated the sample count.
inline constexpr std::uint16_t kFrameVersion = 2;
inline constexpr std::size_t kFrameHeaderSize = 72;
// Bounds a parser accepts; anything larger is a corrupt or hostile frame.
inline constexpr std::uint32_t kMaxFrameDim = 1u << 15;  // height, width
inline constexpr std::uint32_t kMaxFrameChannels = 4;
inline constexpr std::uint32_t kMaxFrameBatch = 1u << 16;                  // samples per batch
inline constexpr std::uint64_t kMaxFramePayload = std::uint64_t{1} << 34;  // 16 GiB

// The decoded header of one frame. A value; sizes derive from the shape.
struct FrameHeader {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;  // batch number within the epoch
  std::uint32_t size = 0;   // samples
  std::uint32_t height = 0;
  std::uint32_t width = 0;
  std::uint32_t channels = 0;
  loader::Layout layout = loader::Layout::kNhwc;
  std::uint32_t substituted = 0;       // bad samples the loader replaced, <= size
  std::uint64_t payload_bytes = 0;     // image_bytes() + size * 4 + size * 8
  std::uint64_t payload_checksum = 0;  // XXH3-64 of the payload

  std::uint64_t image_bytes() const { return std::uint64_t{size} * height * width * channels; }
  std::uint64_t label_bytes() const { return std::uint64_t{size} * 4; }
  std::uint64_t index_bytes() const { return std::uint64_t{size} * 8; }
  BatchMeta meta() const;
  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

using EncodedFrameHeader = std::array<std::byte, kFrameHeaderSize>;

// The header for a batch, with payload_bytes and payload_checksum computed from the three
// spans (payload_checksum is 0 when `checksum` is false: for a receiver that checks nothing,
// the reader saves a read of the payload). REQUIRES: labels.size() == indices.size() == meta.size
// and images.size() == meta.size * height * width * channels, all within the kMaxFrame* bounds.
FrameHeader MakeFrameHeader(const BatchMeta& meta, std::span<const std::uint8_t> images,
                            std::span<const std::int32_t> labels,
                            std::span<const std::uint64_t> indices, bool checksum = true);

// XXH3-64 of images, then labels, then indices, as if they were one buffer.
std::uint64_t PayloadChecksum(std::span<const std::uint8_t> images,
                              std::span<const std::int32_t> labels,
                              std::span<const std::uint64_t> indices);

// Serializes `header` (with the header checksum). REQUIRES: the header would parse.
EncodedFrameHeader EncodeFrameHeader(const FrameHeader& header);

// Parses and checks a header. Throws TransportError("frame from <peer>: <reason>") for a
// span that is not exactly kFrameHeaderSize bytes or any field that fails a check.
FrameHeader ParseFrameHeader(std::span<const std::byte> bytes, std::string_view peer = "peer");

// Checks that the three payload spans have the header's sizes and checksum. Throws
// TransportError("frame from <peer>: <reason>") otherwise.
void VerifyPayload(const FrameHeader& header, std::span<const std::uint8_t> images,
                   std::span<const std::int32_t> labels, std::span<const std::uint64_t> indices,
                   std::string_view peer = "peer");

}  // namespace tilefeed::transport
