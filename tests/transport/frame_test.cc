#include "transport/frame.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace tilefeed::transport {
namespace {

struct Payload {
  std::vector<std::uint8_t> images;
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> indices;
};

Payload MakePayload(std::size_t size, int h, int w) {
  Payload p;
  p.images.resize(size * h * w * 3);
  std::iota(p.images.begin(), p.images.end(), std::uint8_t{3});
  for (std::size_t i = 0; i < size; ++i) {
    p.labels.push_back(static_cast<std::int32_t>(i * 5));
    p.indices.push_back(1000 + i);
  }
  return p;
}

FrameHeader MakeHeader(const Payload& p, std::size_t size, int h, int w,
                       std::uint32_t substituted = 0) {
  const BatchMeta meta{7, 3, size, h, w, 3, loader::Layout::kNchw, substituted};
  return MakeFrameHeader(meta, p.images, p.labels, p.indices);
}

std::string ParseError(std::span<const std::byte> bytes) {
  try {
    ParseFrameHeader(bytes, "tcp://peer:1");
  } catch (const TransportError& e) {
    return e.what();
  }
  return {};
}

// Writes `value` at `offset` and recomputes the header checksum, so only the semantic
// checks can reject the header.
template <typename T>
EncodedFrameHeader Patched(EncodedFrameHeader bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
  const std::uint64_t checksum = XXH3_64bits(bytes.data(), 64);
  std::memcpy(bytes.data() + 64, &checksum, 8);
  return bytes;
}

TEST(Frame, RoundTrips) {
  const Payload p = MakePayload(4, 5, 6);
  const FrameHeader header = MakeHeader(p, 4, 5, 6, /*substituted=*/3);
  EXPECT_EQ(header.payload_bytes, 4u * 5 * 6 * 3 + 4 * 4 + 4 * 8);
  const EncodedFrameHeader bytes = EncodeFrameHeader(header);
  const FrameHeader parsed = ParseFrameHeader(bytes, "test");
  EXPECT_EQ(parsed, header);
  EXPECT_EQ(parsed.meta().layout, loader::Layout::kNchw);
  // The loader's substituted samples cross the wire, so a remote trainer counts them too.
  EXPECT_EQ(parsed.meta().substituted, 3u);
  EXPECT_NO_THROW(VerifyPayload(parsed, p.images, p.labels, p.indices));
}

TEST(Frame, RejectsEveryFlippedByteWithAReason) {
  const Payload p = MakePayload(2, 3, 4);
  const EncodedFrameHeader good = EncodeFrameHeader(MakeHeader(p, 2, 3, 4));
  std::set<std::string> reasons;
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (const unsigned mask : {0x01u, 0x80u, 0xFFu}) {
      EncodedFrameHeader bad = good;
      bad[i] ^= static_cast<std::byte>(mask);
      const std::string error = ParseError(bad);
      ASSERT_FALSE(error.empty()) << "byte " << i << " mask " << mask << " accepted";
      EXPECT_EQ(error.rfind("frame from tcp://peer:1: ", 0), 0u) << error;
      reasons.insert(error);
    }
  }
  EXPECT_TRUE(reasons.count("frame from tcp://peer:1: bad magic"));
  EXPECT_TRUE(reasons.count("frame from tcp://peer:1: header checksum mismatch"));
}

TEST(Frame, RejectsEveryTruncationAndExtension) {
  const Payload p = MakePayload(2, 3, 4);
  const EncodedFrameHeader good = EncodeFrameHeader(MakeHeader(p, 2, 3, 4));
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(ParseError(std::span(good).first(n)),
              "frame from tcp://peer:1: header is " + std::to_string(n) + " bytes, expected 72");
  }
  std::vector<std::byte> longer(good.begin(), good.end());
  longer.push_back(std::byte{0});
  EXPECT_NE(ParseError(longer).find("73 bytes"), std::string::npos);
}

TEST(Frame, RejectsInconsistentFieldsEvenWithAValidChecksum) {
  const Payload p = MakePayload(2, 3, 4);
  const FrameHeader header = MakeHeader(p, 2, 3, 4);
  const EncodedFrameHeader good = EncodeFrameHeader(header);
  const struct {
    EncodedFrameHeader bytes;
    const char* reason;
  } cases[] = {
      {Patched<std::uint64_t>(good, 48, header.payload_bytes + 1), "shape needs"},
      {Patched<std::uint64_t>(good, 48, 0), "shape needs"},
      {Patched<std::uint32_t>(good, 44, 3), "3 substituted samples in a batch of 2"},
      {Patched<std::uint32_t>(good, 24, 0), "batch size 0 out of range"},
      {Patched<std::uint32_t>(good, 24, 0xFFFFFFFF), "out of range"},
      {Patched<std::uint32_t>(good, 28, 0), "out of range"},
      {Patched<std::uint32_t>(good, 32, kMaxFrameDim + 1), "out of range"},
      {Patched<std::uint32_t>(good, 36, 5), "5 channels out of range"},
      {Patched<std::uint8_t>(good, 40, 2), "dtype is not uint8"},
      {Patched<std::uint8_t>(good, 41, 2), "unknown layout 2"},
      {Patched<std::uint16_t>(good, 42, 1), "reserved field"},
      {Patched<std::uint16_t>(good, 4, 1), "unsupported version 1"},
      {Patched<std::uint16_t>(good, 6, 80), "header size field is 80"},
  };
  for (const auto& c : cases) {
    const std::string error = ParseError(c.bytes);
    EXPECT_NE(error.find(c.reason), std::string::npos)
        << "got '" << error << "', want " << c.reason;
  }
  // The largest shape within the dimension bounds still exceeds the payload limit.
  EncodedFrameHeader huge = Patched<std::uint32_t>(good, 24, kMaxFrameBatch);
  huge = Patched<std::uint32_t>(huge, 44, kMaxFrameBatch);
  huge = Patched<std::uint32_t>(huge, 28, kMaxFrameDim);
  huge = Patched<std::uint32_t>(huge, 32, kMaxFrameDim);
  huge = Patched<std::uint64_t>(
      huge, 48,
      std::uint64_t{kMaxFrameBatch} * kMaxFrameDim * kMaxFrameDim * 3 + kMaxFrameBatch * 12ull);
  EXPECT_NE(ParseError(huge).find("over the limit"), std::string::npos) << ParseError(huge);
}

TEST(Frame, VerifyPayloadCatchesCorruptionAndWrongSizes) {
  Payload p = MakePayload(3, 4, 4);
  const FrameHeader header = MakeHeader(p, 3, 4, 4);
  p.images[17] ^= 1;
  EXPECT_THROW(VerifyPayload(header, p.images, p.labels, p.indices, "x"), TransportError);
  p.images[17] ^= 1;
  p.indices[2] += 1;
  EXPECT_THROW(VerifyPayload(header, p.images, p.labels, p.indices, "x"), TransportError);
  p.indices[2] -= 1;
  try {
    VerifyPayload(header, std::span(p.images).first(10), p.labels, p.indices, "x");
    FAIL() << "short images accepted";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("frame from x: payload parts"), std::string::npos);
  }
}

}  // namespace
}  // namespace tilefeed::transport
