// Writes the fuzzers' seed corpora: small JPEGs of every encoding the decoder meets, a few
// LZ4 raw tensors and PNGs of every colour type, made at run time (the repository holds no
// images).
//   make_seeds DIR    -> DIR/jpeg/*, DIR/raw/*, DIR/jpeg_index/*, DIR/png/*,
//                     DIR/coefficient_groups/*, DIR/control/*, DIR/checkpoint/*, DIR/augment/*

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "codecs/jpeg_coefficients.h"
#include "codecs/jpeg_index.h"
#include "codecs/raw.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/png_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"
#include "tilefeed/transport/session.h"
#include "transport/wire.h"

namespace {

namespace codecs = tilefeed::codecs;
namespace testing = tilefeed::testing;
namespace transport = tilefeed::transport;
using Path = std::filesystem::path;

constexpr codecs::Subsampling kThreeSubsamplings[] = {
    codecs::Subsampling::k420, codecs::Subsampling::k422, codecs::Subsampling::k444};

// A greyscale JPEG's options (the encoder's defaults; the channel count makes it grey).
codecs::EncodeOptions GrayOptions() { return codecs::EncodeOptions{}; }

codecs::EncodeOptions CmykOptions() {
  codecs::EncodeOptions cmyk;
  cmyk.jpeg_color_space = codecs::ColorSpace::kYcck;
  return cmyk;
}

// jpeg_fuzz: the harness's crop parameters (5 bytes), then the JPEG. Returns the count.
int WriteJpegSeeds(const Path& dir) {
  int n = 0;
  auto jpeg = [&](int w, int h, codecs::EncodeOptions o, int channels = 3) {
    // The first 5 bytes are the harness's crop parameters.
    std::vector<std::byte> bytes = {std::byte(n), std::byte(40), std::byte(60), std::byte(200),
                                    std::byte(150)};
    const auto file = testing::MakeJpeg(w, h, o, static_cast<std::uint64_t>(n), channels);
    bytes.insert(bytes.end(), file.begin(), file.end());
    testing::WriteFile(dir / "jpeg" / ("seed" + std::to_string(n++)), bytes);
  };
  for (auto sub : {codecs::Subsampling::k420, codecs::Subsampling::k422, codecs::Subsampling::k444,
                   codecs::Subsampling::k411}) {
    codecs::EncodeOptions o;
    o.subsampling = sub;
    jpeg(33, 17, o);
    o.progressive = true;
    jpeg(40, 24, o);
    o.progressive = false;
    o.restart_interval = 2;
    jpeg(48, 32, o);
  }
  jpeg(20, 20, GrayOptions(), 1);
  jpeg(24, 16, CmykOptions(), 4);
  codecs::EncodeOptions arith;
  arith.arithmetic = true;
  jpeg(24, 24, arith);
  return n;
}

// raw_fuzz: four LZ4 raw tensors.
void WriteRawSeeds(const Path& dir) {
  for (int i = 0; i < 4; ++i) {
    const codecs::RawInfo info{4 + i, 3 + 2 * i, 1 + i % 3};
    std::vector<std::uint8_t> pixels(info.pixel_bytes());
    for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = std::uint8_t(k * 7 % (3 + i));
    testing::WriteFile(dir / "raw" / ("seed" + std::to_string(i)), codecs::EncodeRaw(pixels, info));
  }
}

// jpeg_index_fuzz: flags, crop (4 bytes), the stored index's length (2 bytes, LE), the
// index, then the transcoded JPEG it belongs to. Returns the count.
int WriteIndexSeeds(const Path& dir) {
  int indexed = 0;
  auto transcoded = [&](int w, int h, codecs::EncodeOptions o, int channels, int width) {
    codecs::TranscodeOptions t;
    t.interval_width = width;
    const auto result = codecs::TranscodeForRandomAccess(
        testing::MakeJpeg(w, h, o, static_cast<std::uint64_t>(indexed), channels), t);
    if (!result.transcoded) return;
    const auto index = codecs::SerializeIndex(result.index);
    std::vector<std::byte> bytes = {std::byte(indexed & 0xF),
                                    std::byte(70),
                                    std::byte(90),
                                    std::byte(120),
                                    std::byte(100),
                                    std::byte(index.size() & 0xFF),
                                    std::byte(index.size() >> 8)};
    bytes.insert(bytes.end(), index.begin(), index.end());
    bytes.insert(bytes.end(), result.jpeg.begin(), result.jpeg.end());
    testing::WriteFile(dir / "jpeg_index" / ("seed" + std::to_string(indexed++)), bytes);
  };
  for (auto sub : kThreeSubsamplings) {
    codecs::EncodeOptions o;
    o.subsampling = sub;
    transcoded(97, 45, o, 3, 16);
    o.progressive = true;
    transcoded(64, 40, o, 3, 32);
  }
  transcoded(40, 33, GrayOptions(), 1, 8);
  transcoded(33, 24, CmykOptions(), 4, 16);
  return indexed;
}

// coefficient_groups_fuzz: flags, two crops (8 bytes), then a record of each layout.
// Returns the count.
int WriteGroupSeeds(const Path& dir) {
  int grouped = 0;
  auto pack_layout = [&](int w, int h, codecs::EncodeOptions o, int channels,
                         const codecs::CoefficientPackOptions& layout) {
    const auto result = codecs::PackCoefficients(
        testing::MakeJpeg(w, h, o, static_cast<std::uint64_t>(grouped), channels), layout);
    if (!result.packed) return;
    std::vector<std::byte> bytes = {std::byte(grouped & 0x1F),
                                    std::byte(70),
                                    std::byte(90),
                                    std::byte(120),
                                    std::byte(100),
                                    std::byte(10),
                                    std::byte(0),
                                    std::byte(200),
                                    std::byte(255)};
    bytes.insert(bytes.end(), result.record.begin(), result.record.end());
    testing::WriteFile(dir / "coefficient_groups" / ("seed" + std::to_string(grouped++)), bytes);
  };
  for (const auto coding :
       {codecs::CoefficientCoding::kNone, codecs::CoefficientCoding::kHuffman}) {
    codecs::CoefficientPackOptions layout;
    layout.coding = coding;
    layout.group_pixels = 16;
    codecs::EncodeOptions o;
    pack_layout(97, 45, o, 3, layout);
    o.subsampling = codecs::Subsampling::k444;
    o.quality = 100;  // wide values
    pack_layout(40, 24, o, 3, layout);
    pack_layout(33, 24, GrayOptions(), 1, layout);
    o.subsampling = codecs::Subsampling::k422;
    o.progressive = true;
    pack_layout(64, 40, o, 3, layout);
    pack_layout(33, 24, CmykOptions(), 4, layout);
  }
  return grouped;
}

// png_fuzz: flags, crop (4 bytes), then the PNG; every colour type, plain and interlaced.
// Returns the count.
int WritePngSeeds(const Path& dir) {
  int pngs = 0;
  for (const testing::PngKind kind : testing::kAllPngKinds) {
    for (const bool interlaced : {false, true}) {
      std::vector<std::byte> bytes = {std::byte(pngs * 8 & 0x1F), std::byte(40), std::byte(60),
                                      std::byte(200), std::byte(150)};
      const auto file = testing::MakeTestPng(kind, 13 + pngs, 9 + pngs % 5, interlaced).bytes;
      bytes.insert(bytes.end(), file.begin(), file.end());
      testing::WriteFile(dir / "png" / ("seed" + std::to_string(pngs++)), bytes);
    }
  }
  return pngs;
}

// control_fuzz: a selector byte (even: a control part, odd: session terms), then the part.
void WriteControlSeeds(const Path& dir) {
  auto control = [&](int i, std::byte selector, std::span<const std::byte> part) {
    std::vector<std::byte> bytes = {selector};
    bytes.insert(bytes.end(), part.begin(), part.end());
    testing::WriteFile(dir / "control" / ("seed" + std::to_string(i)), bytes);
  };
  using transport::detail::MessageType;
  control(0, std::byte{0}, transport::detail::EncodeControl({MessageType::kHello, 4, 1}));
  control(1, std::byte{0}, transport::detail::EncodeControl({MessageType::kWelcome, 8, 4, 96, 8}));
  control(2, std::byte{0}, transport::detail::EncodeControl({MessageType::kBye, 3}));
  transport::SessionTerms terms;
  terms.image_size = 224;
  terms.batch_size = 32;
  terms.epochs = 90;
  terms.slice_count = 4;
  terms.slice_index = 3;
  terms.drop_last = true;
  control(3, std::byte{1}, transport::EncodeSessionTerms(terms));
}

// augment_fuzz: five bytes of sizes and sample (augment_fuzz.cc), then a spec's text.
void WriteAugmentSeeds(const Path& dir) {
  static constexpr const char* kSpecs[] = {
      "RandomResizedCrop(), RandomHorizontalFlip()",
      "[RandomResizedCrop(scale=(0.35, 1)), RandomHorizontalFlip(), RandAugment(2, 9), "
      "RandomErasing(0.25)]",
      "RandomResizedCrop(), ColorJitter(0.4, (0.6, 1.4), 0.4, 0.1), TrivialAugmentWide(fill=128), "
      "RandomGrayscale(p=0.2), RandomErasing(p=1, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=7)"};
  int i = 0;
  for (const std::string spec : kSpecs) {
    std::vector<std::byte> bytes = {std::byte{23}, std::byte{40}, std::byte{4}, std::byte{2},
                                    std::byte(i)};
    for (char c : spec) bytes.push_back(static_cast<std::byte>(c));
    testing::WriteFile(dir / "augment" / ("seed" + std::to_string(i++)), bytes);
  }
}

// checkpoint_fuzz: a selector byte (odd: the harness appends the checksum), then a file.
void WriteCheckpointSeeds(const Path& dir) {
  auto checkpoint = [&](int i, const std::string& header, std::size_t floats) {
    std::string file = header + std::string(floats * 4, '\x3f');
    std::vector<std::byte> bytes = {std::byte{1}};
    for (char c : file) bytes.push_back(static_cast<std::byte>(c));
    testing::WriteFile(dir / "checkpoint" / ("seed" + std::to_string(i)), bytes);
  };
  checkpoint(0,
             "tilefeed-checkpoint v1 step=12 epoch=1 core=reference parameters=3 velocity=3\n"
             "tilefeed-loader-state v1 seed=0 epoch=1 position=64 size=100\n",
             6);
  checkpoint(1,
             "tilefeed-checkpoint v1 step=0 epoch=0 core=synthetic parameters=0 velocity=0\n"
             "tilefeed-remote-state v1 epoch=0 position=0\n",
             0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  const Path dir(argv[1]);
  const int jpegs = WriteJpegSeeds(dir);
  WriteRawSeeds(dir);
  const int indexed = WriteIndexSeeds(dir);
  const int stored = WriteGroupSeeds(dir);
  const int pngs = WritePngSeeds(dir);
  WriteControlSeeds(dir);
  WriteCheckpointSeeds(dir);
  WriteAugmentSeeds(dir);
  std::printf(
      "wrote %d JPEG, 4 raw, %d JPEG-index, %d coefficient, %d PNG, control, checkpoint and "
      "augment "
      "seeds "
      "under %s\n",
      jpegs, indexed, stored, pngs, dir.c_str());
  return 0;
}
