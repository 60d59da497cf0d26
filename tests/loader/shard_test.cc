// Tests loader/shard_writer.h, loader/shard_source.h and
// loader/shard_format.h: packing round trips, corruption detection at open and at
// read, determinism, and the loader over shards vs. over the folder they were packed from.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "codecs/raw.h"
#include "loader/cifar.h"
#include "loader/image_folder.h"
#include "loader/shard_format.h"
#include "loader/shard_source.h"
#include "loader/shard_writer.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;
using testing::XorByte;

// 3 classes of `per_class` JPEGs of varied size and encoding under dir/folder.
fs::path MakeFolder(const TempDir& dir, int per_class, int min_side = 24) {
  fs::path root = dir.path() / "folder";
  int n = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < per_class; ++i, ++n) {
      codecs::EncodeOptions o;
      o.progressive = n % 5 == 2;
      WriteFile(root / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + ".jpg"),
                testing::MakeJpeg(min_side + (n * 13) % 40, min_side + (n * 7) % 30, o, n));
    }
  }
  return root;
}

PackResult Pack(const Source& source, const fs::path& out, std::uint64_t shard_bytes = 8192,
                PackCodec codec = PackCodec::kJpeg, int workers = 2) {
  PackOptions options;
  options.output_dir = out.string();
  options.shard_bytes = shard_bytes;
  options.codec = codec;
  options.workers = workers;
  return PackDataset(source, options);
}

std::string ShardPath(const fs::path& out, int shard) {
  return (out / detail::ShardFileName(static_cast<std::uint32_t>(shard))).string();
}

// The parsed index of a shard file, for locating records in corruption tests.
detail::ShardIndex IndexOf(const std::string& path) {
  const std::vector<std::byte> bytes = ReadFile(path);
  return detail::ParseShardFooter(bytes, bytes.size());
}

std::map<std::string, std::vector<std::byte>> ReadTree(const fs::path& dir) {
  std::map<std::string, std::vector<std::byte>> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadFile(entry.path());
  }
  return files;
}

TEST(ShardTest, PackThenReadGivesTheFolderSamples) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 8).string());
  const fs::path out = dir.path() / "shards";
  const PackResult result = Pack(*folder, out);
  EXPECT_EQ(result.records, folder->size());
  EXPECT_TRUE(result.skipped.empty());
  EXPECT_TRUE(result.not_jpeg.empty());

  const auto shards = ShardDataset::Open(out.string());
  ASSERT_EQ(shards->size(), folder->size());
  EXPECT_GT(shards->shard_count(), 1u);
  EXPECT_EQ(shards->shard_count(), result.shards);
  EXPECT_EQ(shards->class_names(), folder->class_names());
  EXPECT_EQ(shards->codec(), ShardCodec::kJpeg);
  std::vector<std::byte> a, b;
  for (std::size_t i = 0; i < folder->size(); ++i) {
    const SampleInfo fi = folder->Read(i, a);
    const SampleInfo si = shards->Read(i, b);
    EXPECT_EQ(si.label, fi.label) << i;
    EXPECT_EQ(si.codec, SampleCodec::kEncoded);
    EXPECT_EQ(shards->Label(i), fi.label);
    EXPECT_EQ(a, b) << i;
    EXPECT_NE(shards->Describe(i).find(".tfs#"), std::string::npos);
  }
  EXPECT_EQ(shards->Describe(0), ShardPath(out, 0) + "#0");
  // The manifest file itself opens too, and the inspector's view agrees.
  const auto again = ShardDataset::Open((out / "tilefeed-manifest.txt").string());
  EXPECT_EQ(again->size(), folder->size());
  const ShardManifest manifest = ReadShardManifest(out.string());
  EXPECT_EQ(manifest.records, folder->size());
  EXPECT_EQ(manifest.shards.size(), result.shards);
  EXPECT_TRUE(IsShardDataset(out.string()));
  EXPECT_FALSE(IsShardDataset(dir.path() / "folder"));
  EXPECT_TRUE(VerifyShards(out.string()).empty());
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_NE(entry.path().extension(), ".tmp");
  }
}

TEST(ShardTest, EveryFlippedRecordByteIsASourceErrorNamingTheRecord) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 2, 8).string());
  const fs::path out = dir.path() / "shards";
  Pack(*folder, out, 1 << 20);
  const auto shards = ShardDataset::Open(out.string());
  const std::string path = ShardPath(out, 0);
  const detail::ShardIndex index = IndexOf(path);
  ASSERT_EQ(index.entries.size(), shards->size());
  const std::size_t r = 3;
  const detail::IndexEntry& e = index.entries[r];
  std::vector<std::byte> buffer;
  // Record header (label, codec, reserved) and every payload byte, bit 0 and bit 7.
  for (std::uint64_t at = e.offset; at < e.offset + e.size; ++at) {
    for (std::uint8_t mask : {0x01, 0x80}) {
      XorByte(path, at, mask);
      try {
        shards->Read(r, buffer);
        ADD_FAILURE() << "flip at offset " << at << " not detected";
      } catch (const SourceError& error) {
        EXPECT_EQ(error.where(), path + "#3");
        EXPECT_NE(error.reason().find("checksum"), std::string::npos) << error.reason();
      }
      XorByte(path, at, mask);
    }
  }
  EXPECT_NO_THROW(shards->Read(r, buffer));
  // The inspector's verify names the record too.
  XorByte(path, e.offset + e.size - 1, 0x10);
  const auto problems = VerifyShards(out.string());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].where, path + "#3");
}

TEST(ShardTest, EveryFlippedHeaderOrIndexByteIsRejectedAtOpen) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 2, 8).string());
  const fs::path out = dir.path() / "shards";
  Pack(*folder, out, 1 << 20);
  const std::string path = ShardPath(out, 0);
  const std::uint64_t file_size = fs::file_size(path);
  const detail::ShardIndex index = IndexOf(path);
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t at = 0; at < detail::kShardHeaderSize; ++at) offsets.push_back(at);
  for (std::uint64_t at = index.index_offset; at < file_size; ++at) offsets.push_back(at);
  for (std::uint64_t at : offsets) {
    for (std::uint8_t mask : {0x01, 0x80}) {
      XorByte(path, at, mask);
      try {
        ShardDataset::Open(out.string());
        ADD_FAILURE() << "flip at offset " << at << " not detected";
      } catch (const SourceError& error) {
        EXPECT_EQ(error.where(), path) << error.what();
      }
      XorByte(path, at, mask);
    }
  }
  // Every manifest byte is covered by the manifest checksum.
  const std::string manifest = (out / "tilefeed-manifest.txt").string();
  for (std::uint64_t at = 0; at < fs::file_size(manifest); ++at) {
    XorByte(manifest, at, 0x01);
    try {
      ShardDataset::Open(out.string());
      ADD_FAILURE() << "manifest flip at offset " << at << " not detected";
    } catch (const SourceError& error) {
      EXPECT_EQ(error.where(), manifest) << error.what();
    }
    XorByte(manifest, at, 0x01);
  }
  EXPECT_NO_THROW(ShardDataset::Open(out.string()));
}

TEST(ShardTest, TruncatedForeignAndMissingFilesAreRejectedAtOpenByName) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 4).string());
  const fs::path out = dir.path() / "shards";
  Pack(*folder, out);
  const std::string path = ShardPath(out, 1);
  const std::vector<std::byte> original = ReadFile(path);

  for (std::size_t keep : {original.size() - 1, original.size() / 2, std::size_t{10}}) {
    fs::resize_file(path, keep);
    try {
      ShardDataset::Open(out.string());
      ADD_FAILURE() << "truncation to " << keep << " not detected";
    } catch (const SourceError& error) {
      EXPECT_EQ(error.where(), path);
      EXPECT_NE(error.reason().find("truncated"), std::string::npos) << error.reason();
    }
  }
  // A foreign file of the right size: the magic is checked first.
  std::vector<std::byte> foreign = original;
  constexpr char kNotAShard[] = "NOTASHRD";
  std::memcpy(foreign.data(), kNotAShard, 8);
  WriteFile(path, foreign);
  try {
    ShardDataset::Open(out.string());
    ADD_FAILURE() << "wrong magic not detected";
  } catch (const SourceError& error) {
    EXPECT_EQ(error.where(), path);
    EXPECT_NE(error.reason().find("magic"), std::string::npos) << error.reason();
  }
  // A shard of another pack in its place: right size is unlikely, so swap two shards.
  WriteFile(path, ReadFile(ShardPath(out, 0)));
  EXPECT_THROW(ShardDataset::Open(out.string()), SourceError);
  fs::remove(path);
  try {
    ShardDataset::Open(out.string());
    ADD_FAILURE() << "missing shard not detected";
  } catch (const SourceError& error) {
    EXPECT_EQ(error.where(), path);
  }
  WriteFile(path, original);
  EXPECT_NO_THROW(ShardDataset::Open(out.string()));
  try {
    ShardDataset::Open((dir.path() / "nowhere").string());
    ADD_FAILURE();
  } catch (const SourceError& error) {
    EXPECT_NE(error.where().find("nowhere"), std::string::npos);
  }
}

TEST(ShardTest, PackIsByteIdenticalWhateverTheWorkerCount) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 10).string());
  Pack(*folder, dir.path() / "a", 8192, PackCodec::kJpeg, 1);
  Pack(*folder, dir.path() / "b", 8192, PackCodec::kJpeg, 4);
  const auto a = ReadTree(dir.path() / "a");
  EXPECT_GT(a.size(), 3u);
  EXPECT_EQ(a, ReadTree(dir.path() / "b"));
  // Raw conversion (decode + resize + LZ4) is deterministic too.
  for (const char* name : {"raw1", "raw3"}) {
    PackOptions options;
    options.output_dir = (dir.path() / name).string();
    options.shard_bytes = 8192;
    options.codec = PackCodec::kRaw;
    options.raw_width = 20;
    options.raw_height = 20;
    options.workers = name[3] - '0';
    PackDataset(*folder, options);
  }
  EXPECT_EQ(ReadTree(dir.path() / "raw1"), ReadTree(dir.path() / "raw3"));
}

TEST(ShardTest, RefusesANonEmptyOutputWithoutForceAndLeavesForeignFiles) {
  TempDir dir;
  const auto folder = ImageFolder::Open(MakeFolder(dir, 3).string());
  const fs::path out = dir.path() / "shards";
  WriteFile(out / "notes.txt", testing::MakeTextBytes());
  EXPECT_THROW(Pack(*folder, out), PackError);
  PackOptions options;
  options.output_dir = out.string();
  options.shard_bytes = 4096;
  options.force = true;
  const PackResult many = PackDataset(*folder, options);
  options.shard_bytes = 1 << 20;
  const PackResult one = PackDataset(*folder, options);
  EXPECT_GT(many.shards, 1u);
  EXPECT_EQ(one.shards, 1u);
  // Old shards are gone, the stranger stays, the pack lock's file (empty once a pack is done)
  // stays: notes.txt, .tilefeed-pack.lock, manifest, shard-00000.tfs.
  EXPECT_EQ(ReadTree(out).size(), 4u);
  EXPECT_TRUE(ReadTree(out)[".tilefeed-pack.lock"].empty());
  EXPECT_TRUE(fs::exists(out / "notes.txt"));
  EXPECT_EQ(ShardDataset::Open(out.string())->size(), folder->size());
}

// A CIFAR-10 test split of `count` records whose pixels differ everywhere.
fs::path WriteCifarTest(const TempDir& dir, int count) {
  fs::path root = dir.path() / "cifar";
  std::vector<std::byte> bytes;
  for (int r = 0; r < count; ++r) {
    bytes.push_back(static_cast<std::byte>(r % 10));
    for (int o = 0; o < 3072; ++o) bytes.push_back(static_cast<std::byte>((r * 31 + o * 7) & 0xFF));
  }
  WriteFile(root / "test_batch.bin", bytes);
  return root;
}

TEST(ShardTest, AFailedPackLeavesNoManifestOrShard) {
  TempDir dir;
  const auto cifar = Cifar10::Open(WriteCifarTest(dir, 40).string(), Split::kVal);
  const fs::path out = dir.path() / "shards";
  // Pixels cannot be stored as JPEG: the pack stops at the first sample.
  EXPECT_THROW(Pack(*cifar, out, 4096, PackCodec::kJpeg), PackError);
  EXPECT_EQ(ReadTree(out).size(), 1u);  // the pack lock's file alone
  EXPECT_TRUE(fs::exists(out / ".tilefeed-pack.lock"));
}

TEST(ShardTest, RawRecordsRoundTripBitExact) {
  TempDir dir;
  const auto cifar = Cifar10::Open(WriteCifarTest(dir, 50).string(), Split::kVal);
  const fs::path out = dir.path() / "shards";
  const PackResult result = Pack(*cifar, out, 16384, PackCodec::kRaw);
  EXPECT_EQ(result.records, 50u);
  const auto shards = ShardDataset::Open(out.string());
  ASSERT_EQ(shards->size(), 50u);
  EXPECT_GT(shards->shard_count(), 1u);
  EXPECT_EQ(shards->class_names(), cifar->class_names());
  std::vector<std::byte> pixels, record;
  for (std::size_t i = 0; i < cifar->size(); ++i) {
    const SampleInfo ci = cifar->Read(i, pixels);
    const SampleInfo si = shards->Read(i, record);
    EXPECT_EQ(si.label, ci.label);
    ASSERT_EQ(si.codec, SampleCodec::kLz4Raw);
    const codecs::RawInfo info = codecs::ReadRawInfo(record);
    EXPECT_EQ(info, (codecs::RawInfo{32, 32, 3}));
    std::vector<std::uint8_t> decoded(info.pixel_bytes());
    codecs::DecodeRawInto(record, decoded);
    ASSERT_EQ(decoded.size(), pixels.size());
    EXPECT_TRUE(std::equal(decoded.begin(), decoded.end(), pixels.begin(),
                           [](std::uint8_t d, std::byte p) { return d == std::uint8_t(p); }))
        << i;
  }
  EXPECT_TRUE(VerifyShards(out.string()).empty());
}

TEST(ShardTest, RawCodecDecodesJpegsAndPngsAndReportsTheOnesItCannot) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 3);
  WriteFile(root / "class1" / "zz_png.jpg", testing::MakePngBytes());
  WriteFile(root / "class2" / "zz_empty.jpg", {});
  const auto folder = ImageFolder::Open(root.string());
  PackOptions options;
  options.output_dir = (dir.path() / "raw").string();
  options.codec = PackCodec::kRaw;
  options.raw_width = 16;
  options.raw_height = 12;
  const PackResult raw = PackDataset(*folder, options);
  EXPECT_EQ(raw.records, folder->size() - 1);
  ASSERT_EQ(raw.skipped.size(), 1u);
  EXPECT_EQ(raw.skipped[0].where, root.string() + "/class2/zz_empty.jpg");
  const auto shards = ShardDataset::Open(options.output_dir);
  std::vector<std::byte> record;
  for (std::size_t i = 0; i < shards->size(); ++i) {
    shards->Read(i, record);
    EXPECT_EQ(codecs::ReadRawInfo(record), (codecs::RawInfo{12, 16, 3}));
  }
  // In jpeg mode both are stored as they are; the empty one is named as a suspect, and
  // --verify fails it and notes the PNG.
  const PackResult jpeg = Pack(*folder, dir.path() / "jpeg");
  EXPECT_EQ(jpeg.records, folder->size());
  ASSERT_EQ(jpeg.not_jpeg.size(), 1u);
  EXPECT_EQ(jpeg.not_jpeg[0].where, root.string() + "/class2/zz_empty.jpg");
  const auto problems = VerifyShards((dir.path() / "jpeg").string());
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_TRUE(problems[0].note) << problems[0].reason;
  EXPECT_NE(problems[0].reason.find("PNG"), std::string::npos) << problems[0].reason;
  EXPECT_FALSE(problems[1].note);
  EXPECT_NE(problems[1].reason.find("empty"), std::string::npos) << problems[1].reason;
}

// A truncated or corrupt JPEG packs (its bytes are stored as they are, with a good
// checksum) and --verify reports it by decoding the entropy-coded data; so is a PNG that
// does not decode.
TEST(ShardTest, VerifyReportsTruncatedJpegsAndBrokenPngs) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 3);
  std::vector<std::byte> cut = testing::MakeJpeg(64, 48, codecs::EncodeOptions{}, 5);
  cut.resize(cut.size() * 2 / 3);
  WriteFile(root / "class0" / "zz_cut.jpg", cut);
  std::vector<std::byte> png = testing::MakePngBytes(16, 16);
  png.resize(png.size() - 20);
  WriteFile(root / "class1" / "zz_cut_png.png", png);
  const auto folder = ImageFolder::Open(root.string());
  Pack(*folder, dir.path() / "jpeg");
  const auto problems = VerifyShards((dir.path() / "jpeg").string());
  ASSERT_EQ(problems.size(), 2u);
  for (const ShardProblem& p : problems) {
    EXPECT_FALSE(p.note) << p.where;
    EXPECT_NE(p.reason.find("truncated"), std::string::npos) << p.reason;
  }
  EXPECT_NE(problems[0].reason.find("JPEG"), std::string::npos) << problems[0].reason;
  EXPECT_NE(problems[1].reason.find("PNG"), std::string::npos) << problems[1].reason;
}

TEST(ShardTest, LoaderGivesTheSameBatchesAsOverTheFolder) {
  TempDir dir;
  const fs::path root = MakeFolder(dir, 7);
  const fs::path out = dir.path() / "shards";
  Pack(*ImageFolder::Open(root.string()), out);
  LoaderOptions options;
  options.batch_size = 4;
  options.image_size = 24;
  options.workers = 2;
  options.prefetch_depth = 2;
  options.seed = 11;
  options.epochs = 2;
  options.bad_sample_policy = BadSamplePolicy::kFail;
  auto collect = [&](std::unique_ptr<Source> source) {
    Loader loader(std::move(source), options);
    std::vector<std::vector<std::uint8_t>> images;
    std::vector<std::int32_t> labels;
    std::vector<std::uint64_t> indices;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (Batch& batch : loader) {
        images.emplace_back(batch.images().begin(), batch.images().end());
        labels.insert(labels.end(), batch.labels().begin(), batch.labels().end());
        indices.insert(indices.end(), batch.sample_indices().begin(), batch.sample_indices().end());
      }
    }
    return std::make_tuple(images, labels, indices);
  };
  const auto from_folder = collect(ImageFolder::Open(root.string()));
  const auto from_shards = collect(ShardDataset::Open(out.string()));
  EXPECT_EQ(std::get<0>(from_folder).size(), 2u * 6u);  // 21 samples, batches of 4, padded
  EXPECT_EQ(from_folder, from_shards);
}

TEST(ShardFormatTest, ParsersRejectDamageWithoutReadingOutOfBounds) {
  // A valid footer for three records, then every truncation and many random damages.
  std::vector<std::byte> footer;
  std::uint64_t offset = detail::kShardHeaderSize;
  for (std::uint32_t size : {10u, 8u, 300u}) {
    detail::AppendIndexEntry({offset, 42, size, 1}, footer);
    offset += size;
  }
  detail::AppendTrailer(offset, 3, footer);
  const std::uint64_t file_size = offset + footer.size();
  EXPECT_EQ(detail::ParseShardFooter(footer, file_size).entries.size(), 3u);
  for (std::size_t keep = 0; keep < footer.size(); ++keep) {
    const auto tail = std::span(footer).last(keep);
    EXPECT_THROW(detail::ParseShardFooter(tail, file_size), detail::ShardFormatError);
    EXPECT_THROW(detail::ParseShardFooter(tail, offset + keep), detail::ShardFormatError);
  }
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::byte> damaged = footer;
    damaged[rng() % damaged.size()] ^= static_cast<std::byte>(1 + rng() % 255);
    EXPECT_THROW(detail::ParseShardFooter(damaged, file_size), detail::ShardFormatError);
    std::vector<std::byte> noise(rng() % 200);
    for (auto& b : noise) b = static_cast<std::byte>(rng());
    EXPECT_THROW(detail::ParseShardFooter(noise, rng()), detail::ShardFormatError);
    EXPECT_THROW(detail::ParseShardHeader(noise), detail::ShardFormatError);
  }
  detail::Manifest manifest;
  manifest.records = 5;
  manifest.class_names = {"a", "b c", ""};
  manifest.shards = {{"shard-00000.tfs", 2, 100, 7}, {"shard-00001.tfs", 3, 90, 8}};
  const std::string text = detail::FormatManifest(manifest);
  const detail::Manifest parsed = detail::ParseManifest(text);
  EXPECT_EQ(parsed.class_names, manifest.class_names);
  EXPECT_EQ(parsed.shards.size(), 2u);
  EXPECT_EQ(parsed.shards[1].footer_checksum, 8u);
  for (std::size_t keep = 0; keep < text.size(); ++keep) {
    EXPECT_THROW(detail::ParseManifest(std::string_view(text).substr(0, keep)),
                 detail::ShardFormatError);
  }
}

}  // namespace
}  // namespace tilefeed::loader
