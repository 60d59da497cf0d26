// Tests tilefeed/loader/dataset.h: what a location means (ImageFolder, train/ + val/ splits, shards
// of every codec, CIFAR-10), the one-line refusals, and that a folder and its packs give
// the same identity and byte-identical batches.

#include "tilefeed/loader/dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "loader/cifar.h"
#include "loader/shard_writer.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteFile;

// `classes` class directories of `per_class` JPEGs each under `root`.
void MakeFolder(const fs::path& root, int classes, int per_class, int seed = 0) {
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      const int n = seed + c * per_class + i;
      // Two path appends, not string concatenation: g++ 12 -O3 warns (-Wrestrict) wrongly
      // on "c" + std::to_string(c).
      const fs::path file = root / "c" += std::to_string(c);
      WriteFile(file / "img" += std::to_string(i) + ".JPEG",
                testing::MakeJpeg(40 + n % 23, 36 + n % 17, codecs::EncodeOptions{}, n));
    }
  }
}

void Pack(const Source& source, const fs::path& out, PackCodec codec) {
  PackOptions options;
  options.output_dir = out.string();
  options.shard_bytes = 16 << 10;
  options.codec = codec;
  options.raw_width = 24;  // used by PackCodec::kRaw only
  options.raw_height = 24;
  options.workers = 2;
  PackDataset(source, options);
}

void MakeCifar(const fs::path& dir, const char* name, int records) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(records) * Cifar10::kRecordBytes);
  for (int r = 0; r < records; ++r) {
    bytes[static_cast<std::size_t>(r) * Cifar10::kRecordBytes] = std::byte(r % 10);
  }
  WriteFile(dir / name, bytes);
}

// Every batch's pixels and labels, concatenated, from `n` batches of `source`.
std::vector<std::uint8_t> Batches(std::unique_ptr<Source> source, int n) {
  LoaderOptions options;
  options.batch_size = 4;
  options.image_size = 24;
  options.workers = 2;
  options.seed = 7;
  options.epochs = 1;
  Loader loader(std::move(source), options);
  std::vector<std::uint8_t> out;
  for (int i = 0; i < n; ++i) {
    auto batch = loader.Next();
    if (!batch) break;
    auto pixels = batch->images();
    out.insert(out.end(), pixels.begin(), pixels.end());
    for (std::int32_t label : batch->labels()) out.push_back(static_cast<std::uint8_t>(label));
  }
  return out;
}

TEST(OpenDataset, ImageFolder) {
  TempDir dir;
  MakeFolder(dir.path() / "data", 3, 4);
  const OpenedDataset d = OpenDataset((dir.path() / "data/").string());
  EXPECT_EQ(d.location.kind, DatasetKind::kImageFolder);
  EXPECT_FALSE(d.location.split.has_value());
  EXPECT_EQ(d.source->size(), 12u);
  EXPECT_EQ(d.source->class_names(), (std::vector<std::string>{"c0", "c1", "c2"}));
  EXPECT_NE(d.summary.find("12 samples, 3 classes"), std::string::npos) << d.summary;
}

TEST(OpenDataset, SplitRootOpensTheSplitAskedForNeverTwoClasses) {
  TempDir dir;
  MakeFolder(dir.path() / "train", 2, 5);
  MakeFolder(dir.path() / "val", 2, 3, 100);
  const OpenedDataset train = OpenDataset(dir.path().string());
  EXPECT_EQ(train.location.split, Split::kTrain);
  EXPECT_EQ(train.location.path, (dir.path() / "train").string());
  EXPECT_EQ(train.source->size(), 10u);
  EXPECT_EQ(train.source->class_names(), (std::vector<std::string>{"c0", "c1"}));

  DatasetOptions val_options;
  val_options.split = Split::kVal;
  const OpenedDataset val = OpenDataset(dir.path().string(), val_options);
  EXPECT_EQ(val.source->size(), 6u);

  // A forced kind does not turn the splits into classes either.
  DatasetOptions forced;
  forced.kind = DatasetKind::kImageFolder;
  EXPECT_EQ(OpenDataset(dir.path().string(), forced).source->class_names().size(), 2u);
  EXPECT_TRUE(HasSplit(dir.path().string(), Split::kVal));
  EXPECT_FALSE(HasSplit((dir.path() / "train").string(), Split::kVal));
}

TEST(OpenDataset, MissingSplitIsOneLineNamingIt) {
  TempDir dir;
  MakeFolder(dir.path() / "train", 2, 2);
  DatasetOptions options;
  options.split = Split::kVal;
  try {
    OpenDataset(dir.path().string(), options);
    FAIL() << "opened a split that does not exist";
  } catch (const SourceError& e) {
    EXPECT_NE(std::string(e.what()).find("no val/ split"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(HasSplit(dir.path().string(), Split::kVal));
}

// Every split is its folder of the root, test/ included; a root with any of the three is a
// split root.
TEST(OpenDataset, EverySplitIsItsFolder) {
  TempDir dir;
  MakeFolder(dir.path() / "train", 2, 4);
  MakeFolder(dir.path() / "val", 2, 3, 100);
  MakeFolder(dir.path() / "test", 2, 2, 200);
  for (const auto& [split, samples] :
       {std::pair{Split::kTrain, 8u}, std::pair{Split::kVal, 6u}, std::pair{Split::kTest, 4u}}) {
    DatasetOptions options;
    options.split = split;
    const OpenedDataset d = OpenDataset(dir.path().string(), options);
    EXPECT_EQ(d.location.path, (dir.path() / ToString(split)).string());
    EXPECT_EQ(d.location.split, split);
    EXPECT_EQ(d.source->size(), samples) << ToString(split);
    EXPECT_TRUE(HasSplit(dir.path().string(), split));
  }
  TempDir only_test;
  MakeFolder(only_test.path() / "test", 2, 2);
  DatasetOptions test;
  test.split = Split::kTest;
  EXPECT_EQ(OpenDataset(only_test.path().string(), test).source->size(), 4u);
  try {
    OpenDataset(only_test.path().string());  // train
    FAIL() << "a root with only test/ opened as train";
  } catch (const SourceError& e) {
    EXPECT_EQ(std::string(e.what()), only_test.path().string() +
                                         ": no train/ split; it has test/ (a root with train/, "
                                         "val/ or test/ holds splits, not classes)");
  }
}

TEST(OpenDataset, AMissingSplitNamesTheSplitsTheRootHas) {
  TempDir dir;
  MakeFolder(dir.path() / "train", 2, 2);
  MakeFolder(dir.path() / "val", 2, 1, 100);
  DatasetOptions options;
  options.split = Split::kTest;
  try {
    OpenDataset(dir.path().string(), options);
    FAIL() << "opened a split that does not exist";
  } catch (const SourceError& e) {
    EXPECT_EQ(e.where(), dir.path().string());
    EXPECT_EQ(e.reason(),
              "no test/ split; it has train/ and val/ (a root with train/, val/ or test/ holds "
              "splits, not classes)");
  }
}

// A dataset without splits is the train split; val or test of it is an error, never the
// whole dataset.
TEST(OpenDataset, ADatasetWithoutSplitsHasNoValOrTest) {
  TempDir dir;
  MakeFolder(dir.path(), 2, 2);
  EXPECT_EQ(OpenDataset(dir.path().string()).source->size(), 4u);
  for (const Split split : {Split::kVal, Split::kTest}) {
    DatasetOptions options;
    options.split = split;
    try {
      OpenDataset(dir.path().string(), options);
      FAIL() << "opened " << ToString(split) << " of a dataset without splits";
    } catch (const SourceError& e) {
      EXPECT_NE(e.reason().find(std::string("no ") + ToString(split) +
                                "/ split: it is one "
                                "dataset without splits"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(HasSplit(dir.path().string(), split));
  }
}

TEST(OpenDataset, NothingThereNamesWhatWasLookedFor) {
  TempDir dir;
  try {
    OpenDataset((dir.path() / "nope").string());
    FAIL();
  } catch (const SourceError& e) {
    EXPECT_NE(std::string(e.what()).find("looked for"), std::string::npos) << e.what();
  }
  WriteFile(dir.path() / "file.txt", testing::MakeTextBytes());
  EXPECT_THROW(OpenDataset((dir.path() / "file.txt").string()), SourceError);
  EXPECT_THROW(OpenDataset(""), SourceError);
}

// A pack killed before it wrote its manifest (written last) leaves shard files
// and no manifest; opening that folder said "no class directories", as for an empty
// ImageFolder. It names the interrupted pack.
TEST(OpenDataset, AnInterruptedPackIsNamed) {
  TempDir dir;
  MakeFolder(dir.path() / "folder", 2, 4);
  const fs::path out = dir.path() / "packed";
  Pack(*OpenDataset((dir.path() / "folder").string()).source, out, PackCodec::kJpeg);
  fs::remove(out / "tilefeed-manifest.txt");
  WriteFile(out / "shard-00009.tfs.tmp", testing::MakeTextBytes());  // a shard being written
  try {
    OpenDataset(out.string());
    FAIL() << "opened a pack without its manifest";
  } catch (const SourceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("interrupted pack"), std::string::npos) << what;
    EXPECT_NE(what.find("no tilefeed-manifest.txt"), std::string::npos) << what;
    EXPECT_EQ(what.find("no class directories"), std::string::npos) << what;
  }
}

TEST(OpenDataset, ShardsOfEveryCodecAndTheirManifest) {
  TempDir dir;
  MakeFolder(dir.path() / "folder", 3, 4);
  const OpenedDataset folder = OpenDataset((dir.path() / "folder").string());
  const DatasetIdentity identity = Identify(*folder.source);
  for (const auto& [name, codec] :
       {std::pair{"jpeg", PackCodec::kJpeg}, std::pair{"jpeg-index", PackCodec::kJpegIndex},
        std::pair{"raw", PackCodec::kRaw}}) {
    SCOPED_TRACE(name);
    const fs::path out = dir.path() / name;
    Pack(*folder.source, out, codec);
    for (const fs::path& p : {out, out / "tilefeed-manifest.txt"}) {
      const OpenedDataset shards = OpenDataset(p.string());
      EXPECT_EQ(shards.location.kind, DatasetKind::kShards);
      // The identity covers the stored form: a pack's records carry checksums a folder
      // has not (and the other codecs hold other bytes).
      EXPECT_NE(Identify(*shards.source), identity);
    }
  }
}

TEST(OpenDataset, SplitRootOfShards) {
  TempDir dir;
  MakeFolder(dir.path() / "folder", 2, 3);
  const OpenedDataset folder = OpenDataset((dir.path() / "folder").string());
  Pack(*folder.source, dir.path() / "packed/train", PackCodec::kJpeg);
  const OpenedDataset d = OpenDataset((dir.path() / "packed").string());
  EXPECT_EQ(d.location.kind, DatasetKind::kShards);
  EXPECT_EQ(d.location.split, Split::kTrain);
  EXPECT_EQ(d.source->size(), 6u);
}

TEST(OpenDataset, Cifar10BothSplits) {
  TempDir dir;
  for (int b = 1; b <= 5; ++b) {
    MakeCifar(dir.path(), ("data_batch_" + std::to_string(b) + ".bin").c_str(), 3);
  }
  MakeCifar(dir.path(), "test_batch.bin", 2);
  const OpenedDataset train = OpenDataset(dir.path().string());
  EXPECT_EQ(train.location.kind, DatasetKind::kCifar10);
  EXPECT_EQ(train.source->size(), 15u);
  // The held-out batch answers both val and test, as CIFAR-10 names it.
  for (const Split split : {Split::kVal, Split::kTest}) {
    DatasetOptions held_out;
    held_out.split = split;
    const OpenedDataset d = OpenDataset(dir.path().string(), held_out);
    EXPECT_EQ(d.source->size(), 2u);
    EXPECT_EQ(d.location.split, split);
    EXPECT_TRUE(HasSplit(dir.path().string(), split));
  }
}

TEST(OpenDataset, ForcedKindIsUsed) {
  TempDir dir;
  MakeFolder(dir.path() / "data", 2, 2);
  DatasetOptions options;
  options.kind = DatasetKind::kShards;
  EXPECT_THROW(OpenDataset((dir.path() / "data").string(), options), SourceError);
}

TEST(DatasetKindNames, RoundTrip) {
  for (DatasetKind kind :
       {DatasetKind::kImageFolder, DatasetKind::kShards, DatasetKind::kCifar10}) {
    EXPECT_EQ(ParseDatasetKind(ToString(kind)), kind);
  }
  EXPECT_FALSE(ParseDatasetKind("folder").has_value());
  for (const Split split : {Split::kTrain, Split::kVal, Split::kTest}) {
    EXPECT_EQ(ParseSplit(ToString(split)), split);
  }
  EXPECT_EQ(std::string(ToString(Split::kTest)), "test");
  EXPECT_FALSE(ParseSplit("validation").has_value());
}

TEST(Identify, DiffersWhenClassesOrLabelsDiffer) {
  TempDir dir;
  MakeFolder(dir.path() / "a", 2, 3);
  MakeFolder(dir.path() / "b", 3, 2);
  const auto a = Identify(*OpenDataset((dir.path() / "a").string()).source);
  const auto b = Identify(*OpenDataset((dir.path() / "b").string()).source);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_NE(a, b);
  EXPECT_NE(ToString(a).find("6 samples, 2 classes, digest "), std::string::npos);
}

// The identity was the class names and labels alone, so other images under the
// same class names and counts passed for the same dataset (a reader, a --resume --data).
TEST(Identify, CoversTheContentNotOnlyNamesAndLabels) {
  TempDir dir;
  MakeFolder(dir.path() / "a", 3, 40);
  MakeFolder(dir.path() / "b", 3, 40, /*seed=*/1000);  // same names and counts, other images
  const auto a = Identify(*OpenDataset((dir.path() / "a").string()).source);
  const auto b = Identify(*OpenDataset((dir.path() / "b").string()).source);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.classes, b.classes);
  EXPECT_NE(a.digest, b.digest);
  // Reading it again gives the same value.
  EXPECT_EQ(Identify(*OpenDataset((dir.path() / "a").string()).source), a);
}

// The identity once covered the labels and 64 samples' bytes: a copy of a dataset with
// one image the 64 leave out replaced had the same digest. Every sample's size now counts,
// and in a pack every record's checksum: a replacement of another size changes a folder's
// digest; one of the same size (one byte flipped) changes its pack's.
TEST(Identify, CoversEverySampleNotOnlyTheSampledOnes) {
  TempDir dir;
  MakeFolder(dir.path() / "a", 3, 40);
  fs::copy(dir.path() / "a", dir.path() / "b", fs::copy_options::recursive);
  auto digest = [&](const std::string& name) {
    return Identify(*OpenDataset((dir.path() / name).string()).source).digest;
  };
  const std::uint64_t original = digest("a");
  // The 64 sampled of 120 are floor(k x 120 / 64): 0, 1, 3, 5, ...; sample 2 is left out.
  const auto a = OpenDataset((dir.path() / "a").string());
  const fs::path victim = dir.path() / "b" / fs::relative(a.source->Describe(2), dir.path() / "a");
  std::vector<std::byte> bytes;
  (void)a.source->Read(2, bytes);
  bytes[bytes.size() / 2] ^= std::byte{1};  // same size, other bytes
  WriteFile(victim, bytes);
  EXPECT_EQ(digest("b"), original);  // the folder's own limit: sizes, and sampled bytes
  Pack(*a.source, dir.path() / "pack-a", PackCodec::kJpeg);
  Pack(*OpenDataset((dir.path() / "b").string()).source, dir.path() / "pack-b", PackCodec::kJpeg);
  EXPECT_NE(digest("pack-b"), digest("pack-a"));
  const std::vector<std::byte> other = testing::MakeJpeg(41, 37, codecs::EncodeOptions{}, 999);
  ASSERT_NE(other.size(), bytes.size());
  WriteFile(victim, other);  // another image, of another size
  EXPECT_NE(digest("b"), original);
}

// The same seed gives byte-identical batches from a folder, its plain pack and its
// --codec jpeg-index pack, all opened through the one opener.
TEST(OpenDataset, FolderAndPacksGiveIdenticalBatches) {
  TempDir dir;
  MakeFolder(dir.path() / "folder", 3, 6);
  const OpenedDataset folder = OpenDataset((dir.path() / "folder").string());
  Pack(*folder.source, dir.path() / "plain", PackCodec::kJpeg);
  Pack(*folder.source, dir.path() / "indexed", PackCodec::kJpegIndex);
  const auto expected = Batches(OpenDataset((dir.path() / "folder").string()).source, 4);
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(Batches(OpenDataset((dir.path() / "plain").string()).source, 4), expected);
  EXPECT_EQ(Batches(OpenDataset((dir.path() / "indexed").string()).source, 4), expected);
}

}  // namespace
}  // namespace tilefeed::loader
