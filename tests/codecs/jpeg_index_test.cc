#include "codecs/jpeg_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tests/support/jpeg_maker.h"
#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::codecs {
namespace {

using testing::MakeJpeg;

using Encoding = testing::NamedEncoding;

// Every encoding the transcoder accepts (arithmetic coding is refused, see below).
std::vector<Encoding> AcceptedEncodings() { return testing::CommonEncodings(90, false); }

std::vector<std::uint8_t> FullDecode(JpegDecoder& decoder, std::span<const std::byte> jpeg) {
  const ImageInfo info = decoder.ReadInfo(jpeg);
  std::vector<std::uint8_t> pixels(std::size_t(info.width) * info.height * 3);
  decoder.DecodeFull(jpeg, PixelView::Interleaved(pixels.data(), info.width, info.height));
  return pixels;
}

TranscodeResult MustTranscode(std::span<const std::byte> jpeg, const TranscodeOptions& o = {}) {
  TranscodeResult result = TranscodeForRandomAccess(jpeg, o);
  EXPECT_TRUE(result.transcoded) << result.reason;
  return result;
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

TEST(JpegTranscode, SamePixelsAndAValidIndexForEveryAcceptedEncoding) {
  JpegDecoder decoder;
  for (const Encoding& e : AcceptedEncodings()) {
    for (auto [w, h] : {std::pair{333, 257}, std::pair{97, 601}, std::pair{1, 1},
                        std::pair{640, 480}, std::pair{16, 16}}) {
      SCOPED_TRACE(std::string(e.name) + " " + std::to_string(w) + "x" + std::to_string(h));
      const auto original = MakeJpeg(w, h, e.options, w * 7 + h, e.channels);
      const TranscodeResult t = MustTranscode(original);
      const ImageInfo info = decoder.ReadInfo(t.jpeg);
      EXPECT_FALSE(info.progressive);
      EXPECT_EQ(info.restart_interval, t.index.mcus_per_interval);
      EXPECT_EQ(t.index.mcus_per_row % t.index.mcus_per_interval, 0);
      EXPECT_EQ(t.index.offsets.size(),
                std::size_t(t.index.mcu_rows) * t.index.intervals_per_row());
      EXPECT_TRUE(FullDecode(decoder, original) == FullDecode(decoder, t.jpeg));
      const auto stored = SerializeIndex(t.index);
      EXPECT_EQ(ParseIndex(stored, t.jpeg), t.index);
    }
  }
}

TEST(JpegTranscode, IntervalsTileTheRowsAtTheTargetWidth) {
  EncodeOptions o;                                            // 4:2:0: 16-pixel MCUs
  const auto jpeg = MakeJpeg(500, 375, o);                    // 32 MCUs per row
  EXPECT_EQ(MustTranscode(jpeg).index.mcus_per_interval, 2);  // the default, 32 px
  for (auto [target, k] : {std::pair{64, 4}, std::pair{16, 1}, std::pair{128, 8}, std::pair{0, 32},
                           std::pair{10000, 32}}) {
    TranscodeOptions options;
    options.interval_width = target;
    EXPECT_EQ(MustTranscode(jpeg, options).index.mcus_per_interval, k) << target;
  }
  TranscodeOptions wide;
  wide.interval_width = 64;
  // 23 MCUs per row (prime): no divisor near 4, so one interval per row.
  EXPECT_EQ(MustTranscode(MakeJpeg(353, 100, o), wide).index.mcus_per_interval, 23);
  // 21 MCUs per row: 3 is the nearest divisor.
  EXPECT_EQ(MustTranscode(MakeJpeg(333, 100, o), wide).index.mcus_per_interval, 3);
}

TEST(JpegTranscode, MetadataIsDroppedUnlessAsked) {
  const auto jpeg = MakeJpeg(64, 64, EncodeOptions{});
  TranscodeOptions keep;
  keep.copy_metadata = true;
  const TranscodeResult dropped = MustTranscode(jpeg);
  const TranscodeResult kept = MustTranscode(jpeg, keep);
  // The encoder writes only JFIF, which the transcoder writes itself: same bytes.
  EXPECT_EQ(dropped.jpeg, kept.jpeg);
}

TEST(JpegTranscode, RefusesWhatItCannotTranscodeAndSaysWhy) {
  EncodeOptions arith;
  arith.arithmetic = true;
  TranscodeResult t = TranscodeForRandomAccess(MakeJpeg(64, 48, arith));
  EXPECT_FALSE(t.transcoded);
  EXPECT_EQ(t.refusal, DecodeErrorKind::kUnsupported);
  EXPECT_NE(t.reason.find("arithmetic"), std::string::npos) << t.reason;
  EXPECT_TRUE(t.jpeg.empty());

  // 12-bit and lossless files cannot be made by this libjpeg; patch a baseline file's
  // SOF into them (libjpeg refuses them in the header, before any data).
  const auto baseline = MakeJpeg(64, 48, EncodeOptions{});
  std::size_t sof = 0;
  for (std::size_t i = 2; i + 1 < baseline.size(); ++i) {
    if (baseline[i] == std::byte{0xFF} && baseline[i + 1] == std::byte{0xC0}) {
      sof = i;
      break;
    }
  }
  ASSERT_NE(sof, 0u);
  auto twelve_bit = baseline;
  twelve_bit[sof + 1] = std::byte{0xC1};
  twelve_bit[sof + 4] = std::byte{12};
  t = TranscodeForRandomAccess(twelve_bit);
  EXPECT_FALSE(t.transcoded);
  EXPECT_EQ(t.refusal, DecodeErrorKind::kUnsupported) << t.reason;
  EXPECT_NE(t.reason.find("precision"), std::string::npos) << t.reason;
  auto lossless = baseline;
  lossless[sof + 1] = std::byte{0xC3};
  t = TranscodeForRandomAccess(lossless);
  EXPECT_FALSE(t.transcoded);
  EXPECT_EQ(t.refusal, DecodeErrorKind::kUnsupported) << t.reason;

  auto truncated = baseline;
  truncated.resize(truncated.size() / 2);
  t = TranscodeForRandomAccess(truncated);
  EXPECT_FALSE(t.transcoded);
  EXPECT_EQ(t.refusal, DecodeErrorKind::kTruncated) << t.reason;

  t = TranscodeForRandomAccess(testing::MakePngBytes());
  EXPECT_EQ(t.refusal, DecodeErrorKind::kNotJpeg) << t.reason;

  TranscodeOptions small;
  small.max_pixels = 1000;
  t = TranscodeForRandomAccess(baseline, small);
  EXPECT_EQ(t.refusal, DecodeErrorKind::kTooLarge) << t.reason;
}

// The heart of the feature: for every accepted encoding, many crops touching every edge,
// several output sizes and both scale sets, decoding only the covering intervals gives
// the very bytes a whole-file crop decode of the transcoded file gives.
TEST(JpegIndexedDecode, MatchesTheOrdinaryCropDecodeByteForByte) {
  std::mt19937 rng(7);
  for (const DecodeScaling scaling : {DecodeScaling::kExact, DecodeScaling::kFast}) {
    JpegOptions options;
    options.decode_scaling = scaling;
    JpegDecoder plain(options);
    IndexedJpegDecoder indexed(options);
    for (const Encoding& e : AcceptedEncodings()) {
      for (auto [w, h] :
           {std::pair{333, 257}, std::pair{640, 480}, std::pair{97, 601}, std::pair{1, 1}}) {
        const auto original = MakeJpeg(w, h, e.options, w + h, e.channels);
        TranscodeOptions transcode;
        transcode.interval_width = (w + h) % 3 == 0 ? 16 : 64;
        const TranscodeResult t = MustTranscode(original, transcode);
        for (const Rect& crop : CropsFor(w, h, rng, 10)) {
          for (auto [ow, oh] : {std::pair{224, 224}, std::pair{64, 48}, std::pair{7, 31}}) {
            SCOPED_TRACE(std::string(e.name) + " " + std::to_string(w) + "x" + std::to_string(h) +
                         " crop " + std::to_string(crop.x) + "," + std::to_string(crop.y) + " " +
                         std::to_string(crop.width) + "x" + std::to_string(crop.height) + " -> " +
                         std::to_string(ow) + "x" + std::to_string(oh));
            const CropPlan plan{crop, (crop.y & 1) != 0};
            std::vector<std::uint8_t> want(std::size_t(ow) * oh * 3, 1);
            std::vector<std::uint8_t> got(std::size_t(ow) * oh * 3, 2);
            const DecodeReport a =
                plain.DecodeInto(t.jpeg, plan, PixelView::Interleaved(want.data(), ow, oh));
            const DecodeReport b = indexed.DecodeInto(t.jpeg, t.index, plan,
                                                      PixelView::Interleaved(got.data(), ow, oh));
            ASSERT_TRUE(want == got);
            EXPECT_EQ(a.scale_eighths, b.scale_eighths);
            EXPECT_EQ(a.decoded, b.decoded);
            EXPECT_FALSE(b.warning) << b.message;
          }
        }
      }
    }
  }
}

TEST(JpegIndexedDecode, EntropyDecodesOnlyTheIntervalsAroundTheCrop) {
  const auto original = MakeJpeg(1024, 768, EncodeOptions{});
  TranscodeOptions wide;
  wide.interval_width = 64;
  const TranscodeResult t = MustTranscode(original, wide);
  ASSERT_EQ(t.index.mcus_per_interval, 4);  // 64-pixel intervals
  JpegOptions options;
  // A 256x256 crop in the middle, decoded at 1/2 to 128x128.
  const CropPlan plan{{400, 300, 256, 256}};
  const Rect covered = CoveredRegion(t.jpeg, t.index, plan, 128, 128, options);
  // The crop plus at most one MCU of margin, widened to whole intervals.
  EXPECT_LE(covered.x, 400 - 2);
  EXPECT_GE(covered.x, 400 - 64 - 16);
  EXPECT_EQ(covered.x % 64, 0);
  EXPECT_GE(covered.x + covered.width, 656 + 2);
  EXPECT_LE(covered.x + covered.width, 656 + 64 + 16);
  EXPECT_LE(covered.y, 300 - 2);
  EXPECT_GE(covered.y, 300 - 16);
  EXPECT_GE(covered.y + covered.height, 556 + 2);
  EXPECT_LE(covered.y + covered.height, 556 + 16);

  // Damage every interval outside the covered region: the indexed decode never reads
  // them, so it still decodes cleanly under the strict policy.
  auto damaged = t.jpeg;
  const int per_row = t.index.intervals_per_row();
  for (std::size_t i = 0; i < t.index.offsets.size(); ++i) {
    const int x = int(i % per_row) * 64, y = int(i / per_row) * 16;
    if (x + 64 > covered.x && x < covered.x + covered.width && y + 16 > covered.y &&
        y < covered.y + covered.height) {
      continue;
    }
    const std::size_t end =
        i + 1 < t.index.offsets.size() ? t.index.offsets[i + 1] - 2 : t.index.scan_end;
    for (std::size_t p = t.index.offsets[i]; p < end; ++p) {
      if (damaged[p] != std::byte{0xFF} && (p == 0 || damaged[p - 1] != std::byte{0xFF})) {
        damaged[p] = std::byte{0x5A};
      }
    }
  }
  IndexedJpegDecoder decoder(options);
  std::vector<std::uint8_t> clean(std::size_t{128} * 128 * 3),
      from_damaged(std::size_t{128} * 128 * 3);
  decoder.DecodeInto(t.jpeg, t.index, plan, PixelView::Interleaved(clean.data(), 128, 128));
  const DecodeReport report = decoder.DecodeInto(
      damaged, t.index, plan, PixelView::Interleaved(from_damaged.data(), 128, 128));
  EXPECT_FALSE(report.warning);
  EXPECT_TRUE(clean == from_damaged);
}

TEST(JpegIndex, EveryFlippedByteOfAStoredIndexIsDetected) {
  for (auto [w, h] : {std::pair{333, 257}, std::pair{1, 1}}) {
    const TranscodeResult t = MustTranscode(MakeJpeg(w, h, EncodeOptions{}));
    const auto stored = SerializeIndex(t.index);
    for (std::size_t i = 0; i < stored.size(); ++i) {
      for (std::uint8_t mask : {0x01, 0x80, 0xFF, 0x10}) {
        auto bad = stored;
        bad[i] ^= std::byte{mask};
        try {
          ParseIndex(bad, t.jpeg);
          ADD_FAILURE() << "accepted a flip of byte " << i << " by " << int(mask);
        } catch (const DecodeError& e) {
          EXPECT_EQ(e.kind(), DecodeErrorKind::kCorrupt) << e.what();
        }
      }
    }
    for (std::size_t n = 0; n < stored.size(); ++n) {
      EXPECT_THROW(ParseIndex(std::span(stored).first(n), t.jpeg), DecodeError) << n;
    }
    auto longer = stored;
    longer.push_back(std::byte{0});
    EXPECT_THROW(ParseIndex(longer, t.jpeg), DecodeError);
  }
}

TEST(JpegIndex, AnIndexOfAnotherFileIsRejected) {
  const TranscodeResult a = MustTranscode(MakeJpeg(333, 257, EncodeOptions{}, 1));
  const TranscodeResult b = MustTranscode(MakeJpeg(333, 257, EncodeOptions{}, 2));
  EXPECT_THROW(ParseIndex(SerializeIndex(a.index), b.jpeg), DecodeError);
  // Passed directly, a wrong index is caught before any offset is used.
  JpegIntervalIndex wrong = b.index;
  wrong.offsets[5] = 1u << 30;
  IndexedJpegDecoder decoder;
  std::vector<std::uint8_t> out(std::size_t{32} * 32 * 3);
  const auto view = PixelView::Interleaved(out.data(), 32, 32);
  // Row 0 holds interval 5 (21 MCUs per row, 3 per interval at 32 px: 7 per row).
  EXPECT_THROW(decoder.DecodeInto(b.jpeg, wrong, {{200, 0, 60, 20}}, view), DecodeError);
  EXPECT_THROW(decoder.DecodeInto(b.jpeg, a.index, {{0, 0, 60, 20}}, view), DecodeError);
  EXPECT_THROW(
      decoder.DecodeInto(MakeJpeg(333, 257, EncodeOptions{}), b.index, {{0, 0, 9, 9}}, view),
      DecodeError);
}

// Damaged entropy data: the index may still parse (most flips leave the markers alone);
// the decode then fails with a DecodeError or, under kAccept, gives some pixels. Never a
// crash or an out-of-bounds read (this also runs under ASan+UBSan).
// What one decode of a damaged file gave: a DecodeError (kind and line), or pixels.
struct DamagedOutcome {
  bool threw = false;
  DecodeErrorKind kind = DecodeErrorKind::kCorrupt;
  std::string message;  // the error's line, or the accepted warning's
  bool warning = false;
  std::vector<std::uint8_t> pixels;
};

DamagedOutcome DecodeDamaged(IndexedJpegDecoder& decoder, std::span<const std::byte> stored,
                             std::span<const std::byte> jpeg, const Rect& crop) {
  DamagedOutcome outcome;
  outcome.pixels.assign(std::size_t{48} * 48 * 3, 0);
  try {
    const JpegIntervalIndex index = ParseIndex(stored, jpeg);
    const DecodeReport report = decoder.DecodeInto(
        jpeg, index, {crop}, PixelView::Interleaved(outcome.pixels.data(), 48, 48));
    outcome.warning = report.warning;
    outcome.message = report.message;
  } catch (const DecodeError& e) {
    outcome.threw = true;
    outcome.kind = e.kind();
    outcome.message = e.what();
  }
  return outcome;
}

// Flipped bytes in the entropy-coded intervals: every decode either throws DecodeError
// (truncated or corrupt, with a line saying what) or returns pixels; kFail never returns
// pixels after a damage warning, kAccept fails only where kFail fails too and keeps the pixels
// with the warning; the same damage gives the same result twice; and a decoder that has
// failed still decodes the undamaged file exactly as a fresh one does.
TEST(JpegIndex, DamagedIntervalsFailCleanly) {
  const TranscodeResult t = MustTranscode(MakeJpeg(333, 257, EncodeOptions{}));
  const auto stored = SerializeIndex(t.index);
  JpegOptions fail_options;
  fail_options.corrupt_data = CorruptDataPolicy::kFail;
  JpegOptions accept_options;
  accept_options.corrupt_data = CorruptDataPolicy::kAccept;
  IndexedJpegDecoder strict(fail_options);
  IndexedJpegDecoder lenient(accept_options);
  std::mt19937 rng(3);
  int refused = 0;
  int kept_with_warning = 0;
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    auto damaged = t.jpeg;
    const int flips = 1 + trial % 4;
    for (int f = 0; f < flips; ++f) {
      const std::size_t p =
          std::uniform_int_distribution<std::size_t>(t.index.offsets[0], damaged.size() - 1)(rng);
      damaged[p] ^= std::byte(1 + rng() % 255);
    }
    const Rect crop = CropsFor(333, 257, rng, 1).back();
    const DamagedOutcome a = DecodeDamaged(strict, stored, damaged, crop);
    const DamagedOutcome b = DecodeDamaged(lenient, stored, damaged, crop);
    if (a.threw) {
      ++refused;
      EXPECT_TRUE(a.kind == DecodeErrorKind::kCorrupt || a.kind == DecodeErrorKind::kTruncated)
          << a.message;
      EXPECT_FALSE(a.message.empty());
    } else {
      // kFail keeps only pixels with no warning or a harmless one (jpeg.h).
      EXPECT_TRUE(!a.warning || a.message.find("extraneous bytes") != std::string::npos ||
                  a.message.find("JFIF") != std::string::npos)
          << "kFail returned pixels after a damage warning: " << a.message;
      ASSERT_FALSE(b.threw) << "kAccept refused what kFail decoded: " << b.message;
      EXPECT_TRUE(a.pixels == b.pixels);
    }
    if (b.threw) {
      EXPECT_TRUE(a.threw);
    } else if (a.threw) {
      // What kFail refused and kAccept kept comes with the warning that says why.
      ++kept_with_warning;
      EXPECT_TRUE(b.warning);
      EXPECT_FALSE(b.message.empty());
    }
    const DamagedOutcome again = DecodeDamaged(strict, stored, damaged, crop);
    EXPECT_EQ(again.threw, a.threw);
    EXPECT_TRUE(again.pixels == a.pixels);
    // The decoders are not poisoned by what they refused or accepted.
    IndexedJpegDecoder fresh(fail_options);
    const DamagedOutcome want = DecodeDamaged(fresh, stored, t.jpeg, crop);
    ASSERT_FALSE(want.threw) << want.message;
    EXPECT_TRUE(DecodeDamaged(strict, stored, t.jpeg, crop).pixels == want.pixels);
    EXPECT_TRUE(DecodeDamaged(lenient, stored, t.jpeg, crop).pixels == want.pixels);
  }
  // The damage is found (not every flip lands where the crop's intervals are read), and
  // the lenient policy keeps some decodes the strict one refuses.
  EXPECT_GT(refused, 0);
  EXPECT_GT(kept_with_warning, 0);
}

}  // namespace
}  // namespace tilefeed::codecs
