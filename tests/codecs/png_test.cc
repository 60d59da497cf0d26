// Tests codecs/png.h: every PNG colour type and bit depth comes out as the RGB8 a correct
// decoder gives, a crop decode equals "full decode, crop, resize" of the same pixels byte
// for byte, and every kind of bad PNG is a DecodeError of the right kind.

#include "codecs/png.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codecs/resize.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/png_maker.h"

namespace tilefeed::codecs {
namespace {

using testing::MakeTestPng;
using testing::PngKind;
using testing::TestPng;

std::span<const std::byte> Bytes(const std::vector<std::byte>& v) { return v; }

// What a crop decode must give: the known pixels cropped, then resized by the Resizer
// (crop-then-resize, as torchvision does: the filter stops at the crop's edges).
std::vector<std::uint8_t> Reference(const TestPng& png, const CropPlan& plan, int out_w,
                                    int out_h) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * 3);
  Resizer resizer;
  const Rect& c = plan.crop;
  const std::uint8_t* corner = png.rgb.data() + (std::size_t(c.y) * png.width + c.x) * 3;
  resizer.Resize(
      ConstPixelView{corner, c.width, c.height, 3, static_cast<std::ptrdiff_t>(png.width) * 3},
      SourceBox{0, 0, double(c.width), double(c.height)},
      PixelView::Interleaved(out.data(), out_w, out_h), plan.flip);
  return out;
}

std::vector<std::uint8_t> Decode(PngDecoder& decoder, const TestPng& png, const CropPlan& plan,
                                 int out_w, int out_h) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(out_w) * out_h * 3, 0xAB);
  decoder.DecodeInto(png.bytes, plan, PixelView::Interleaved(out.data(), out_w, out_h));
  return out;
}

DecodeErrorKind KindOfFailure(PngDecoder& decoder, const std::vector<std::byte>& bytes,
                              std::string* message = nullptr) {
  std::vector<std::uint8_t> out(std::size_t{16} * 16 * 3);
  try {
    decoder.DecodeInto(
        Bytes(bytes),
        [](const ImageInfo& info) {
          return CropPlan{Rect{0, 0, info.width, info.height}};
        },
        PixelView::Interleaved(out.data(), 16, 16));
  } catch (const DecodeError& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no DecodeError";
  return DecodeErrorKind::kInvalidArgument;
}

class EveryKind : public ::testing::TestWithParam<std::tuple<PngKind, bool>> {};

TEST_P(EveryKind, FullDecodeGivesTheKnownPixels) {
  const auto [kind, interlaced] = GetParam();
  PngDecoder decoder;
  for (auto [w, h] : {std::pair{1, 1}, std::pair{7, 13}, std::pair{61, 47}}) {
    const TestPng png = MakeTestPng(kind, w, h, interlaced, w * 100 + h);
    const ImageInfo info = decoder.ReadInfo(png.bytes);
    EXPECT_EQ(info.width, w);
    EXPECT_EQ(info.height, h);
    EXPECT_EQ(info.progressive, interlaced);
    const CropPlan whole{Rect{0, 0, w, h}};
    EXPECT_EQ(Decode(decoder, png, whole, w, h), Reference(png, whole, w, h))
        << ToString(kind) << " " << w << "x" << h;
    EXPECT_NO_THROW(decoder.Verify(png.bytes));
  }
}

// Crops at every edge and corner, at upscale, same size and 1/2, 1/3, 1/8 downscales,
// flipped and not: always the reference's bytes.
TEST_P(EveryKind, CropDecodeEqualsFullDecodeCropResize) {
  const auto [kind, interlaced] = GetParam();
  const TestPng png = MakeTestPng(kind, 67, 53, interlaced, 7);
  const int w = png.width, h = png.height;
  const Rect crops[] = {{0, 0, w, h},        {0, 0, 20, 16},           {w - 20, 0, 20, 16},
                        {0, h - 16, 20, 16}, {w - 20, h - 16, 20, 16}, {0, 10, w, 9},
                        {30, 0, 5, h},       {w - 1, h - 1, 1, 1},     {0, 0, 1, 1},
                        {13, 17, 40, 33}};
  const std::pair<int, int> outs[] = {{8, 8}, {3, 5}, {16, 16}, {40, 40}, {1, 1}};
  PngDecoder decoder;
  for (const Rect& crop : crops) {
    for (auto [ow, oh] : outs) {
      for (bool flip : {false, true}) {
        const CropPlan plan{crop, flip};
        ASSERT_EQ(Decode(decoder, png, plan, ow, oh), Reference(png, plan, ow, oh))
            << ToString(kind) << " crop " << crop.width << "x" << crop.height << "+" << crop.x
            << "+" << crop.y << " -> " << ow << "x" << oh << (flip ? " flipped" : "");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Png, EveryKind,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllPngKinds),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(testing::ToString(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_interlaced" : "");
                         });

TEST(Png, DecodingStopsAfterTheCropsLastRow) {
  const TestPng png = MakeTestPng(PngKind::kRgb8, 40, 100);
  PngDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{8} * 8 * 3);
  const DecodeReport report = decoder.DecodeInto(png.bytes, CropPlan{Rect{5, 10, 30, 20}},
                                                 PixelView::Interleaved(out.data(), 8, 8));
  EXPECT_EQ(report.decoded.height, 30);
  EXPECT_EQ(report.scale_eighths, 8);
}

TEST(Png, PlannerAndPlanarOutput) {
  const TestPng png = MakeTestPng(PngKind::kRgba8, 50, 30);
  PngDecoder decoder;
  const CropPlan plan{Rect{10, 5, 30, 20}, true};
  std::vector<std::uint8_t> planar(std::size_t{12} * 12 * 3);
  decoder.DecodeInto(
      png.bytes,
      [&](const ImageInfo& info) {
        EXPECT_EQ(info.components, 4);
        EXPECT_EQ(info.color_space, ColorSpace::kRgb);
        return plan;
      },
      PixelView::Planar(planar.data(), 12, 12));
  const std::vector<std::uint8_t> expected = Reference(png, plan, 12, 12);
  for (int y = 0; y < 12; ++y) {
    for (int x = 0; x < 12; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(planar[c * 144 + y * 12 + x], expected[(y * 12 + x) * 3 + c]);
      }
    }
  }
}

TEST(Png, AnExceptionFromThePlannerLeavesTheDecoderReady) {
  const TestPng png = MakeTestPng(PngKind::kGray8, 20, 20);
  PngDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{4} * 4 * 3);
  const auto view = PixelView::Interleaved(out.data(), 4, 4);
  EXPECT_THROW(
      decoder.DecodeInto(
          png.bytes, [](const ImageInfo&) -> CropPlan { throw std::logic_error("x"); }, view),
      std::logic_error);
  EXPECT_NO_THROW(decoder.DecodeInto(png.bytes, CropPlan{Rect{0, 0, 20, 20}}, view));
}

// --- bad input ------------------------------------------------------------------------

std::vector<std::byte> GoodPng() { return MakeTestPng(PngKind::kRgb8, 16, 16).bytes; }

TEST(PngBad, WrongSignatureNamesTheFormat) {
  PngDecoder decoder;
  std::string message;
  codecs::EncodeOptions options;
  EXPECT_EQ(KindOfFailure(decoder, testing::MakeJpeg(8, 8, options), &message),
            DecodeErrorKind::kNotJpeg);
  EXPECT_NE(message.find("not a PNG: JPEG"), std::string::npos) << message;
  EXPECT_EQ(KindOfFailure(decoder, testing::MakeGifBytes(), &message), DecodeErrorKind::kNotJpeg);
  EXPECT_NE(message.find("GIF"), std::string::npos) << message;
  EXPECT_EQ(KindOfFailure(decoder, {}, &message), DecodeErrorKind::kNotJpeg);
  // Seven of the signature's eight bytes right: a damaged PNG, not another format.
  std::vector<std::byte> png = GoodPng();
  png[1] = std::byte{'X'};
  EXPECT_EQ(KindOfFailure(decoder, png, &message), DecodeErrorKind::kCorrupt);
  EXPECT_NE(message.find("damaged signature"), std::string::npos) << message;
}

TEST(PngBad, TruncatedAnywhere) {
  const std::vector<std::byte> png = GoodPng();
  PngDecoder decoder;
  const std::size_t idat = testing::FindPngChunk(png, "IDAT");
  ASSERT_GT(idat, 0u);
  for (std::size_t size : {std::size_t{8}, std::size_t{20}, idat, idat + 10, png.size() - 20}) {
    std::vector<std::byte> cut(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(size));
    std::string message;
    const DecodeErrorKind kind = KindOfFailure(decoder, cut, &message);
    EXPECT_TRUE(kind == DecodeErrorKind::kTruncated || kind == DecodeErrorKind::kCorrupt)
        << size << ": " << message;
    EXPECT_NE(message.find("PNG"), std::string::npos) << message;
  }
}

TEST(PngBad, MissingIendFailsVerify) {
  std::vector<std::byte> png = GoodPng();
  png.resize(testing::FindPngChunk(png, "IEND"));
  PngDecoder decoder;
  EXPECT_THROW(decoder.Verify(png), DecodeError);
}

TEST(PngBad, BadCrc) {
  std::vector<std::byte> png = GoodPng();
  const std::size_t idat = testing::FindPngChunk(png, "IDAT");
  const std::size_t idat_size =
      static_cast<std::size_t>(png[idat + 2]) << 8 | std::size_t(png[idat + 3]);
  png[idat + 8 + idat_size] ^= std::byte{0x5A};  // the CRC itself
  PngDecoder decoder;
  std::string message;
  // A decode stops after the last row it needs, before the last IDAT's CRC; Verify reads
  // on through IEND.
  try {
    decoder.Verify(png);
    ADD_FAILURE() << "Verify passed a bad IDAT CRC";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.kind(), DecodeErrorKind::kCorrupt);
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  // Damaged data under the right CRC field is caught by the CRC or by zlib.
  png = GoodPng();
  png[idat + 8 + 3] ^= std::byte{0x5A};
  EXPECT_EQ(KindOfFailure(decoder, png, &message), DecodeErrorKind::kCorrupt);
  // In the header too.
  png = GoodPng();
  png[8 + 8 + 2] ^= std::byte{1};
  EXPECT_EQ(KindOfFailure(decoder, png, &message), DecodeErrorKind::kCorrupt) << message;
}

// A crop decode stops after the crop's last row, before the CRC of the IDAT
// chunk it read from, so a file with a damaged chunk decoded to pixels; every chunk's CRC
// is now checked before the decode (Verify read on through IEND already).
TEST(PngBad, ABadChunkCrcFailsEveryDecode) {
  for (const char* chunk : {"IDAT", "IEND", "IHDR"}) {
    SCOPED_TRACE(chunk);
    std::vector<std::byte> png = GoodPng();
    const std::size_t at = testing::FindPngChunk(png, chunk);
    const std::size_t size = static_cast<std::size_t>(png[at + 2]) << 8 | std::size_t(png[at + 3]);
    png[at + 8 + size] ^= std::byte{0x5A};  // the CRC field
    PngDecoder decoder;
    std::vector<std::uint8_t> out(std::size_t{4} * 4 * 3);
    try {
      decoder.DecodeInto(png, CropPlan{Rect{0, 0, 4, 4}}, PixelView::Interleaved(out.data(), 4, 4));
      ADD_FAILURE() << "decoded a PNG whose " << chunk << " CRC is wrong";
    } catch (const DecodeError& e) {
      EXPECT_EQ(e.kind(), DecodeErrorKind::kCorrupt);
      EXPECT_NE(std::string(e.what()).find("CRC"), std::string::npos) << e.what();
    }
  }
}

// A PNG whose signature is damaged (one byte changed, or the "\r\n" turned into
// "\n" by a text-mode copy) is named as such, not as "unknown data" or a PNG that is fine.
TEST(PngBad, ADamagedSignatureIsNamed) {
  const std::vector<std::byte> good = GoodPng();
  std::vector<std::byte> flipped = good;
  flipped[7] ^= std::byte{0x01};
  std::vector<std::byte> text_mode = good;
  text_mode.erase(text_mode.begin() + 4);  // "\r\n" -> "\n"
  // Damaged into a JPEG's first bytes: SniffNonJpeg has nothing to say (found by png_fuzz,
  // which crashed on the null it returned).
  std::vector<std::byte> jpeg_start = good;
  jpeg_start[0] = std::byte{0xFF};
  jpeg_start[1] = std::byte{0xD8};
  for (const auto& png : {flipped, text_mode, jpeg_start}) {
    EXPECT_TRUE(HasDamagedPngSignature(png));
    PngDecoder decoder;
    std::string message;
    EXPECT_EQ(KindOfFailure(decoder, png, &message), DecodeErrorKind::kCorrupt) << message;
    EXPECT_NE(message.find("damaged signature"), std::string::npos) << message;
  }
  for (const auto& png : {flipped, text_mode}) {
    const std::string sniffed = SniffNonJpeg(png);
    EXPECT_NE(sniffed.find("damaged signature"), std::string::npos) << sniffed;
  }
  EXPECT_FALSE(HasDamagedPngSignature(good));
  EXPECT_FALSE(HasDamagedPngSignature(testing::MakeGifBytes()));
  EXPECT_FALSE(HasDamagedPngSignature(testing::MakeTextBytes()));
}

TEST(PngBad, BadZlibStream) {
  PngDecoder decoder;
  std::string message;
  // A bad zlib header, and garbage in the deflate data; the CRCs are right.
  for (std::size_t at : {std::size_t{0}, std::size_t{5}}) {
    std::vector<std::byte> png = GoodPng();
    const std::size_t idat = testing::FindPngChunk(png, "IDAT");
    for (std::size_t i = 0; i < 6; ++i) png[idat + 8 + at + i] ^= std::byte{0xA5};
    testing::FixPngChunkCrc(png, idat);
    EXPECT_EQ(KindOfFailure(decoder, png, &message), DecodeErrorKind::kCorrupt) << message;
  }
}

TEST(PngBad, HugeDeclaredSizeIsRefusedFromTheHeader) {
  PngDecoder decoder(PngOptions{.max_pixels = 1 << 20});
  std::string message;
  for (std::uint32_t side :
       {std::uint32_t{1025}, std::uint32_t{100000}, std::uint32_t{0x7FFFFFFF}}) {
    std::vector<std::byte> png = GoodPng();
    for (int i = 0; i < 4; ++i) {
      png[16 + i] = std::byte((side >> (24 - 8 * i)) & 0xFF);  // width
      png[20 + i] = std::byte((side >> (24 - 8 * i)) & 0xFF);  // height
    }
    testing::FixPngChunkCrc(png, 8);
    EXPECT_EQ(KindOfFailure(decoder, png, &message), DecodeErrorKind::kTooLarge) << message;
  }
  // A zero width is malformed, not large.
  std::vector<std::byte> png = GoodPng();
  for (int i = 0; i < 4; ++i) png[16 + i] = std::byte{0};
  testing::FixPngChunkCrc(png, 8);
  EXPECT_EQ(KindOfFailure(decoder, png, &message), DecodeErrorKind::kCorrupt) << message;
}

TEST(PngBad, CropOutsideTheImage) {
  const TestPng png = MakeTestPng(PngKind::kRgb8, 10, 10);
  PngDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{4} * 4 * 3);
  for (const Rect& crop :
       {Rect{0, 0, 11, 10}, Rect{5, 5, 6, 5}, Rect{-1, 0, 5, 5}, Rect{0, 0, 0, 5}}) {
    try {
      decoder.DecodeInto(png.bytes, CropPlan{crop}, PixelView::Interleaved(out.data(), 4, 4));
      ADD_FAILURE() << "no error";
    } catch (const DecodeError& e) {
      EXPECT_EQ(e.kind(), DecodeErrorKind::kInvalidArgument);
    }
  }
}

TEST(PngBad, TheDecoderRecoversAfterEveryFailure) {
  PngDecoder decoder;
  std::vector<std::byte> bad = GoodPng();
  bad.resize(bad.size() / 2);
  const TestPng good = MakeTestPng(PngKind::kPalette8, 16, 16);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(KindOfFailure(decoder, bad), DecodeErrorKind::kTruncated);
    const CropPlan whole{Rect{0, 0, 16, 16}};
    EXPECT_EQ(Decode(decoder, good, whole, 16, 16), Reference(good, whole, 16, 16));
  }
}

}  // namespace
}  // namespace tilefeed::codecs
