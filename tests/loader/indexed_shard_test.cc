// Tests the indexed-JPEG records of loader/shard_writer.h and
// loader/shard_source.h (PackOptions::codec = kJpegIndex, format version 2) and the
// loader's interval-skipping decode of them: the loader over indexed shards gives the batches it
// gives over the original files, refused files are stored as they came and counted, a damaged index
// is a bad sample named "<shard>#<record>", and version-1 packs are unchanged.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "codecs/jpeg_index.h"
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

// 3 classes of JPEGs large enough for several restart intervals a row, in the encodings
// people meet: 4:2:0, 4:2:2, 4:4:4, progressive, grayscale, with restart markers of
// their own, and one arithmetic-coded file (which the transcoder refuses).
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
      const int channels = n % 6 == 5 ? 1 : 3;
      WriteFile(root / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + ".jpg"),
                testing::MakeJpeg(70 + (n * 37) % 150, 60 + (n * 23) % 130, o, n, channels));
    }
  }
  codecs::EncodeOptions arithmetic;
  arithmetic.arithmetic = true;
  WriteFile(root / "class1" / "zz_arith.jpg", testing::MakeJpeg(96, 80, arithmetic, 99));
  return root;
}

PackResult PackIndexed(const Source& source, const fs::path& out, int workers = 2,
                       std::uint64_t shard_bytes = 64 << 10) {
  PackOptions options;
  options.output_dir = out.string();
  options.shard_bytes = shard_bytes;
  options.codec = PackCodec::kJpegIndex;
  options.workers = workers;
  return PackDataset(source, options);
}

std::string ShardPath(const fs::path& out, int shard) {
  return (out / detail::ShardFileName(static_cast<std::uint32_t>(shard))).string();
}

LoaderOptions TestOptions(Mode mode) {
  return testing::SmallCodecOptions(mode, BadSamplePolicy::kFail);
}

using testing::CollectEpochs;

// Rewrites record `record` of shard `shard` with `edit` applied to its bytes, then
// re-checksums the record, the footer and the manifest, as a writer would have: only the
// checks behind the checksums can then catch the damage.
template <typename Edit>
void RewriteRecord(const fs::path& out, int shard, std::size_t record, Edit edit) {
  const std::string path = ShardPath(out, shard);
  std::vector<std::byte> bytes = ReadFile(path);
  detail::ShardIndex index = detail::ParseShardFooter(bytes, bytes.size());
  detail::IndexEntry& entry = index.entries.at(record);
  edit(std::span(bytes).subspan(entry.offset, entry.size));
  entry.checksum = detail::Checksum(std::span(bytes).subspan(entry.offset, entry.size));
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
  manifest.shards.at(shard).footer_checksum =
      detail::ParseShardFooter(bytes, bytes.size()).footer_checksum;
  const std::string new_text = detail::FormatManifest(manifest);
  WriteFile(manifest_path, std::as_bytes(std::span(new_text)));
}

TEST(IndexedShardTest, LoaderOverIndexedShardsEqualsLoaderOverTheOriginalFiles) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 8);
  const fs::path out = dir.path() / "indexed";
  const auto folder = ImageFolder::Open(root.string());
  const PackResult result = PackIndexed(*folder, out);
  EXPECT_EQ(result.records, folder->size());
  EXPECT_EQ(result.indexed, folder->size() - 1);
  ASSERT_EQ(result.not_indexed.size(), 1u);  // the arithmetic-coded file
  EXPECT_EQ(result.not_indexed[0].category, "unsupported");
  EXPECT_GT(result.index_bytes, 0u);

  const auto shards = ShardDataset::Open(out.string());
  EXPECT_EQ(shards->codec(), ShardCodec::kIndexedJpeg);
  std::vector<std::byte> original, record;
  std::size_t indexed = 0;
  for (std::size_t i = 0; i < shards->size(); ++i) {
    folder->Read(i, original);
    const SampleInfo info = shards->Read(i, record);
    if (info.codec == SampleCodec::kEncoded) {
      EXPECT_EQ(record, original) << "a refused file is stored as it came";
      continue;
    }
    ASSERT_EQ(info.codec, SampleCodec::kIndexedJpeg);
    ++indexed;
    const auto jpeg = std::span<const std::byte>(record).subspan(info.index_size);
    const codecs::JpegIntervalIndex index =
        codecs::ParseIndex(std::span<const std::byte>(record).first(info.index_size), jpeg);
    EXPECT_GE(index.offsets.size(), static_cast<std::size_t>(index.mcu_rows)) << i;
  }
  EXPECT_EQ(indexed, result.indexed);
  EXPECT_TRUE(VerifyShards(out.string()).empty());

  // Transcoding keeps the coefficients and the indexed crop decode equals the ordinary
  // one, so the batches over the original files and over the indexed shards are equal.
  for (const Mode mode : {Mode::kTrain, Mode::kEval}) {
    const LoaderOptions options = TestOptions(mode);
    const auto from_folder = CollectEpochs(ImageFolder::Open(root.string()), options);
    const auto from_shards = CollectEpochs(ShardDataset::Open(out.string()), options);
    EXPECT_EQ(std::get<0>(from_folder).size(), 2u * 7u);  // 25 samples, batches of 4
    EXPECT_EQ(from_folder, from_shards) << (mode == Mode::kTrain ? "train" : "eval");
  }
}

TEST(IndexedShardTest, RefusedFilesAreStoredAsTheyCameAndCountedByReason) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 2);
  WriteFile(root / "class0" / "zz_png.jpg", testing::MakePngBytes());
  WriteFile(root / "class2" / "zz_png.jpg", testing::MakePngBytes(16, 4));
  const auto folder = ImageFolder::Open(root.string());
  const PackResult result = PackIndexed(*folder, dir.path() / "indexed");
  EXPECT_EQ(result.records, folder->size());
  EXPECT_TRUE(result.skipped.empty());
  std::map<std::string, int> by_category;
  for (const PackedSampleNote& note : result.not_indexed) ++by_category[note.category];
  EXPECT_EQ(by_category,
            (std::map<std::string, int>{{"not a JPEG (PNG image)", 2}, {"unsupported", 1}}));
  // PNGs are not suspects: the loader decodes them, and --verify notes them.
  EXPECT_TRUE(result.not_jpeg.empty());
  const auto problems = VerifyShards((dir.path() / "indexed").string());
  ASSERT_EQ(problems.size(), 2u);
  for (const ShardProblem& p : problems) {
    EXPECT_TRUE(p.note) << p.where << ": " << p.reason;
    EXPECT_NE(p.reason.find("PNG"), std::string::npos) << p.reason;
  }
}

// A truncated JPEG cannot be transcoded, so it is stored as it came; --verify reports it.
TEST(IndexedShardTest, VerifyReportsATruncatedJpegStoredAsItCame) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 2);
  std::vector<std::byte> cut = testing::MakeJpeg(64, 48, codecs::EncodeOptions{}, 9);
  cut.resize(cut.size() - 40);
  WriteFile(root / "class0" / "zz_cut.jpg", cut);
  const auto folder = ImageFolder::Open(root.string());
  const PackResult result = PackIndexed(*folder, dir.path() / "indexed");
  EXPECT_EQ(result.records, folder->size());
  const auto problems = VerifyShards((dir.path() / "indexed").string());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_FALSE(problems[0].note);
  EXPECT_NE(problems[0].reason.find("truncated JPEG"), std::string::npos) << problems[0].reason;
}

TEST(IndexedShardTest, PackIsByteIdenticalWhateverTheWorkerCount) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 4).string());
  PackIndexed(*folder, dir.path() / "one", 1, 16 << 10);
  PackIndexed(*folder, dir.path() / "three", 3, 16 << 10);
  std::map<std::string, std::vector<std::byte>> one, three;
  for (const auto& e : fs::directory_iterator(dir.path() / "one")) {
    one[e.path().filename().string()] = ReadFile(e.path());
  }
  for (const auto& e : fs::directory_iterator(dir.path() / "three")) {
    three[e.path().filename().string()] = ReadFile(e.path());
  }
  EXPECT_GT(one.size(), 2u);
  EXPECT_EQ(one, three);
}

TEST(IndexedShardTest, DamagedIndexIsABadSampleNamingTheRecord) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 3);
  const fs::path out = dir.path() / "indexed";
  PackIndexed(*ImageFolder::Open(root.string()), out, 2, 1 << 20);
  const auto first = ShardDataset::Open(out.string());
  ASSERT_EQ(first->shard_count(), 1u);
  // Records 0, 1 and 2 are indexed (the arithmetic file sorts last in its class).
  std::vector<std::byte> record;
  std::vector<std::uint32_t> index_size;
  for (std::size_t r = 0; r < 3; ++r) {
    const SampleInfo info = first->Read(r, record);
    ASSERT_EQ(info.codec, SampleCodec::kIndexedJpeg);
    index_size.push_back(info.index_size);
  }
  // Layer 1: a flipped index byte without a new checksum is a record checksum mismatch.
  // Layer 2: with the record re-checksummed, ParseIndex catches it (record 1: the last
  // delta; record 2: the magic).
  RewriteRecord(out, 0, 1, [&](std::span<std::byte> bytes) {
    bytes[detail::kRecordHeaderSize + index_size[1] - 1] ^= std::byte{0x01};
  });
  RewriteRecord(out, 0, 2, [&](std::span<std::byte> bytes) {
    bytes[detail::kRecordHeaderSize] ^= std::byte{0x20};
  });
  {
    const std::string path = ShardPath(out, 0);
    std::vector<std::byte> bytes = ReadFile(path);
    const detail::ShardIndex index = detail::ParseShardFooter(bytes, bytes.size());
    bytes[index.entries[0].offset + detail::kRecordHeaderSize + 2] ^= std::byte{0x04};
    WriteFile(path, bytes);
  }
  const auto shards = ShardDataset::Open(out.string());
  EXPECT_THROW(shards->Read(0, record), SourceError);
  const SampleInfo info = shards->Read(1, record);  // the record layer cannot tell
  EXPECT_EQ(info.codec, SampleCodec::kIndexedJpeg);

  LoaderOptions options = TestOptions(Mode::kTrain);
  options.epochs = 1;
  options.bad_sample_policy = BadSamplePolicy::kSkip;
  Loader loader(ShardDataset::Open(out.string()), options);
  std::size_t images = 0;
  for (Batch& batch : loader) images += batch.size();
  EXPECT_EQ(images, shards->size());  // substitutes fill the bad samples' rows
  std::map<std::string, std::string> bad;
  for (const BadSample& b : loader.bad_samples()) bad[b.where] = b.reason;
  ASSERT_EQ(bad.size(), 3u);
  const std::string shard = ShardPath(out, 0);
  EXPECT_NE(bad[shard + "#0"].find("record checksum mismatch"), std::string::npos)
      << bad[shard + "#0"];
  EXPECT_NE(bad[shard + "#1"].find("interval index"), std::string::npos) << bad[shard + "#1"];
  EXPECT_NE(bad[shard + "#2"].find("interval index"), std::string::npos) << bad[shard + "#2"];

  // --verify reports the same three records.
  const auto problems = VerifyShards(out.string());
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[1].where, shard + "#1");
  EXPECT_NE(problems[1].reason.find("interval index"), std::string::npos);
}

TEST(IndexedShardTest, IndexLengthThatDoesNotFitIsRefusedBeforeUse) {
  TempDir dir;
  const fs::path out = dir.path() / "indexed";
  PackIndexed(*ImageFolder::Open(MakeFolder(dir, 1).string()), out, 2, 1 << 20);
  // The u24 index length at record bytes 5..7: zero, and past the payload.
  RewriteRecord(out, 0, 0,
                [](std::span<std::byte> bytes) { bytes[5] = bytes[6] = bytes[7] = std::byte{0}; });
  RewriteRecord(out, 0, 1, [](std::span<std::byte> bytes) {
    bytes[5] = bytes[6] = bytes[7] = std::byte{0xFF};
  });
  const auto shards = ShardDataset::Open(out.string());
  std::vector<std::byte> record;
  for (std::size_t r : {0, 1}) {
    try {
      shards->Read(r, record);
      ADD_FAILURE() << "record " << r << " was read";
    } catch (const SourceError& e) {
      EXPECT_EQ(e.where(), ShardPath(out, 0) + "#" + std::to_string(r));
      EXPECT_NE(e.reason().find("interval index length"), std::string::npos) << e.reason();
    }
  }
  EXPECT_NO_THROW(shards->Read(2, record));
}

TEST(IndexedShardTest, PlainPacksStayVersionOneAndIndexedPacksAreVersionTwo) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 1).string());
  PackOptions plain;
  plain.output_dir = (dir.path() / "plain").string();
  PackDataset(*folder, plain);
  PackIndexed(*folder, dir.path() / "indexed");
  auto version = [](const std::string& path) {
    const std::vector<std::byte> bytes = ReadFile(path);
    return std::to_integer<int>(bytes[8]) | std::to_integer<int>(bytes[9]) << 8;
  };
  auto first_line = [](const fs::path& dir) {
    const std::vector<std::byte> bytes = ReadFile(dir / detail::kManifestFileName);
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return text.substr(0, text.find('\n'));
  };
  EXPECT_EQ(version(ShardPath(dir.path() / "plain", 0)), 1);
  EXPECT_EQ(first_line(dir.path() / "plain"), "tilefeed-shards 1");
  EXPECT_EQ(version(ShardPath(dir.path() / "indexed", 0)), 2);
  EXPECT_EQ(first_line(dir.path() / "indexed"), "tilefeed-shards 2");
  // Version-1 shards read as before: plain JPEG records.
  const auto shards = ShardDataset::Open(plain.output_dir);
  std::vector<std::byte> record;
  EXPECT_EQ(shards->Read(0, record).codec, SampleCodec::kEncoded);
  EXPECT_TRUE(VerifyShards(plain.output_dir).empty());

  // Header and manifest must carry the version their codec implies.
  auto head = detail::EncodeShardHeader({detail::RecordCodec::kIndexedJpeg, 0, 1});
  EXPECT_EQ(detail::ParseShardHeader(head).codec, detail::RecordCodec::kIndexedJpeg);
  head[8] = std::byte{1};
  const std::uint64_t sum = detail::Checksum(std::span(head).first(24));
  for (int i = 0; i < 8; ++i) head[24 + i] = static_cast<std::byte>(sum >> (8 * i));
  EXPECT_THROW(detail::ParseShardHeader(head), detail::ShardFormatError);
  detail::Manifest manifest;
  manifest.codec = detail::RecordCodec::kIndexedJpeg;
  manifest.records = 1;
  manifest.shards = {{"shard-00000.tfs", 1, 100, 7}};
  EXPECT_EQ(detail::ParseManifest(detail::FormatManifest(manifest)).codec,
            detail::RecordCodec::kIndexedJpeg);
  manifest.codec = detail::RecordCodec::kJpeg;
  std::string text = detail::FormatManifest(manifest);
  ASSERT_EQ(text.rfind("tilefeed-shards 1\n", 0), 0u);
  text[16] = '2';
  text.resize(text.rfind("checksum "));
  const std::uint64_t text_sum = detail::Checksum(std::as_bytes(std::span(text)));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(text_sum));
  text += std::string("checksum ") + hex + "\n";
  try {
    detail::ParseManifest(text);
    ADD_FAILURE() << "a version-2 manifest of codec jpeg was accepted";
  } catch (const detail::ShardFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("version 2"), std::string::npos) << e.what();
  }
}

TEST(IndexedShardTest, CheckRecordAcceptsPlainJpegRecordsOnlyInIndexedShards) {
  const std::vector<std::byte> payload(40, std::byte{0xAB});
  auto check = [&](detail::RecordCodec record, std::uint32_t index_size,
                   detail::RecordCodec shard) {
    const auto header = detail::EncodeRecordHeader(3, record, index_size);
    const detail::IndexEntry entry{detail::kShardHeaderSize,
                                   detail::RecordChecksum(header, payload),
                                   static_cast<std::uint32_t>(header.size() + payload.size()), 3};
    return detail::CheckRecord(header, payload, entry, shard);
  };
  using detail::RecordCodec;
  EXPECT_EQ(check(RecordCodec::kJpeg, 0, RecordCodec::kIndexedJpeg), "");
  EXPECT_EQ(check(RecordCodec::kIndexedJpeg, 39, RecordCodec::kIndexedJpeg), "");
  EXPECT_NE(check(RecordCodec::kIndexedJpeg, 39, RecordCodec::kJpeg), "");
  EXPECT_NE(check(RecordCodec::kLz4Raw, 0, RecordCodec::kIndexedJpeg), "");
  const auto header = detail::EncodeRecordHeader(3, RecordCodec::kIndexedJpeg, 0x123456);
  EXPECT_EQ(detail::ReadRecordLayout(header).index_size, 0x123456u);
  EXPECT_EQ(detail::ReadRecordLayout(header).codec, RecordCodec::kIndexedJpeg);
}

}  // namespace
}  // namespace tilefeed::loader
