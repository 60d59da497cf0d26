// An ImageFolder with PNGs among its JPEGs (torchvision's ImageFolder loads them, and they were
// once silently left out): every image loads, the PNG's pixels are the PNG decoder's, and the
// files tilefeed does not decode are counted and reported.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "codecs/png.h"
#include "loader/image_folder.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/png_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"
#include "tilefeed/loader/augment.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(PngFolderTest, FiftyTwoFilesWithAPngLoadFiftyTwoSamples) {
  testing::TempDir dir;
  const fs::path& root = dir.path();
  for (int i = 0; i < 51; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "c%d/img%02d.%s", i % 2, i, i % 5 == 0 ? "JPEG" : "jpg");
    testing::WriteFile(root / name, testing::MakeJpeg(40 + i % 7, 36 + i % 5, {}, i));
  }
  const testing::TestPng png = testing::MakeTestPng(testing::PngKind::kRgba8, 45, 39);
  testing::WriteFile(root / "c1" / "zz_photo.PNG", png.bytes);
  testing::WriteFile(root / "c0" / "a.webp", testing::MakeTextBytes());
  testing::WriteFile(root / "c1" / "b.webp", testing::MakeTextBytes());
  testing::WriteFile(root / "c1" / "c.BMP", testing::MakeBmpBytes());

  auto folder = ImageFolder::Open(root.string());
  ASSERT_EQ(folder->size(), 52u);
  EXPECT_EQ(folder->skipped_files().count, 3u);
  using Entry = std::pair<std::string, std::size_t>;
  EXPECT_THAT(folder->skipped_files().by_extension,
              ::testing::ElementsAre(Entry{".webp", 2}, Entry{".bmp", 1}));
  ASSERT_EQ(folder->warnings().size(), 1u);
  EXPECT_THAT(folder->warnings()[0], HasSubstr("skipped 3 files tilefeed does not decode"));
  EXPECT_THAT(folder->warnings()[0], HasSubstr(": 2 .webp, 1 .bmp"));
  const std::size_t png_index = folder->size() - 1;
  ASSERT_THAT(folder->Describe(png_index), HasSubstr("zz_photo.PNG"));

  LoaderOptions options;
  options.batch_size = 8;
  options.image_size = 16;
  options.mode = Mode::kEval;
  options.eval_resize = 20;
  options.shuffle = false;
  options.workers = 2;
  options.epochs = 1;
  Loader loader(std::move(folder), options);
  std::size_t samples = 0;
  std::vector<std::uint8_t> png_row;
  for (Batch& batch : loader) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch.sample_indices()[i] != png_index) continue;
      const std::size_t bytes = std::size_t{16} * 16 * 3;
      const auto at = batch.images().begin() + static_cast<std::ptrdiff_t>(i * bytes);
      png_row.assign(at, at + static_cast<std::ptrdiff_t>(bytes));
    }
    samples += batch.size();
    EXPECT_EQ(batch.substituted(), 0u);
  }
  EXPECT_EQ(samples, 52u);
  EXPECT_EQ(loader.metrics().bad_samples, 0u);

  // The loader's row is the PNG decoder's center crop.
  codecs::PngDecoder decoder;
  std::vector<std::uint8_t> expected(std::size_t{16} * 16 * 3);
  decoder.DecodeInto(png.bytes, CenterCropAfterResize(png.width, png.height, 20, 16, 16),
                     codecs::PixelView::Interleaved(expected.data(), 16, 16));
  EXPECT_EQ(png_row, expected);
}

// In the loader, a PNG with a bad IDAT CRC decoded (the crop stops before the
// CRC), and a PNG with a damaged signature was reported as "PNG image (tilefeed decodes
// JPEG and PNG)". Both are bad samples that say what is wrong.
TEST(PngFolderTest, DamagedPngsAreBadSamplesSayingWhy) {
  testing::TempDir dir;
  const fs::path& root = dir.path();
  for (int i = 0; i < 4; ++i) {
    testing::WriteFile(root / "c0" / ("img" + std::to_string(i) + ".jpg"),
                       testing::MakeJpeg(40, 36, {}, i));
  }
  std::vector<std::byte> bad_crc = testing::MakeTestPng(testing::PngKind::kRgb8, 64, 64).bytes;
  const std::size_t idat = testing::FindPngChunk(bad_crc, "IDAT");
  const std::size_t idat_size =
      static_cast<std::size_t>(bad_crc[idat + 2]) << 8 | std::size_t(bad_crc[idat + 3]);
  bad_crc[idat + 8 + idat_size] ^= std::byte{0x5A};
  testing::WriteFile(root / "c1" / "bad_crc.png", bad_crc);
  std::vector<std::byte> bad_signature =
      testing::MakeTestPng(testing::PngKind::kRgb8, 20, 20).bytes;
  bad_signature[7] ^= std::byte{0x01};
  testing::WriteFile(root / "c1" / "bad_signature.png", bad_signature);

  LoaderOptions options;
  options.batch_size = 2;
  options.image_size = 16;
  options.shuffle = false;
  options.workers = 1;
  options.epochs = 1;
  Loader loader(ImageFolder::Open(root.string()), options);
  for (Batch& batch : loader) (void)batch;
  const std::vector<BadSample> bad = loader.bad_samples();
  ASSERT_EQ(bad.size(), 2u);
  for (const BadSample& b : bad) {
    EXPECT_EQ(b.reason.find("tilefeed decodes JPEG and PNG"), std::string::npos) << b.reason;
    if (b.where.find("bad_crc.png") != std::string::npos) {
      EXPECT_THAT(b.reason, HasSubstr("CRC"));
    } else {
      EXPECT_THAT(b.where, HasSubstr("bad_signature.png"));
      EXPECT_THAT(b.reason, HasSubstr("damaged signature"));
    }
  }
}

TEST(PngFolderTest, NoImagesNamesTheSkippedFiles) {
  testing::TempDir dir;
  testing::WriteFile(dir.path() / "c" / "a.webp", testing::MakeTextBytes());
  try {
    ImageFolder::Open(dir.path().string());
    ADD_FAILURE() << "opened a folder without images";
  } catch (const SourceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no images"));
    EXPECT_THAT(e.what(), HasSubstr("1 .webp"));
  }
}

}  // namespace
}  // namespace tilefeed::loader
