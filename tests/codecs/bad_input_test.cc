// The bad-input suite: thousands of broken files in many kinds, generated here. Each must
// give its documented result — a DecodeError whose kind and text say what is wrong, or,
// for the kinds documented as decodable, pixels — and none may crash (CI runs this under
// ASan+UBSan), hang (every decode is timed against a generous bound) or allocate beyond
// the pixel limit (the limit is checked from the header before any allocation).

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codecs/raw.h"
#include "tests/support/jpeg_maker.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::codecs {
namespace {

using Bytes = std::vector<std::byte>;

// What a kind of broken file must give.
enum class Expect {
  kError,          // a DecodeError
  kErrorOrPixels,  // either; damage that may land in data the crop does not need
  kPixels,         // decodes (a valid if unusual file)
};

struct Kind {
  std::string name;
  Expect expect;
  std::vector<DecodeErrorKind> allowed;  // for errors; empty = any kind
  std::function<Bytes(std::mt19937&, int)> make;
};

Bytes Baseline(int seed, bool progressive = false, int restart = 0) {
  EncodeOptions o;
  o.quality = 85;
  o.progressive = progressive;
  o.restart_interval = restart;
  return testing::MakeJpeg(96 + seed % 64, 80 + seed % 48, o, static_cast<std::uint64_t>(seed));
}

// Offset of the first marker `code` (0xFF code), or 0.
std::size_t FindMarker(const Bytes& b, int code) {
  for (std::size_t i = 2; i + 1 < b.size(); ++i) {
    if (b[i] == std::byte{0xFF} && b[i + 1] == std::byte(code)) return i;
  }
  return 0;
}

std::size_t ScanStart(const Bytes& b) {
  const std::size_t sos = FindMarker(b, 0xDA);
  return sos + 2 + ((std::size_t(b[sos + 2]) << 8) | std::size_t(b[sos + 3]));
}

void PatchSofField(Bytes& b, std::size_t field, int value) {  // field offset after FF Cx
  std::size_t sof = FindMarker(b, 0xC0);
  if (sof == 0) sof = FindMarker(b, 0xC2);
  b[sof + field] = std::byte(value >> 8);
  b[sof + field + 1] = std::byte(value & 0xFF);
}

using K = DecodeErrorKind;

// Files cut short, and bit flips or overwritten bytes in headers or entropy data.
void AddDamagedFiles(std::vector<Kind>& kinds) {
  kinds.push_back({"truncated baseline",
                   Expect::kError,
                   {K::kTruncated, K::kCorrupt, K::kNotJpeg},
                   [](std::mt19937& rng, int i) {
                     Bytes b = Baseline(i);
                     b.resize(rng() % (b.size() - 2));
                     return b;
                   }});
  kinds.push_back({"truncated progressive",
                   Expect::kError,
                   {K::kTruncated, K::kCorrupt, K::kNotJpeg},
                   [](std::mt19937& rng, int i) {
                     Bytes b = Baseline(i, true);
                     b.resize(rng() % (b.size() - 2));
                     return b;
                   }});
  kinds.push_back(
      {"bit flips in headers", Expect::kErrorOrPixels, {}, [](std::mt19937& rng, int i) {
         Bytes b = Baseline(i);
         const std::size_t end = ScanStart(b);
         for (int k = 0; k < 1 + i % 4; ++k) {
           b[2 + rng() % (end - 2)] ^= std::byte(1u << (rng() % 8));
         }
         return b;
       }});
  kinds.push_back(
      {"bit flips in entropy data", Expect::kErrorOrPixels, {}, [](std::mt19937& rng, int i) {
         Bytes b = Baseline(i);
         const std::size_t start = ScanStart(b);
         for (int k = 0; k < 1 + i % 8; ++k) {
           b[start + rng() % (b.size() - start - 2)] ^= std::byte(1u << (rng() % 8));
         }
         return b;
       }});
  kinds.push_back(
      {"overwritten entropy data", Expect::kErrorOrPixels, {}, [](std::mt19937& rng, int i) {
         Bytes b = Baseline(i);
         const std::size_t start = ScanStart(b);
         const std::size_t at = start + rng() % (b.size() - start - 40);
         for (std::size_t k = 0; k < 32; ++k) b[at + k] = std::byte(rng());
         return b;
       }});
}

// Headers that declare what the decoder must refuse: sizes past the limit or zero, too many
// scans, precisions and processes libjpeg-turbo does not decode.
void AddBadHeaders(std::vector<Kind>& kinds) {
  kinds.push_back(
      {"huge declared size", Expect::kError, {K::kTooLarge}, [](std::mt19937& rng, int i) {
         Bytes b = Baseline(i);
         PatchSofField(b, 5, 20000 + static_cast<int>(rng() % 45000));  // height
         PatchSofField(b, 7, 20000 + static_cast<int>(rng() % 45000));  // width
         return b;
       }});
  kinds.push_back({"zero width or height", Expect::kError, {K::kCorrupt}, [](std::mt19937&, int i) {
                     Bytes b = Baseline(i);
                     PatchSofField(b, i % 2 == 0 ? 5 : 7, 0);
                     return b;
                   }});
  kinds.push_back({"absurd progressive scan count",
                   Expect::kError,
                   {K::kTooManyScans, K::kCorrupt},
                   [](std::mt19937&, int i) {
                     const Bytes b = Baseline(i, true);
                     std::size_t last = 0;
                     for (std::size_t k = 2; k + 1 < b.size(); ++k) {
                       if (b[k] == std::byte{0xFF} && b[k + 1] == std::byte{0xDA}) last = k;
                     }
                     Bytes out(b.begin(), b.end() - 2);
                     for (int r = 0; r < 150; ++r)
                       out.insert(out.end(), b.begin() + static_cast<std::ptrdiff_t>(last),
                                  b.end() - 2);
                     out.push_back(std::byte{0xFF});
                     out.push_back(std::byte{0xD9});
                     return out;
                   }});
  kinds.push_back({"12-bit precision", Expect::kError, {K::kUnsupported}, [](std::mt19937&, int i) {
                     Bytes b = Baseline(i);
                     b[FindMarker(b, 0xC0) + 4] = std::byte{12};
                     return b;
                   }});
  kinds.push_back({"lossless (SOF3)", Expect::kError, {K::kUnsupported}, [](std::mt19937&, int i) {
                     Bytes b = Baseline(i);
                     b[FindMarker(b, 0xC0) + 1] = std::byte{0xC3};
                     return b;
                   }});
  kinds.push_back({"hierarchical (SOF5)",
                   Expect::kError,
                   {K::kUnsupported, K::kCorrupt},
                   [](std::mt19937&, int i) {
                     Bytes b = Baseline(i);
                     b[FindMarker(b, 0xC0) + 1] = std::byte{0xC5};
                     return b;
                   }});
}

// Valid arithmetic-coded JPEGs, and files that are not JPEGs at all.
void AddOtherFormats(std::vector<Kind>& kinds) {
  kinds.push_back({"arithmetic coded (valid)", Expect::kPixels, {}, [](std::mt19937&, int i) {
                     EncodeOptions o;
                     o.arithmetic = true;
                     o.progressive = i % 2 == 1;
                     return testing::MakeJpeg(64 + i % 32, 48 + i % 16, o, i);
                   }});
  kinds.push_back({"PNG named .JPEG", Expect::kError, {K::kNotJpeg}, [](std::mt19937&, int i) {
                     return testing::MakePngBytes(8 + i % 8, 8);
                   }});
  kinds.push_back({"GIF named .JPEG", Expect::kError, {K::kNotJpeg}, [](std::mt19937&, int) {
                     return testing::MakeGifBytes();
                   }});
  kinds.push_back({"BMP named .JPEG", Expect::kError, {K::kNotJpeg}, [](std::mt19937&, int) {
                     return testing::MakeBmpBytes();
                   }});
  kinds.push_back(
      {"zero bytes", Expect::kError, {K::kNotJpeg}, [](std::mt19937&, int) { return Bytes{}; }});
  kinds.push_back({"text", Expect::kError, {K::kNotJpeg}, [](std::mt19937&, int) {
                     return testing::MakeTextBytes();
                   }});
  kinds.push_back({"random garbage", Expect::kError, {K::kNotJpeg}, [](std::mt19937& rng, int i) {
                     Bytes b(1 + rng() % 4096);
                     for (auto& x : b) x = std::byte(rng());
                     if (b[0] == std::byte{0xFF}) b[0] = std::byte{0};
                     (void)i;
                     return b;
                   }});
}

// Broken marker structure: garbage after SOI, no EOI, segment lengths past the end, wrong
// restart markers; and a truncated CMYK file.
void AddBrokenStructure(std::vector<Kind>& kinds) {
  kinds.push_back({"SOI then garbage",
                   Expect::kError,
                   {K::kCorrupt, K::kTruncated, K::kUnsupported},
                   [](std::mt19937& rng, int) {
                     Bytes b = {std::byte{0xFF}, std::byte{0xD8}};
                     for (int k = 0; k < 256; ++k) b.push_back(std::byte(rng()));
                     return b;
                   }});
  kinds.push_back({"no EOI marker", Expect::kErrorOrPixels, {}, [](std::mt19937&, int i) {
                     Bytes b = Baseline(i);
                     b.resize(b.size() - 2);
                     return b;
                   }});
  kinds.push_back({"segment length past the end",
                   Expect::kError,
                   {K::kTruncated, K::kCorrupt},
                   [](std::mt19937& rng, int i) {
                     Bytes b = Baseline(i);
                     const int markers[] = {0xDB, 0xC4, 0xC0, 0xDA};
                     const std::size_t at = FindMarker(b, markers[rng() % 4]);
                     b[at + 2] = std::byte{0xFF};
                     b[at + 3] = std::byte{0xF0};
                     return b;
                   }});
  kinds.push_back(
      {"wrong restart markers", Expect::kErrorOrPixels, {}, [](std::mt19937& rng, int i) {
         Bytes b = Baseline(i, false, 2);
         for (std::size_t k = ScanStart(b); k + 1 < b.size(); ++k) {
           if (b[k] == std::byte{0xFF} && (int(b[k + 1]) & 0xF8) == 0xD0 && rng() % 3 == 0) {
             b[k + 1] = std::byte(0xD0 | (rng() % 8));
           }
         }
         return b;
       }});
  kinds.push_back({"truncated CMYK",
                   Expect::kError,
                   {K::kTruncated, K::kCorrupt, K::kNotJpeg},
                   [](std::mt19937& rng, int i) {
                     EncodeOptions o;
                     o.jpeg_color_space = ColorSpace::kYcck;
                     Bytes b = testing::MakeJpeg(64, 48, o, i, 4);
                     b.resize(rng() % (b.size() - 2));
                     return b;
                   }});
}

// Every kind, in a fixed order: the files are drawn from one generator in this order.
std::vector<Kind> Kinds() {
  std::vector<Kind> kinds;
  AddDamagedFiles(kinds);
  AddBadHeaders(kinds);
  AddOtherFormats(kinds);
  AddBrokenStructure(kinds);
  return kinds;
}

TEST(BadInput, ThousandsOfBrokenFilesGiveTheirDocumentedResult) {
  constexpr int kPerKind = 100;
  const std::vector<Kind> kinds = Kinds();
  ASSERT_GE(kinds.size(), 15u);
  JpegOptions strict_options;
  strict_options.max_pixels = std::int64_t{1} << 24;  // 16 MP: the huge kinds exceed it
  JpegDecoder strict(strict_options);
  JpegOptions lenient_options = strict_options;
  lenient_options.corrupt_data = CorruptDataPolicy::kAccept;
  JpegDecoder lenient(lenient_options);
  std::vector<std::uint8_t> out(std::size_t{64} * 64 * 3);
  const PixelView view = PixelView::Interleaved(out.data(), 64, 64);
  std::mt19937 rng(2024);
  int files = 0;
  std::map<std::string, std::map<std::string, int>> outcomes;  // kind -> outcome -> count
  for (const Kind& kind : kinds) {
    for (int i = 0; i < kPerKind; ++i, ++files) {
      const Bytes bytes = kind.make(rng, i);
      for (JpegDecoder* decoder : {&strict, &lenient}) {
        const auto start = std::chrono::steady_clock::now();
        std::string outcome;
        try {
          const ImageInfo info = decoder->ReadInfo(bytes);
          const DecodeReport report =
              decoder->DecodeInto(bytes, {Rect{0, 0, info.width, info.height}}, view);
          outcome = report.warning ? "pixels with warning" : "pixels";
          // The strict policy refuses damage; the lenient one may keep the pixels, but
          // only with a warning that says what happened.
          if (kind.expect == Expect::kError) {
            EXPECT_TRUE(decoder == &lenient && report.warning)
                << kind.name << " #" << i << " decoded"
                << (report.warning ? " with a warning" : "");
          }
        } catch (const DecodeError& e) {
          outcome = ToString(e.kind());
          EXPECT_NE(kind.expect, Expect::kPixels) << kind.name << " #" << i << ": " << e.what();
          EXPECT_GT(std::string(e.what()).size(), 8u);
          if (!kind.allowed.empty() && decoder == &strict) {
            EXPECT_NE(std::find(kind.allowed.begin(), kind.allowed.end(), e.kind()),
                      kind.allowed.end())
                << kind.name << " #" << i << " gave " << e.what();
          }
        }
        // Not a speed assertion: a bound that only a hang or a runaway loop can break.
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
            << kind.name << " #" << i;
        outcomes[kind.name][outcome]++;
      }
    }
  }
  EXPECT_GE(files, 2000);
  for (const auto& [name, counts] : outcomes) {
    std::string line = name + ":";
    for (const auto& [outcome, count] : counts) line += " " + outcome + "=" + std::to_string(count);
    std::printf("  %s\n", line.c_str());
  }
}

TEST(BadInput, Lz4RawTensorsSurviveRandomDamage) {
  std::mt19937 rng(7);
  std::vector<std::uint8_t> pixels(std::size_t{24} * 16 * 3);
  for (auto& p : pixels) p = std::uint8_t(rng() % 7);  // compressible
  const Bytes good = EncodeRaw(pixels, RawInfo{16, 24, 3});
  std::vector<std::uint8_t> out(pixels.size());
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes b = good;
    for (int k = 0; k < 1 + trial % 5; ++k) b[rng() % b.size()] ^= std::byte(1u << (rng() % 8));
    if (trial % 7 == 0) b.resize(rng() % b.size());
    try {
      const RawInfo info = ReadRawInfo(b);
      if (info.pixel_bytes() != out.size()) {
        ++rejected;
        continue;
      }
      DecodeRawInto(b, out);
    } catch (const DecodeError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace tilefeed::codecs
