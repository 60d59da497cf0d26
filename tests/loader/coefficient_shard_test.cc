// Tests the coefficient records of loader/shard_writer.h and
// loader/shard_source.h (PackOptions::codec = kCoefficientsFast or kCoefficientsSmall,
// format version 3) and the loader's decode of them: the loader over coefficient shards gives the
// batches it gives over the original files, refused files are stored as they came, a damaged
// record is a bad sample named "<shard>#<record>" (and VerifyShards finds it), the version is 3,
// and a pack of a retired layout is refused when opened.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "codecs/jpeg_coefficients.h"
#include "loader/image_folder.h"
#include "loader/shard_format.h"
#include "loader/shard_source.h"
#include "loader/shard_writer.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/loader_runs.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// 3 classes of JPEGs in the encodings people meet (4:2:0, 4:4:4, 4:2:2, progressive,
// grayscale, restart markers, arithmetic coding) and one PNG named .jpg.
fs::path MakeFolder(const TempDir& dir, int per_class) {
  fs::path root = dir.path() / "folder";
  int n = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < per_class; ++i, ++n) {
      codecs::EncodeOptions o;
      o.subsampling = n % 3 == 0   ? codecs::Subsampling::k420
                      : n % 3 == 1 ? codecs::Subsampling::k444
                                   : codecs::Subsampling::k422;
      o.progressive = n % 4 == 1;
      o.restart_interval = n % 7 == 3 ? 5 : 0;
      o.arithmetic = n % 9 == 4;
      const int channels = n % 6 == 5 ? 1 : 3;
      WriteFile(root / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + ".jpg"),
                testing::MakeJpeg(70 + (n * 37) % 150, 60 + (n * 23) % 130, o, n, channels));
    }
  }
  WriteFile(root / "class1" / "zz_png.jpg", testing::MakePngBytes(16, 4));
  return root;
}

PackResult PackCoefficients(const Source& source, const fs::path& out, int workers = 2,
                            PackCodec codec = PackCodec::kCoefficientsFast) {
  PackOptions options;
  options.output_dir = out.string();
  options.shard_bytes = 64 << 10;
  options.codec = codec;
  options.workers = workers;
  return PackDataset(source, options);
}

// Applies `edit` to the bytes of record `r` of shard 0 of the pack in `out` (its 8-byte
// header, then its payload) and reseals what covers them: the record checksum, the
// footer and the manifest, so that only the record's own checks can tell.
void RewriteRecord(const fs::path& out, std::size_t r,
                   const std::function<void(std::span<std::byte>)>& edit) {
  const std::string path = (out / detail::ShardFileName(0)).string();
  std::vector<std::byte> bytes = ReadFile(path);
  detail::ShardIndex index = detail::ParseShardFooter(bytes, bytes.size());
  detail::IndexEntry& entry = index.entries.at(r);
  const auto record = std::span(bytes).subspan(entry.offset, entry.size);
  edit(record);
  entry.checksum = detail::Checksum(record);
  std::vector<std::byte> footer;
  for (const detail::IndexEntry& e : index.entries) detail::AppendIndexEntry(e, footer);
  detail::AppendTrailer(index.index_offset, index.entries.size(), footer);
  bytes.resize(index.index_offset);
  bytes.insert(bytes.end(), footer.begin(), footer.end());
  WriteFile(path, bytes);
  const fs::path manifest_path = out / detail::kManifestFileName;
  const std::vector<std::byte> text = ReadFile(manifest_path);
  detail::Manifest manifest = detail::ParseManifest(
      std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
  manifest.shards.at(0).footer_checksum =
      detail::ParseShardFooter(bytes, bytes.size()).footer_checksum;
  const std::string new_text = detail::FormatManifest(manifest);
  WriteFile(manifest_path, std::as_bytes(std::span(new_text)));
}

LoaderOptions TestOptions(Mode mode) {
  return testing::SmallCodecOptions(mode, BadSamplePolicy::kSkip);
}

using testing::CollectEpochs;

TEST(CoefficientShardTest, LoaderOverCoefficientShardsEqualsLoaderOverTheOriginalFiles) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 8);
  const fs::path out = dir.path() / "coefficients";
  const auto folder = ImageFolder::Open(root.string());
  const PackResult result = PackCoefficients(*folder, out);
  EXPECT_EQ(result.records, folder->size());
  EXPECT_EQ(result.indexed, folder->size() - 1);
  ASSERT_EQ(result.not_indexed.size(), 1u);  // the PNG
  EXPECT_EQ(result.not_indexed[0].category, "not a JPEG (PNG image)");

  const auto shards = ShardDataset::Open(out.string());
  EXPECT_EQ(shards->codec(), ShardCodec::kCoefficients);
  std::vector<std::byte> original, record;
  for (std::size_t i = 0; i < shards->size(); ++i) {
    folder->Read(i, original);
    const SampleInfo info = shards->Read(i, record);
    if (info.codec == SampleCodec::kEncoded) {
      EXPECT_EQ(record, original) << "a refused file is stored as it came";
      continue;
    }
    ASSERT_EQ(info.codec, SampleCodec::kCoefficients);
    EXPECT_TRUE(codecs::LooksLikeCoefficients(record));
  }
  const auto problems = VerifyShards(out.string());
  ASSERT_EQ(problems.size(), 1u);  // the PNG, noted: stored as it came, and it decodes
  EXPECT_TRUE(problems[0].note);
  EXPECT_NE(problems[0].reason.find("PNG"), std::string::npos) << problems[0].reason;

  for (const Mode mode : {Mode::kTrain, Mode::kEval}) {
    const LoaderOptions options = TestOptions(mode);
    const auto from_folder = CollectEpochs(ImageFolder::Open(root.string()), options);
    const auto from_shards = CollectEpochs(ShardDataset::Open(out.string()), options);
    EXPECT_EQ(from_folder, from_shards) << (mode == Mode::kTrain ? "train" : "eval");
  }
}

// Shards of coefficients-small records (version 2, Huffman-coded column groups) verify and
// load the same batches as the original files.
TEST(CoefficientShardTest, SmallRecordsLoadLikeTheOriginalFiles) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 8);
  const fs::path out = dir.path() / "coefficients-small";
  const auto folder = ImageFolder::Open(root.string());
  const PackResult result = PackCoefficients(*folder, out, 2, PackCodec::kCoefficientsSmall);
  EXPECT_EQ(result.indexed, folder->size() - 1);
  const auto shards = ShardDataset::Open(out.string());
  std::vector<std::byte> record;
  for (std::size_t i = 0; i < shards->size(); ++i) {
    if (shards->Read(i, record).codec != SampleCodec::kCoefficients) continue;
    EXPECT_EQ(std::to_integer<int>(record[4]), 2) << "record " << i << " is not version 2";
  }
  EXPECT_EQ(VerifyShards(out.string()).size(), 1u);  // only the PNG's note
  for (const Mode mode : {Mode::kTrain, Mode::kEval}) {
    const LoaderOptions options = TestOptions(mode);
    EXPECT_EQ(CollectEpochs(ImageFolder::Open(root.string()), options),
              CollectEpochs(ShardDataset::Open(out.string()), options));
  }
}

TEST(CoefficientShardTest, PackIsVersionThreeAndByteIdenticalWhateverTheWorkerCount) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 3).string());
  PackCoefficients(*folder, dir.path() / "one", 1);
  PackCoefficients(*folder, dir.path() / "three", 3);
  for (const auto& e : fs::directory_iterator(dir.path() / "one")) {
    EXPECT_EQ(ReadFile(e.path()), ReadFile(dir.path() / "three" / e.path().filename()));
  }
  const std::vector<std::byte> shard = ReadFile(dir.path() / "one" / detail::ShardFileName(0));
  const detail::ShardHeader header = detail::ParseShardHeader(shard);
  EXPECT_EQ(header.codec, detail::RecordCodec::kCoefficients);
  EXPECT_EQ(detail::FormatVersionFor(header.codec), 3);
  EXPECT_EQ(std::to_integer<int>(shard[8]), 3);
  EXPECT_EQ(ReadShardManifest((dir.path() / "one").string()).codec, ShardCodec::kCoefficients);
}

TEST(CoefficientShardTest, DamagedRecordIsABadSampleNamingTheRecord) {
  TempDir dir;
  const fs::path root = dir.path() / "folder";
  for (int i = 0; i < 4; ++i) {
    WriteFile(root / "a" / ("img" + std::to_string(i) + ".jpg"),
              testing::MakeJpeg(120, 90, {}, i + 1));
  }
  const fs::path out = dir.path() / "coefficients";
  PackCoefficients(*ImageFolder::Open(root.string()), out);
  // Damage the band table of record 2 behind a valid record checksum: a record that lies
  // about its bands.
  const std::string path = (out / detail::ShardFileName(0)).string();
  RewriteRecord(out, 2, [](std::span<std::byte> record) {
    record[detail::kRecordHeaderSize + 10] ^= std::byte{0x40};  // the height: 90 -> 26
  });

  const auto problems = VerifyShards(out.string());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].where, path + "#2");
  EXPECT_FALSE(problems[0].note);
  EXPECT_NE(problems[0].reason.find("coefficient record"), std::string::npos) << problems[0].reason;

  LoaderOptions options = TestOptions(Mode::kEval);
  options.epochs = 1;
  options.bad_sample_policy = BadSamplePolicy::kFail;
  Loader loader(ShardDataset::Open(out.string()), options);
  try {
    for (Batch& batch : loader) (void)batch;
    FAIL() << "the damaged record was not reported";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("#2"), std::string::npos) << e.what();
  }
}

// A pack of a layout earlier builds wrote (version-1 records, or version 2 with LZ4 or
// zstd groups; crafted here from a coefficients-fast pack by the version or coding byte of
// its records, docs/shard-format.md) is refused when it is opened, in one line that names
// the shard, the record, the layout and the repack command; VerifyShards says the same.
TEST(CoefficientShardTest, PackOfARetiredLayoutIsRefusedWithTheRepackCommand) {
  TempDir dir;
  const fs::path root = dir.path() / "folder";
  WriteFile(root / "a" / "zz_png.jpg", testing::MakePngBytes(16, 4));  // record 0: as it came
  for (int i = 0; i < 3; ++i) {
    WriteFile(root / "b" / ("img" + std::to_string(i) + ".jpg"),
              testing::MakeJpeg(120, 90, {}, i + 1, i == 2 ? 1 : 3));
  }
  const struct {
    const char* layout;
    bool coding;  // the coding byte, else the version byte
    int value;
    const char* codec;
  } cases[] = {{"v1", false, 1, "coefficients-fast"},
               {"v2-lz4", true, 1, "coefficients-fast"},
               {"v2-zstd", true, 2, "coefficients-small"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.layout);
    const fs::path out = dir.path() / c.layout;
    const PackResult result = PackCoefficients(*ImageFolder::Open(root.string()), out);
    ASSERT_EQ(result.records, 4u);
    ASSERT_EQ(result.indexed, 3u);
    for (std::size_t r = 1; r < 4; ++r) {
      RewriteRecord(out, r, [&c](std::span<std::byte> record) {
        const auto payload = record.subspan(detail::kRecordHeaderSize);
        ASSERT_EQ(std::to_integer<int>(payload[4]), 2);
        const std::size_t coding_at = 16 + 3 * std::to_integer<std::size_t>(payload[5]) +
                                      128 * std::to_integer<std::size_t>(payload[12]) + 4;
        payload[c.coding ? coding_at : 4] = std::byte(c.value);
      });
    }
    const std::string path = (out / detail::ShardFileName(0)).string();
    const std::string reason = std::string("record 1 is coefficient layout ") + c.layout +
                               ", retired; repack it: tilefeed-pack SRC OUT --codec " + c.codec;
    try {
      ShardDataset::Open(out.string());
      ADD_FAILURE() << "a pack of a retired layout was opened";
    } catch (const SourceError& e) {
      EXPECT_EQ(e.where(), path);  // what() is "<where>: <reason>"
      EXPECT_EQ(e.reason(), reason);
    }
    const auto problems = VerifyShards(out.string());
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems[0].where, path);
    EXPECT_EQ(problems[0].reason, reason);
  }
}

}  // namespace
}  // namespace tilefeed::loader
