#include "codecs/jpeg_coefficients.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codecs/coef_blocks.h"
#include "codecs/coef_huffman.h"
#include "tests/support/jpeg_maker.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::codecs {
namespace {

using testing::MakeJpeg;
using Encoding = testing::NamedEncoding;

std::vector<std::byte> MustPack(std::span<const std::byte> jpeg,
                                const CoefficientPackOptions& options = {}) {
  CoefficientPackResult result = PackCoefficients(jpeg, options);
  EXPECT_TRUE(result.packed) << result.reason;
  return std::move(result.record);
}

// Every coding the store writes, stored and Huffman groups, in groups of the default
// width, of one iMCU and wider than the image.
std::vector<std::pair<std::string, CoefficientPackOptions>> Layouts() {
  std::vector<std::pair<std::string, CoefficientPackOptions>> layouts;
  for (const auto& [name, coding] : {std::pair{"stored", CoefficientCoding::kNone},
                                     std::pair{"huff", CoefficientCoding::kHuffman}}) {
    CoefficientPackOptions o;
    o.coding = coding;
    layouts.push_back({name, o});
    o.group_pixels = 1;  // one iMCU per group
    layouts.push_back({std::string(name) + ", 1-iMCU groups", o});
    o.group_pixels = 100000;  // one group per band
    layouts.push_back({std::string(name) + ", one group", o});
  }
  CoefficientPackOptions o;
  o.group_pixels = 40;
  layouts.push_back({"stored, 40-px groups", o});
  return layouts;
}

// Crops touching every edge and corner, tiny and whole ones, and random ones.
std::vector<Rect> CropsFor(int w, int h, std::mt19937& rng, int random_count) {
  const int w3 = std::max(1, w / 3), h3 = std::max(1, h / 3);
  std::vector<Rect> crops = {{0, 0, w, h},
                             {0, 0, w3, h3},
                             {w - w3, h - h3, w3, h3},
                             {w - w3, 0, w3, h3},
                             {0, h - h3, w3, h3},
                             {0, h / 4, std::max(1, w / 2), std::max(1, h / 2)},
                             {w / 2, 0, w - w / 2, std::max(1, h / 5)},
                             {w / 3, h / 3, 1, 1},
                             {w - 1, h - 1, 1, 1}};
  for (int i = 0; i < random_count; ++i) {
    const int cw = std::uniform_int_distribution<int>(1, w)(rng);
    const int ch = std::uniform_int_distribution<int>(1, h)(rng);
    crops.push_back({std::uniform_int_distribution<int>(0, w - cw)(rng),
                     std::uniform_int_distribution<int>(0, h - ch)(rng), cw, ch});
  }
  return crops;
}

// Output sizes that select every DCT scale for a crop of cw x ch: 8/8 (output as large
// as the crop), then 4/8, 2/8 and 1/8 (output at most 1/2, 1/4, 1/8 of the crop).
std::vector<std::pair<int, int>> OutputsFor(int cw, int ch, const JpegOptions& options) {
  std::vector<std::pair<int, int>> outs = {{cw, ch}, {std::min(cw, 7), std::min(ch, 5)}};
  const int divisors[] = {2, 4, 8, 3, 5, 7};
  for (int d : divisors) {
    if (options.decode_scaling == DecodeScaling::kExact && (d == 3 || d == 5 || d == 7)) continue;
    if (cw >= d && ch >= d) outs.push_back({cw / d, ch / d});
  }
  return outs;
}

// Decodes every crop at every scale both ways (the store also with its portable kernels,
// and from unpacked coefficients) and requires equal bytes.
void ExpectSamePixels(const std::vector<std::byte>& jpeg, const std::vector<std::byte>& record,
                      const JpegOptions& options, int random_crops, std::uint32_t seed) {
  JpegDecoder reference(options);
  CoefficientDecoder decoder(options);
  CoefficientDecoder portable(options, /*portable_kernels=*/true);  // as CPUs without VBMI2
  const ImageInfo info = reference.ReadInfo(jpeg);
  const ImageInfo stored = ReadCoefficientInfo(record);
  ASSERT_EQ(stored.width, info.width);
  ASSERT_EQ(stored.height, info.height);
  ASSERT_EQ(stored.subsampling, info.subsampling);
  // The ceiling's decode (codec_bench) must give the same pixels from unpacked blocks.
  const UnpackedCoefficients unpacked = UnpackCoefficients(record);
  std::mt19937 rng(seed);
  for (const Rect& crop : CropsFor(info.width, info.height, rng, random_crops)) {
    for (auto [ow, oh] : OutputsFor(crop.width, crop.height, options)) {
      for (bool flip : {false, true}) {
        SCOPED_TRACE("crop " + std::to_string(crop.width) + "x" + std::to_string(crop.height) +
                     "+" + std::to_string(crop.x) + "+" + std::to_string(crop.y) + " -> " +
                     std::to_string(ow) + "x" + std::to_string(oh));
        std::vector<std::uint8_t> want(std::size_t(ow) * oh * 3), got(want.size(), 7);
        const CropPlan plan{crop, flip};
        const DecodeReport a =
            reference.DecodeInto(jpeg, plan, PixelView::Interleaved(want.data(), ow, oh));
        CoefficientTimes times;
        const DecodeReport b =
            decoder.DecodeInto(record, plan, PixelView::Interleaved(got.data(), ow, oh), &times);
        ASSERT_EQ(a.scale_eighths, b.scale_eighths);
        ASSERT_TRUE(want == got);
        std::fill(got.begin(), got.end(), 7);
        portable.DecodeInto(record, plan, PixelView::Interleaved(got.data(), ow, oh));
        ASSERT_TRUE(want == got) << "portable kernels";
        std::fill(got.begin(), got.end(), 7);
        decoder.DecodeUnpackedInto(unpacked, plan, PixelView::Interleaved(got.data(), ow, oh));
        ASSERT_TRUE(want == got) << "from unpacked coefficients";
      }
    }
  }
}

TEST(CoefficientStore, SamePixelsAsTheJpegDecodeForEveryEncodingCropAndScale) {
  for (const Encoding& e : testing::CommonEncodings(90, true)) {
    for (auto [w, h] : {std::pair{333, 257}, std::pair{97, 61}, std::pair{1, 1}, std::pair{16, 16},
                        std::pair{129, 33}}) {
      const auto jpeg = MakeJpeg(w, h, e.options, w * 7 + h, e.channels);
      for (const auto& [layout, options] : Layouts()) {
        SCOPED_TRACE(std::string(e.name) + " " + std::to_string(w) + "x" + std::to_string(h) + " " +
                     layout);
        const auto record = MustPack(jpeg, options);
        ExpectSamePixels(jpeg, record, {}, 6, static_cast<std::uint32_t>(w + h));
      }
    }
  }
}

TEST(CoefficientStore, SamePixelsWithEighthScalesAndFastPaths) {
  JpegOptions options;
  options.decode_scaling = DecodeScaling::kFast;
  JpegOptions fast;
  fast.fast_dct = true;
  fast.fast_upsample = true;
  CoefficientPackOptions huffman;
  huffman.coding = CoefficientCoding::kHuffman;
  for (const Encoding& e : testing::CommonEncodings(80, false)) {
    SCOPED_TRACE(e.name);
    const auto jpeg = MakeJpeg(211, 150, e.options, 3, e.channels);
    for (const CoefficientPackOptions& layout : {CoefficientPackOptions{}, huffman}) {
      SCOPED_TRACE("coding " + std::to_string(static_cast<int>(layout.coding)));
      const auto record = MustPack(jpeg, layout);
      ExpectSamePixels(jpeg, record, options, 4, 11);
      ExpectSamePixels(jpeg, record, fast, 4, 12);
    }
  }
}

TEST(CoefficientStore, ManyRandomCropsOfALargeImage) {
  EncodeOptions o;
  o.quality = 95;
  const auto jpeg = MakeJpeg(500, 375, o, 5);
  for (const auto& [layout, options] : Layouts()) {
    SCOPED_TRACE(layout);
    ExpectSamePixels(jpeg, MustPack(jpeg, options), {}, 25, 99);
  }
}

TEST(CoefficientStore, HighQualityNeedsWideValues) {
  EncodeOptions o;
  o.quality = 100;
  const auto jpeg = MakeJpeg(120, 90, o, 8);
  for (const auto& [layout, options] : Layouts()) {
    SCOPED_TRACE(layout);
    ExpectSamePixels(jpeg, MustPack(jpeg, options), {}, 4, 5);
  }
}

TEST(CoefficientStore, HuffmanGroupsAreSmallerThanStoredOnes) {
  EncodeOptions o;
  o.quality = 90;
  const auto jpeg = MakeJpeg(333, 257, o, 21);
  CoefficientPackOptions stored, huffman;
  huffman.coding = CoefficientCoding::kHuffman;
  EXPECT_LT(MustPack(jpeg, huffman).size(), MustPack(jpeg, stored).size());
}

TEST(CoefficientStore, OptionsOutOfRangeAreRefusedUpFront) {
  const auto jpeg = MakeJpeg(16, 16, {}, 1);
  CoefficientPackOptions o;
  o.coding = static_cast<CoefficientCoding>(1);  // retired (LZ4 groups)
  EXPECT_THROW(PackCoefficients(jpeg, o), std::invalid_argument);
  o = {};
  o.group_pixels = 0;
  EXPECT_THROW(PackCoefficients(jpeg, o), std::invalid_argument);
}

TEST(CoefficientStore, RefusesWhatItCannotStore) {
  EXPECT_EQ(PackCoefficients(testing::MakePngBytes()).refusal, DecodeErrorKind::kNotJpeg);
  EXPECT_FALSE(PackCoefficients(testing::MakeTextBytes()).packed);
  auto jpeg = MakeJpeg(64, 64, {}, 2);
  jpeg.resize(jpeg.size() / 2);
  const CoefficientPackResult truncated = PackCoefficients(jpeg);
  EXPECT_FALSE(truncated.packed);
  EXPECT_FALSE(truncated.reason.empty());
  CoefficientPackOptions small;
  small.max_pixels = 100;
  EXPECT_EQ(PackCoefficients(MakeJpeg(64, 64, {}, 2), small).refusal, DecodeErrorKind::kTooLarge);
}

TEST(CoefficientStore, ReadsTheHeaderAlone) {
  EncodeOptions o;
  o.subsampling = Subsampling::k422;
  const auto record = MustPack(MakeJpeg(77, 41, o, 4));
  EXPECT_TRUE(LooksLikeCoefficients(record));
  const ImageInfo info = ReadCoefficientInfo(record);
  EXPECT_EQ(info.width, 77);
  EXPECT_EQ(info.height, 41);
  EXPECT_EQ(info.components, 3);
  EXPECT_EQ(info.subsampling, Subsampling::k422);
  EXPECT_EQ(info.mcu_width, 16);
  EXPECT_EQ(info.mcu_height, 8);
  try {
    ReadCoefficientInfo(record, 77 * 41 - 1);
    FAIL() << "no pixel limit";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.kind(), DecodeErrorKind::kTooLarge);
  }
}

// Every truncation and many single-byte changes of a record are reported, never
// crash (the ASan build runs this too).
void ExpectDamageReported(const std::vector<std::byte>& record) {
  CoefficientDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{32} * 32 * 3);
  const CropPlan plan{{10, 10, 120, 80}, false};
  auto decode = [&](std::span<const std::byte> bytes) {
    try {
      decoder.DecodeInto(bytes, plan, PixelView::Interleaved(out.data(), 32, 32));
    } catch (const DecodeError& e) {
      EXPECT_NE(e.kind(), DecodeErrorKind::kInvalidArgument) << e.what();
    }
  };
  for (std::size_t n = 0; n < record.size(); n += 1 + n / 16) {
    SCOPED_TRACE(n);
    decode(std::span(record).first(n));
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 400; ++i) {
    auto damaged = record;
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, record.size() - 1)(rng);
    damaged[at] = std::byte(std::uniform_int_distribution<int>(0, 255)(rng));
    decode(damaged);
    try {
      CheckCoefficients(damaged);
    } catch (const DecodeError& e) {
      // A changed version or coding byte may name a retired layout instead.
      const bool retired = std::string(e.what()).find(", retired; repack it") != std::string::npos;
      EXPECT_EQ(e.kind(), retired ? DecodeErrorKind::kUnsupported : DecodeErrorKind::kCorrupt)
          << e.what();
    }
  }
  // And the decoder is still good afterwards.
  std::vector<std::uint8_t> want(out.size());
  const auto jpeg = MakeJpeg(150, 100, {}, 6);
  JpegDecoder reference;
  reference.DecodeInto(jpeg, plan, PixelView::Interleaved(want.data(), 32, 32));
  decoder.DecodeInto(record, plan, PixelView::Interleaved(out.data(), 32, 32));
  EXPECT_TRUE(want == out);
}

// A record of a layout earlier builds wrote, crafted from a stored one by its header bytes
// (docs/shard-format.md): version 1, or version 2 with LZ4 (coding 1) or zstd (coding 2)
// groups. Every reader refuses it with one line that names the layout and the repack.
TEST(CoefficientStore, RetiredLayoutsAreRefusedByName) {
  const std::vector<std::byte> stored = MustPack(MakeJpeg(150, 100, {}, 6));
  const std::size_t coding_at = 16 + 3 * std::to_integer<std::size_t>(stored[5]) +
                                128 * std::to_integer<std::size_t>(stored[12]) + 4;
  ASSERT_EQ(std::to_integer<int>(stored[4]), 2);
  ASSERT_EQ(std::to_integer<int>(stored[coding_at]), 0);
  const struct {
    std::size_t at;
    int value;
    const char* message;
  } cases[] = {
      {4, 1,
       "coefficient layout v1, retired; repack it: tilefeed-pack SRC OUT --codec "
       "coefficients-fast"},
      {coding_at, 1,
       "coefficient layout v2-lz4, retired; repack it: tilefeed-pack SRC OUT "
       "--codec coefficients-fast"},
      {coding_at, 2,
       "coefficient layout v2-zstd, retired; repack it: tilefeed-pack SRC OUT "
       "--codec coefficients-small"},
  };
  CoefficientDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{32} * 32 * 3);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.message);
    std::vector<std::byte> record = stored;
    record[c.at] = std::byte(c.value);
    const std::function<void()> readers[] = {
        [&] { ReadCoefficientInfo(record); }, [&] { CheckCoefficients(record); },
        [&] { UnpackCoefficients(record); },
        [&] {
          decoder.DecodeInto(record, {{0, 0, 150, 100}, false},
                             PixelView::Interleaved(out.data(), 32, 32));
        }};
    for (const auto& read : readers) {
      try {
        read();
        ADD_FAILURE() << "a retired record was read";
      } catch (const DecodeError& e) {
        EXPECT_EQ(e.kind(), DecodeErrorKind::kUnsupported);
        EXPECT_EQ(std::string(e.what()), c.message);
      }
    }
  }
}

TEST(CoefficientStore, DamagedRecordsAreDecodeErrors) {
  for (const auto& [layout, options] : Layouts()) {
    SCOPED_TRACE(layout);
    ExpectDamageReported(MustPack(MakeJpeg(150, 100, {}, 6), options));
  }
}

// A version-2 Huffman record's parts (docs/shard-format.md), for crafting bad ones.
struct HuffRecord {
  std::vector<std::byte> bytes;
  std::size_t group_table = 0, tables = 0, table_bytes = 0, groups = 0;
};

std::size_t Le32At(const std::vector<std::byte>& b, std::size_t i) {
  std::size_t v = 0;
  for (int k = 3; k >= 0; --k) v = v << 8 | std::to_integer<std::size_t>(b[i + std::size_t(k)]);
  return v;
}

void PutLe32At(std::vector<std::byte>& b, std::size_t i, std::size_t v) {
  for (std::size_t k = 0; k < 4; ++k) b[i + k] = std::byte((v >> (8 * k)) & 0xFF);
}

HuffRecord HuffRecordOf(std::vector<std::byte> record) {
  HuffRecord r;
  const std::size_t n = std::to_integer<std::size_t>(record[5]);
  const std::size_t quant = std::to_integer<std::size_t>(record[12]);
  const std::size_t at = 16 + 3 * n + 128 * quant;
  EXPECT_EQ(std::to_integer<int>(record[at + 4]), 3);  // coding 3
  r.group_table = at + 12;
  const std::size_t entries = Le32At(record, at) * Le32At(record, at + 8);
  r.table_bytes = Le32At(record, r.group_table + 8 * entries);
  r.tables = r.group_table + 8 * entries + 4;
  r.groups = r.tables + r.table_bytes;
  r.bytes = std::move(record);
  return r;
}

// The record with its tables replaced by `tables` (and their size field set).
std::vector<std::byte> WithTables(const HuffRecord& r, const std::vector<std::uint8_t>& tables) {
  std::vector<std::byte> out(r.bytes.begin(), r.bytes.begin() + std::ptrdiff_t(r.tables));
  PutLe32At(out, r.tables - 4, tables.size());
  for (std::uint8_t t : tables) out.push_back(std::byte(t));
  out.insert(out.end(), r.bytes.begin() + std::ptrdiff_t(r.groups), r.bytes.end());
  return out;
}

// CheckCoefficients' message for `record` ("" when it passes); it must be kCorrupt.
std::string CheckMessage(const std::vector<std::byte>& record) {
  try {
    CheckCoefficients(record);
    return "";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.kind(), DecodeErrorKind::kCorrupt) << e.what();
    return e.what();
  }
}

TEST(CoefficientStore, MalformedHuffmanTablesAndStreamsAreRefusedWithAReason) {
  CoefficientPackOptions o;
  o.coding = CoefficientCoding::kHuffman;
  const HuffRecord r = HuffRecordOf(MustPack(MakeJpeg(150, 100, {}, 6), o));  // 2 x 3 tables
  ASSERT_EQ(CheckMessage(r.bytes), "");
  // A first table as given, then 5 constant ones (mode 0, byte 0).
  const auto first_then_constants = [&](std::vector<std::uint8_t> tables) {
    for (int i = 1; i < 6; ++i) tables.insert(tables.end(), {0, 0});
    return WithTables(r, tables);
  };
  const std::pair<std::vector<std::uint8_t>, std::string> cases[] = {
      {{2, 0}, "unknown Huffman table mode"},
      {{1, 1, 0x1C}, "Huffman code length over 11"},
      {{1, 1, 0x12}, "Huffman code lengths do not fill the code space"},
      {{1, 0, 0x01}, "Huffman table with fewer than two codes"},
      {{1, 0, 0x11}, "Huffman table has a code length past its last byte value"},
      {{1, 2, 0x11, 0x00}, "Huffman table's last byte value has no code"},
  };
  for (const auto& [first, message] : cases) {
    EXPECT_EQ(CheckMessage(first_then_constants(first)),
              "corrupt coefficient record: Huffman tables: " + message);
  }
  EXPECT_EQ(CheckMessage(WithTables(r, {1, 1, 0x11, 0, 0})),
            "corrupt coefficient record: Huffman tables: Huffman table ends early");
  std::vector<std::uint8_t> tables;
  for (std::size_t i = r.tables; i < r.groups; ++i)
    tables.push_back(std::to_integer<std::uint8_t>(r.bytes[i]));
  tables.push_back(0);
  EXPECT_EQ(CheckMessage(WithTables(r, tables)),
            "corrupt coefficient record: Huffman tables: bytes left over");
  auto bad = r.bytes;
  PutLe32At(bad, r.tables - 4, bad.size());
  EXPECT_EQ(CheckMessage(bad), "corrupt coefficient record: Huffman tables end early");
  // The first group's stream sizes overrun it.
  bad = r.bytes;
  PutLe32At(bad, r.groups, 0xFFFFFF00u);
  EXPECT_EQ(CheckMessage(bad),
            "corrupt coefficient record: band 0 group 0: Huffman stream sizes exceed the group");
  // A byte after the first group's last stream: its codes end before the stream does.
  bad = r.bytes;
  const std::size_t first_end = r.groups + Le32At(bad, r.group_table);
  bad.insert(bad.begin() + std::ptrdiff_t(first_end), std::byte{0});
  PutLe32At(bad, r.group_table, Le32At(bad, r.group_table) + 1);
  EXPECT_EQ(CheckMessage(bad),
            "corrupt coefficient record: band 0 group 0: Huffman stream does not end where its "
            "codes end");
  // And decoding refuses what checking refuses.
  CoefficientDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{16} * 16 * 3);
  EXPECT_THROW(
      decoder.DecodeInto(bad, {{0, 0, 40, 40}, false}, PixelView::Interleaved(out.data(), 16, 16)),
      DecodeError);
}

TEST(CoefficientStore, CropOutsideTheImageIsAnInvalidArgument) {
  const auto record = MustPack(MakeJpeg(40, 30, {}, 6));
  CoefficientDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{8} * 8 * 3);
  try {
    decoder.DecodeInto(record, {{30, 0, 20, 10}, false}, PixelView::Interleaved(out.data(), 8, 8));
    FAIL() << "accepted a crop outside the image";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.kind(), DecodeErrorKind::kInvalidArgument);
  }
}

// The mask bit count the v2 checks and unpack use: the POPCNT path (where the CPU has it)
// and the portable one both give the count of a bit-by-bit loop, for every length.
TEST(CoefficientStore, MaskBitCountsAgreeOnTheHardwareAndPortablePaths) {
  std::mt19937_64 rng(31);
  std::vector<std::uint8_t> masks(std::size_t{8} * 67);
  for (int fill = 0; fill < 4; ++fill) {  // zero, sparse, random, all ones
    for (std::size_t i = 0; i < masks.size(); ++i) {
      const auto r = static_cast<std::uint8_t>(rng());
      masks[i] = fill == 0 ? 0 : fill == 1 ? r & (r >> 3) & 0x11 : fill == 2 ? r : 0xFF;
    }
    std::size_t want = 0;
    for (std::size_t blocks = 0; blocks <= 67; ++blocks) {
      SCOPED_TRACE("fill " + std::to_string(fill) + ", " + std::to_string(blocks) + " blocks");
      EXPECT_EQ(detail::CountMaskBits(masks.data(), blocks), want);
      EXPECT_EQ(detail::CountMaskBits(masks.data(), blocks, true), want);
      if (blocks == 67) break;
      for (int bit = 0; bit < 64; ++bit) want += (masks[8 * blocks + bit / 8] >> (bit % 8)) & 1u;
    }
  }
}

// The v2 block unpack, on the AVX-512 path (where the CPU has it) and the portable one,
// against blocks built here coefficient by coefficient: masks from empty to full (all 63
// AC positions), values of every byte including the 0x80 escape to the wide stream. The
// value stream ends exactly at its buffer's end, so a read past it shows under ASan.
TEST(CoefficientStore, MaskedBlockUnpackGivesTheBlocksOnBothPaths) {
  std::mt19937_64 rng(7);
  constexpr int kBlocks = 300;
  std::vector<CoefficientBlock> want(kBlocks);
  std::vector<std::uint8_t> dc, masks, values, wide;
  std::uint16_t dc_value = 0;
  for (int b = 0; b < kBlocks; ++b) {
    const int density = b % 5;  // empty, sparse, half, dense, full
    std::uint64_t mask = 0;
    for (int z = 1; z < 64; ++z) {
      const unsigned r = static_cast<unsigned>(rng() % 8);
      if (density == 4 || (density == 1 && r == 0) || (density == 2 && r < 4) ||
          (density == 3 && r < 7)) {
        mask |= std::uint64_t{1} << z;
      }
    }
    const auto diff = static_cast<std::uint16_t>(rng());
    dc_value = static_cast<std::uint16_t>(dc_value + diff);
    dc.push_back(static_cast<std::uint8_t>(diff));
    dc.push_back(static_cast<std::uint8_t>(diff >> 8));
    for (int k = 0; k < 8; ++k) masks.push_back(static_cast<std::uint8_t>(mask >> (8 * k)));
    CoefficientBlock& block = want[std::size_t(b)];
    std::fill(std::begin(block.c), std::end(block.c), std::int16_t{0});
    block.c[0] = static_cast<std::int16_t>(dc_value);
    for (int z = 1; z < 64; ++z) {
      if (((mask >> z) & 1) == 0) continue;
      auto byte = static_cast<std::uint8_t>(rng());
      if (rng() % 6 == 0) byte = 0x80;
      values.push_back(byte);
      auto value = static_cast<std::int16_t>(byte >= 128 ? byte - 256 : byte);
      if (byte == 0x80) {
        value = static_cast<std::int16_t>(rng());
        wide.push_back(static_cast<std::uint8_t>(value));
        wide.push_back(static_cast<std::uint8_t>(static_cast<std::uint16_t>(value) >> 8));
      }
      block.c[detail::kNatural[std::size_t(z)]] = value;
    }
  }
  for (const bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable" : "hardware");
    // Exactly-sized copies: the last block's values end where the allocation does.
    const std::vector<std::uint8_t> v(values.begin(), values.end()), w(wide.begin(), wide.end());
    detail::MaskedStreams s{dc.data(), masks.data(), v.data(), w.data()};
    std::vector<CoefficientBlock> got(kBlocks);
    std::uint16_t dc_out = 0;
    int done = 0;
    for (const int count : {1, 0, 7, 64, 228}) {  // several calls, as the rows of a group
      detail::UnpackMaskedBlocks(s, count, dc_out, got.data() + done, portable);
      done += count;
    }
    ASSERT_EQ(done, kBlocks);
    EXPECT_EQ(s.dc, dc.data() + dc.size());
    EXPECT_EQ(s.masks, masks.data() + masks.size());
    EXPECT_EQ(s.values, v.data() + v.size());
    EXPECT_EQ(s.wide, w.data() + w.size());
    EXPECT_EQ(dc_out, dc_value);
    for (int b = 0; b < kBlocks; ++b) {
      ASSERT_TRUE(std::equal(std::begin(got[std::size_t(b)].c), std::end(got[std::size_t(b)].c),
                             std::begin(want[std::size_t(b)].c)))
          << "block " << b;
    }
  }
}

// The Huffman coding round trip with the value lookups built both ways (AVX-512 gathers,
// where the CPU has them, and the scalar loop): random groups of skewed bytes, codes of 1
// to 11 bits, and a record whose second class has one value byte only (a table of no
// bits, three bytes per lookup) come back byte for byte.
TEST(CoefficientStore, HuffmanGroupsDecodeAlikeWithEitherLookupBuild) {
  std::mt19937_64 rng(5);
  const auto skewed = [&rng](int spread) {  // geometric-ish: small values most often
    int v = 0;
    while (v < 255 && static_cast<int>(rng() % 8) < spread) ++v;
    return static_cast<std::uint8_t>(rng() % 2 == 0 ? v : 255 - v);
  };
  for (const bool constant_second : {false, true}) {
    SCOPED_TRACE(constant_second ? "constant second class" : "all tables coded");
    std::vector<std::vector<std::uint8_t>> groups;
    std::vector<detail::HuffGroupShape> shapes;
    for (int g = 0; g < 12; ++g) {
      const std::size_t blocks = 8 + rng() % 60;
      const detail::HuffGroupShape full{blocks, blocks / 2 + 1};
      std::vector<std::uint8_t> raw;
      for (std::size_t i = 0; i < 2 * full.blocks; ++i) raw.push_back(skewed(6));
      std::size_t first_values = 0, other_values = 0;
      for (std::size_t b = 0; b < full.blocks; ++b) {
        std::uint64_t mask = 0;
        for (int z = 1; z < 64; ++z) mask |= std::uint64_t{rng() % 9 == 0} << z;
        (b < full.first_blocks ? first_values : other_values) += std::size_t(std::popcount(mask));
        for (int k = 0; k < 8; ++k) raw.push_back(static_cast<std::uint8_t>(mask >> (8 * k)));
      }
      for (std::size_t i = 0; i < first_values; ++i) raw.push_back(skewed(5));
      for (std::size_t i = 0; i < other_values + 4; ++i) {  // the rest, a wide value included
        raw.push_back(constant_second ? std::uint8_t{7} : skewed(3));
      }
      groups.push_back(std::move(raw));
      shapes.push_back(full);
    }
    detail::HuffEncoder encoder(2);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      encoder.Count(groups[g].data(), groups[g].size(), shapes[g]);
    }
    encoder.Finish();
    std::vector<std::byte> tables;
    encoder.AppendTables(tables);
    for (const bool portable : {false, true}) {
      SCOPED_TRACE(portable ? "portable" : "hardware");
      detail::HuffDecoder decoder;
      const char* why = "";
      const auto* t = reinterpret_cast<const std::uint8_t*>(tables.data());
      ASSERT_EQ(decoder.ReadTables(t, tables.size(), 2, &why, portable), tables.size()) << why;
      for (std::size_t g = 0; g < groups.size(); ++g) {
        std::vector<std::byte> coded;
        encoder.AppendGroup(groups[g].data(), groups[g].size(), shapes[g], coded);
        std::vector<std::uint8_t> out(groups[g].size());
        const char* bad = decoder.DecodeGroup(reinterpret_cast<const std::uint8_t*>(coded.data()),
                                              coded.size(), out.data(), out.size(), shapes[g]);
        ASSERT_EQ(bad, nullptr) << "group " << g << ": " << bad;
        EXPECT_EQ(out, groups[g]) << "group " << g;
      }
    }
  }
}

// The escape count the v2 group checks and crop steps use, on the AVX-512 path (where the
// CPU has it) and the portable one, against a byte loop: every length to 200 at every
// offset in a word, bytes near 0x80 (0x7F, 0x80, 0x81, 0x00, 0xFF) most often, the last one
// at the end of its buffer.
TEST(CoefficientStore, EscapeCountsAgreeOnBothPaths) {
  std::mt19937_64 rng(19);
  const std::uint8_t near[] = {0x7F, 0x80, 0x81, 0x00, 0xFF};
  for (std::size_t n = 0; n <= 200; ++n) {
    for (std::size_t offset = 0; offset < 8; ++offset) {
      std::vector<std::uint8_t> bytes(offset + n);
      for (auto& b : bytes) b = rng() % 3 == 0 ? static_cast<std::uint8_t>(rng()) : near[rng() % 5];
      std::size_t want = 0;
      for (std::size_t i = offset; i < bytes.size(); ++i) want += bytes[i] == 0x80 ? 1u : 0u;
      ASSERT_EQ(detail::CountEscapes(bytes.data() + offset, n), want) << n << " at " << offset;
      ASSERT_EQ(detail::CountEscapes(bytes.data() + offset, n, true), want)
          << n << " at " << offset;
    }
  }
}

}  // namespace
}  // namespace tilefeed::codecs
