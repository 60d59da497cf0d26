#include "codecs/raw.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace tilefeed::codecs {
namespace {

std::vector<std::uint8_t> RandomPixels(const RawInfo& info, std::uint32_t seed) {
  std::vector<std::uint8_t> pixels(info.pixel_bytes());
  std::mt19937 rng(seed);
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng());
  return pixels;
}

// Content LZ4 actually compresses (runs and repeats), so the block has matches and
// literals both, which is where a corrupt offset or length could do harm.
std::vector<std::uint8_t> BlockyPixels(const RawInfo& info) {
  std::vector<std::uint8_t> pixels(info.pixel_bytes());
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<std::uint8_t>((i / 7) % 5 * 40 + (i % 3));
  }
  return pixels;
}

std::vector<std::uint8_t> Decode(std::span<const std::byte> encoded) {
  const RawInfo info = ReadRawInfo(encoded);
  std::vector<std::uint8_t> out(info.pixel_bytes());
  DecodeRawInto(encoded, out);
  return out;
}

// Runs `decode` and returns the kind of the DecodeError it throws; fails the test if it
// throws nothing.
template <typename F>
DecodeErrorKind ErrorKindOf(F decode) {
  try {
    decode();
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()), "");
    return e.kind();
  }
  ADD_FAILURE() << "no DecodeError thrown";
  return DecodeErrorKind::kUnsupported;
}

TEST(RawTest, RoundTripsManyShapesBitExactly) {
  int seed = 0;
  for (const int h : {1, 2, 3, 17, 48}) {
    for (const int w : {1, 2, 5, 31, 64}) {
      for (const int c : {1, 2, 3, 4}) {
        const RawInfo info{h, w, c};
        for (const auto& pixels : {RandomPixels(info, ++seed), BlockyPixels(info),
                                   std::vector<std::uint8_t>(info.pixel_bytes(), 200)}) {
          const std::vector<std::byte> encoded = EncodeRaw(pixels, info);
          ASSERT_EQ(ReadRawInfo(encoded), info);
          ASSERT_EQ(Decode(encoded), pixels) << h << "x" << w << "x" << c;
        }
      }
    }
  }
}

TEST(RawTest, HeaderLayoutIsLittleEndian) {
  const RawInfo info{0x0102, 0x0304, 3};
  const std::vector<std::uint8_t> pixels(info.pixel_bytes(), 9);
  const std::vector<std::byte> encoded = EncodeRaw(pixels, info);
  const auto u8 = [&](std::size_t i) { return std::to_integer<int>(encoded[i]); };
  EXPECT_EQ(u8(0), 'T');
  EXPECT_EQ(u8(1), 'F');
  EXPECT_EQ(u8(2), 'R');
  EXPECT_EQ(u8(3), '1');
  EXPECT_EQ(u8(4), 0x02);
  EXPECT_EQ(u8(5), 0x01);
  EXPECT_EQ(u8(6), 0x04);
  EXPECT_EQ(u8(7), 0x03);
  EXPECT_EQ(u8(8), 3);
  EXPECT_EQ(u8(9) | u8(10) | u8(11), 0);
  const std::size_t compressed = u8(12) | u8(13) << 8 | u8(14) << 16 | u8(15) << 24;
  EXPECT_EQ(compressed + kRawHeaderSize, encoded.size());
}

TEST(RawTest, EveryTruncationIsRejected) {
  const RawInfo info{24, 20, 3};
  for (const auto& pixels : {RandomPixels(info, 1), BlockyPixels(info)}) {
    const std::vector<std::byte> encoded = EncodeRaw(pixels, info);
    for (std::size_t length = 0; length < encoded.size(); ++length) {
      // A copy of exactly `length` bytes, so ASan sees any read past it.
      const std::vector<std::byte> cut(encoded.begin(),
                                       encoded.begin() + static_cast<std::ptrdiff_t>(length));
      std::vector<std::uint8_t> out(info.pixel_bytes());
      EXPECT_EQ(ErrorKindOf([&] { DecodeRawInto(cut, out); }), DecodeErrorKind::kTruncated)
          << "length " << length;
      if (length < kRawHeaderSize) {
        EXPECT_EQ(ErrorKindOf([&] { ReadRawInfo(cut); }), DecodeErrorKind::kTruncated);
      }
    }
  }
}

TEST(RawTest, TrailingBytesAreRejected) {
  const RawInfo info{4, 4, 3};
  std::vector<std::byte> encoded = EncodeRaw(BlockyPixels(info), info);
  encoded.push_back(std::byte{0});
  std::vector<std::uint8_t> out(info.pixel_bytes());
  EXPECT_EQ(ErrorKindOf([&] { DecodeRawInto(encoded, out); }), DecodeErrorKind::kCorrupt);
}

TEST(RawTest, BadHeaderFieldsAreRejected) {
  const RawInfo info{8, 6, 3};
  const std::vector<std::byte> good = EncodeRaw(RandomPixels(info, 3), info);
  std::vector<std::uint8_t> out(info.pixel_bytes());
  const auto with = [&](std::size_t offset, int value) {
    std::vector<std::byte> bad = good;
    bad[offset] = static_cast<std::byte>(value);
    return bad;
  };
  const auto kind_of = [&](const std::vector<std::byte>& bad) {
    return ErrorKindOf([&] { DecodeRawInto(bad, out); });
  };
  EXPECT_EQ(kind_of(with(0, 'X')), DecodeErrorKind::kCorrupt);  // magic
  EXPECT_EQ(kind_of(with(3, '2')), DecodeErrorKind::kCorrupt);  // magic version
  EXPECT_EQ(kind_of(with(8, 0)), DecodeErrorKind::kCorrupt);    // zero channels
  EXPECT_EQ(kind_of(with(8, 5)), DecodeErrorKind::kCorrupt);    // five channels
  EXPECT_EQ(kind_of(with(10, 1)), DecodeErrorKind::kCorrupt);   // reserved byte
  std::vector<std::byte> zero_height = with(4, 0);
  EXPECT_EQ(kind_of(zero_height), DecodeErrorKind::kCorrupt);
  std::vector<std::byte> zero_width = with(6, 0);
  EXPECT_EQ(kind_of(zero_width), DecodeErrorKind::kCorrupt);
  // A compressed size one larger than what follows, and one smaller.
  const int size_byte = std::to_integer<int>(good[12]);
  EXPECT_EQ(kind_of(with(12, size_byte + 1)), DecodeErrorKind::kTruncated);
  EXPECT_EQ(kind_of(with(12, size_byte - 1)), DecodeErrorKind::kCorrupt);
  EXPECT_EQ(kind_of(with(15, 0x80)), DecodeErrorKind::kTruncated);
}

TEST(RawTest, EverySingleBitFlipInTheHeaderIsRejected) {
  const RawInfo info{8, 6, 3};
  const std::vector<std::uint8_t> pixels = BlockyPixels(info);
  const std::vector<std::byte> good = EncodeRaw(pixels, info);
  for (std::size_t i = 0; i < kRawHeaderSize; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> bad = good;
      bad[i] ^= static_cast<std::byte>(1 << bit);
      // A dimension change gives a different pixel_bytes; decode into what the header
      // now says (or, where the header is rejected, into the original size).
      std::vector<std::uint8_t> out(pixels.size());
      try {
        out.resize(ReadRawInfo(bad).pixel_bytes());
      } catch (const DecodeError&) {
      }
      EXPECT_THROW(DecodeRawInto(bad, out), DecodeError) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(RawTest, CorruptPayloadIsRejectedOrDecodesToExactlyTheDeclaredSize) {
  const RawInfo info{32, 24, 3};
  for (const auto& pixels : {RandomPixels(info, 4), BlockyPixels(info)}) {
    const std::vector<std::byte> good = EncodeRaw(pixels, info);
    std::mt19937 rng(5);
    for (std::size_t i = kRawHeaderSize; i < good.size(); ++i) {
      std::vector<std::byte> bad = good;
      bad[i] ^= static_cast<std::byte>(1 + rng() % 255);
      // Guard bytes on both sides of the output: LZ4 must stay inside `out`.
      std::vector<std::uint8_t> buffer(pixels.size() + 64, 0xA5);
      const std::span<std::uint8_t> out(buffer.data() + 32, pixels.size());
      try {
        DecodeRawInto(bad, out);
      } catch (const DecodeError& e) {
        EXPECT_EQ(e.kind(), DecodeErrorKind::kCorrupt) << e.what();
      }
      for (std::size_t g = 0; g < 32; ++g) {
        ASSERT_EQ(buffer[g], 0xA5) << "byte " << i;
        ASSERT_EQ(buffer[buffer.size() - 1 - g], 0xA5) << "byte " << i;
      }
    }
  }
}

TEST(RawTest, OversizedDimensionsAreRejectedBeforeDecoding) {
  // A header that declares 65535 x 65535 x 4 over a tiny block: rejected from the header
  // alone, so nobody sizes a 17 GB buffer from it.
  const RawInfo small{2, 2, 4};
  std::vector<std::byte> encoded = EncodeRaw(RandomPixels(small, 6), small);
  for (std::size_t i = 4; i < 8; ++i) encoded[i] = std::byte{0xff};
  EXPECT_EQ(ErrorKindOf([&] { ReadRawInfo(encoded); }), DecodeErrorKind::kTooLarge);
  std::vector<std::uint8_t> out(16);
  EXPECT_EQ(ErrorKindOf([&] { DecodeRawInto(encoded, out); }), DecodeErrorKind::kTooLarge);

  const RawInfo info{100, 100, 3};
  const std::vector<std::byte> fine = EncodeRaw(BlockyPixels(info), info);
  EXPECT_EQ(ReadRawInfo(fine, 10000), info);
  EXPECT_EQ(ErrorKindOf([&] { ReadRawInfo(fine, 9999); }), DecodeErrorKind::kTooLarge);
}

TEST(RawTest, WrongOutputSizeIsAnInvalidArgument) {
  const RawInfo info{5, 5, 3};
  const std::vector<std::uint8_t> pixels = RandomPixels(info, 7);
  const std::vector<std::byte> encoded = EncodeRaw(pixels, info);
  for (const std::size_t size : {std::size_t{0}, pixels.size() - 1, pixels.size() + 1}) {
    std::vector<std::uint8_t> out(size, 0xA5);
    EXPECT_EQ(ErrorKindOf([&] { DecodeRawInto(encoded, out); }), DecodeErrorKind::kInvalidArgument);
    EXPECT_EQ(out, std::vector<std::uint8_t>(size, 0xA5)) << "written before the check";
  }
}

TEST(RawTest, EncodeRejectsBadArguments) {
  const std::vector<std::uint8_t> pixels(12);
  EXPECT_EQ(ErrorKindOf([&] { EncodeRaw(pixels, {2, 2, 2}); }), DecodeErrorKind::kInvalidArgument);
  EXPECT_EQ(ErrorKindOf([&] { EncodeRaw(pixels, {0, 4, 3}); }), DecodeErrorKind::kInvalidArgument);
  EXPECT_EQ(ErrorKindOf([&] { EncodeRaw(pixels, {1, 1, 12}); }), DecodeErrorKind::kInvalidArgument);
  EXPECT_EQ(ErrorKindOf([&] { EncodeRaw({}, {70000, 0, 3}); }), DecodeErrorKind::kInvalidArgument);
}

TEST(RawTest, ForeignBytesAreCorrupt) {
  const std::string text = "this is not a tensor, just some text";
  const std::span<const std::byte> bytes = std::as_bytes(std::span(text));
  EXPECT_EQ(ErrorKindOf([&] { ReadRawInfo(bytes); }), DecodeErrorKind::kCorrupt);
}

}  // namespace
}  // namespace tilefeed::codecs
