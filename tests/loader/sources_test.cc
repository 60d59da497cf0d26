#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loader/cifar.h"
#include "loader/image_folder.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> Bytes(std::string_view text) {
  std::vector<std::byte> bytes(text.size());
  std::transform(text.begin(), text.end(), bytes.begin(),
                 [](char c) { return static_cast<std::byte>(c); });
  return bytes;
}

std::vector<std::byte> RandomBytes(std::size_t size, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> bytes(size);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
  return bytes;
}

void WriteFile(const fs::path& path, const std::vector<std::byte>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void Touch(const fs::path& path) { WriteFile(path, Bytes(path.filename().string())); }

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at the end of
// the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sources_test.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }

  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& relative) const { return (path_ / relative).string(); }

 private:
  fs::path path_;
};

std::vector<std::string> RelativePaths(const ImageFolder& folder) {
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < folder.size(); ++i) paths.push_back(folder.RelativePath(i));
  return paths;
}

std::vector<std::int32_t> Labels(const Source& source) {
  std::vector<std::int32_t> labels;
  for (std::size_t i = 0; i < source.size(); ++i) labels.push_back(source.Label(i));
  return labels;
}

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Runs `body` and returns the SourceError it throws; fails the test if it throws nothing.
template <typename Body>
SourceError CatchSourceError(Body&& body) {
  try {
    body();
  } catch (const SourceError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a SourceError";
  return SourceError("", "");
}

// ---------------------------------------------------------------------------------------
// Source and SourceError

TEST(SourceErrorTest, WhatJoinsWhereAndReason) {
  const SourceError error("/data/a.jpg", "Permission denied");
  EXPECT_EQ(error.where(), "/data/a.jpg");
  EXPECT_EQ(error.reason(), "Permission denied");
  EXPECT_STREQ(error.what(), "/data/a.jpg: Permission denied");
}

// ---------------------------------------------------------------------------------------
// ImageFolder

TEST(ImageFolderTest, ClassesSortedInByteOrderLikeTorchvision) {
  TempDir dir;
  for (const char* cls : {"b", "a", "B", "ab", "a_b", "a-b"}) {
    Touch(dir / (std::string(cls) + "/img.jpg"));
  }
  Touch(dir / "stray_file_at_root.jpg");  // not in a class directory: ignored

  const auto folder = ImageFolder::Open(dir.path().string());
  // Python's sorted(): uppercase before lowercase, '-' (0x2D) < '_' (0x5F) < 'b'.
  EXPECT_THAT(folder->class_names(), ElementsAre("B", "a", "a-b", "a_b", "ab", "b"));
  ASSERT_EQ(folder->size(), 6u);
  EXPECT_THAT(Labels(*folder), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(folder->RelativePath(3), "a_b/img.jpg");
  EXPECT_THAT(folder->warnings(), IsEmpty());
}

TEST(ImageFolderTest, FilesInOsWalkOrderWithNestedDirectories) {
  TempDir dir;
  // torchvision sorts (directory, files) pairs from os.walk, so a directory's own files
  // come before its subdirectories' and "a.b" sorts before "a/deep" ('.' < '/').
  for (const char* file : {"c/b.jpg", "c/A.jpg", "c/a/x.jpg", "c/a.b/y.jpg", "c/a/deep/z.jpg",
                           "c/a/deep/deeper/w.jpg", "d/10.jpg", "d/9.jpg", "d/1.jpg"}) {
    Touch(dir / file);
  }
  const auto folder = ImageFolder::Open(dir.path().string());
  EXPECT_THAT(RelativePaths(*folder),
              ElementsAre("c/A.jpg", "c/b.jpg", "c/a/x.jpg", "c/a.b/y.jpg", "c/a/deep/z.jpg",
                          "c/a/deep/deeper/w.jpg", "d/1.jpg", "d/10.jpg", "d/9.jpg"));
  EXPECT_THAT(Labels(*folder), ElementsAre(0, 0, 0, 0, 0, 0, 1, 1, 1));
}

TEST(ImageFolderTest, ExtensionsMatchCaseInsensitivelyAndOthersAreIgnored) {
  TempDir dir;
  for (const char* file : {"k/a.JPG", "k/b.Jpeg", "k/c.jpeg", "k/d.jpg", "k/e.png", "k/f.txt",
                           "k/gjpg", "k/h.jpg.bak", "k/README"}) {
    Touch(dir / file);
  }
  const auto folder = ImageFolder::Open(dir.path().string());
  EXPECT_THAT(RelativePaths(*folder),
              ElementsAre("k/a.JPG", "k/b.Jpeg", "k/c.jpeg", "k/d.jpg", "k/e.png"));
  // The others are counted by extension and named in one warning.
  using Entry = std::pair<std::string, std::size_t>;
  EXPECT_EQ(folder->skipped_files().count, 4u);
  EXPECT_THAT(folder->skipped_files().by_extension,
              ElementsAre(Entry{"", 2}, Entry{".bak", 1}, Entry{".txt", 1}));
  ASSERT_EQ(folder->warnings().size(), 1u);
  EXPECT_THAT(folder->warnings()[0], HasSubstr("2 without extension, 1 .bak, 1 .txt"));

  ImageFolderOptions png_only;
  png_only.extensions = {".PNG"};
  const auto pngs = ImageFolder::Open(dir.path().string(), png_only);
  EXPECT_THAT(RelativePaths(*pngs), ElementsAre("k/e.png"));
}

TEST(ImageFolderTest, DirectoryNamedLikeAnImageIsWalkedNotIndexed) {
  TempDir dir;
  fs::create_directories(dir / "k/x.JPEG");
  Touch(dir / "k/x.JPEG/inner.jpg");
  Touch(dir / "k/y.jpg");
  const auto folder = ImageFolder::Open(dir.path().string());
  EXPECT_THAT(RelativePaths(*folder), ElementsAre("k/y.jpg", "k/x.JPEG/inner.jpg"));
}

TEST(ImageFolderTest, SymlinkLoopIsCutWithAWarning) {
  TempDir dir;
  Touch(dir / "k/a.jpg");
  Touch(dir / "k/sub/b.jpg");
  fs::create_directory_symlink("..", dir / "k/sub/back_to_class");
  fs::create_directory_symlink(dir.path(), dir / "k/to_root");
  const auto folder = ImageFolder::Open(dir.path().string());
  EXPECT_THAT(RelativePaths(*folder), ElementsAre("k/a.jpg", "k/sub/b.jpg"));
  ASSERT_EQ(folder->warnings().size(), 2u);
  for (const std::string& warning : folder->warnings()) {
    EXPECT_THAT(warning, HasSubstr("symlink loop"));
  }
  EXPECT_THAT(folder->warnings()[0] + folder->warnings()[1], HasSubstr("k/sub/back_to_class"));
}

TEST(ImageFolderTest, SymlinksToFilesAndDirectoriesAreFollowed) {
  TempDir dir;
  Touch(dir / "elsewhere/shared/s.jpg");
  Touch(dir / "elsewhere/target.bin");
  fs::create_directories(dir / "data/k");
  fs::create_directory_symlink(dir / "elsewhere/shared", dir / "data/k/linked_dir");
  fs::create_symlink(dir / "elsewhere/target.bin", dir / "data/k/linked_file.jpg");
  fs::create_directory_symlink(dir / "elsewhere/shared", dir / "data/linked_class");
  const auto folder = ImageFolder::Open(dir / "data");
  EXPECT_THAT(folder->class_names(), ElementsAre("k", "linked_class"));
  EXPECT_THAT(RelativePaths(*folder),
              ElementsAre("k/linked_file.jpg", "k/linked_dir/s.jpg", "linked_class/s.jpg"));
  std::vector<std::byte> buffer;
  folder->Read(0, buffer);
  EXPECT_EQ(buffer, Bytes("target.bin"));
}

TEST(ImageFolderTest, NonUtf8NamesAreIndexedAndRead) {
  TempDir dir;
  const std::string name = "k/caf\xE9\xFF.jpg";  // Latin-1, not valid UTF-8
  WriteFile(dir / name, Bytes("latin"));
  const auto folder = ImageFolder::Open(dir.path().string());
  ASSERT_EQ(folder->size(), 1u);
  EXPECT_EQ(folder->RelativePath(0), name);
  std::vector<std::byte> buffer;
  folder->Read(0, buffer);
  EXPECT_EQ(buffer, Bytes("latin"));
}

TEST(ImageFolderTest, HiddenClassDirectoryIsAClassWithAWarning) {
  TempDir dir;
  Touch(dir / ".ipynb_checkpoints/a.jpg");
  Touch(dir / "k/a.jpg");
  const auto folder = ImageFolder::Open(dir.path().string());
  EXPECT_THAT(folder->class_names(), ElementsAre(".ipynb_checkpoints", "k"));
  ASSERT_EQ(folder->warnings().size(), 1u);
  EXPECT_THAT(folder->warnings()[0], HasSubstr(".ipynb_checkpoints: hidden directory"));
}

TEST(ImageFolderTest, ReadReturnsTheExactBytesAndReusesTheBuffer) {
  TempDir dir;
  const std::vector<std::size_t> sizes = {0, 1, 4095, 4096, 4097, 300000};
  std::vector<std::vector<std::byte>> contents;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    contents.push_back(RandomBytes(sizes[i], static_cast<std::uint32_t>(i)));
    WriteFile(dir / ("k/" + std::to_string(i) + ".jpg"), contents.back());
  }
  const auto folder = ImageFolder::Open(dir.path().string() + "//");
  EXPECT_EQ(folder->root(), dir.path().string());
  EXPECT_EQ(folder->Describe(2), dir / "k/2.jpg");

  std::vector<std::byte> buffer;
  for (std::size_t i = sizes.size(); i-- > 0;) {  // largest first, so capacity is set once
    const SampleInfo info = folder->Read(i, buffer);
    EXPECT_EQ(info.label, 0);
    EXPECT_EQ(info.codec, SampleCodec::kEncoded);
    EXPECT_EQ(buffer, contents[i]) << "sample " << i;
    if (i == sizes.size() - 1) continue;
    EXPECT_GE(buffer.capacity(), sizes.back()) << "the buffer's capacity was not kept";
  }
}

TEST(ImageFolderTest, ReadFailuresNameThePath) {
  TempDir dir;
  Touch(dir / "k/0_ok.jpg");
  Touch(dir / "k/1_becomes_dir.jpg");
  Touch(dir / "k/2_removed.jpg");
  WriteFile(dir / "k/3_big.jpg", RandomBytes(1000, 1));
  fs::create_symlink(dir / "nowhere", dir / "k/4_dangling.jpg");
  ImageFolderOptions options;
  options.max_file_bytes = 999;
  const auto folder = ImageFolder::Open(dir.path().string(), options);
  ASSERT_EQ(folder->size(), 5u);
  // torchvision indexes a broken link too; we also say so up front.
  ASSERT_EQ(folder->warnings().size(), 1u);
  EXPECT_THAT(folder->warnings()[0], HasSubstr("4_dangling.jpg: broken symlink"));

  fs::remove(dir / "k/1_becomes_dir.jpg");
  fs::create_directory(dir / "k/1_becomes_dir.jpg");
  fs::remove(dir / "k/2_removed.jpg");

  std::vector<std::byte> buffer;
  folder->Read(0, buffer);
  EXPECT_EQ(buffer, Bytes("0_ok.jpg"));
  struct Case {
    std::size_t index;
    const char* reason;
  };
  for (const Case& c :
       {Case{1, "a directory"}, Case{2, "No such file or directory"},
        Case{3, "1000 bytes, over the limit of 999"}, Case{4, "No such file or directory"}}) {
    const SourceError error = CatchSourceError([&] { folder->Read(c.index, buffer); });
    EXPECT_EQ(error.where(), folder->Describe(c.index));
    EXPECT_THAT(error.what(), HasSubstr(dir / "k/"));
    EXPECT_THAT(error.reason(), HasSubstr(c.reason)) << error.what();
  }
}

TEST(ImageFolderTest, UnreadableFileIsASourceError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files regardless of their mode";
  TempDir dir;
  Touch(dir / "k/locked.jpg");
  fs::permissions(dir / "k/locked.jpg", fs::perms::none);
  const auto folder = ImageFolder::Open(dir.path().string());
  std::vector<std::byte> buffer;
  const SourceError error = CatchSourceError([&] { folder->Read(0, buffer); });
  EXPECT_THAT(error.what(), HasSubstr(dir / "k/locked.jpg"));
  EXPECT_THAT(error.reason(), HasSubstr("Permission denied"));
}

TEST(ImageFolderTest, UnreadableSubdirectoryIsSkippedWithAWarning) {
  if (::geteuid() == 0) GTEST_SKIP() << "root opens directories regardless of their mode";
  TempDir dir;
  Touch(dir / "k/a.jpg");
  Touch(dir / "k/locked/b.jpg");
  fs::permissions(dir / "k/locked", fs::perms::none);
  const auto folder = ImageFolder::Open(dir.path().string());
  fs::permissions(dir / "k/locked", fs::perms::owner_all);  // so that TempDir can remove it
  EXPECT_THAT(RelativePaths(*folder), ElementsAre("k/a.jpg"));
  ASSERT_EQ(folder->warnings().size(), 1u);
  EXPECT_THAT(folder->warnings()[0], HasSubstr(dir / "k/locked"));
  EXPECT_THAT(folder->warnings()[0], HasSubstr("Permission denied"));
}

TEST(ImageFolderTest, ZeroByteFileReadsAsEmpty) {
  TempDir dir;
  WriteFile(dir / "k/empty.jpg", {});
  const auto folder = ImageFolder::Open(dir.path().string());
  std::vector<std::byte> buffer = Bytes("stale");
  folder->Read(0, buffer);
  EXPECT_THAT(buffer, IsEmpty());
}

TEST(ImageFolderTest, OpenFailuresNameTheRootAndSayWhy) {
  TempDir dir;
  const std::string missing = dir / "missing";
  SourceError error = CatchSourceError([&] { ImageFolder::Open(missing); });
  EXPECT_EQ(error.where(), missing);
  EXPECT_THAT(error.reason(), HasSubstr("no such directory"));

  Touch(dir / "a_file");
  error = CatchSourceError([&] { ImageFolder::Open(dir / "a_file"); });
  EXPECT_EQ(error.where(), dir / "a_file");
  EXPECT_THAT(error.reason(), HasSubstr("not a directory"));

  fs::create_directory(dir / "empty");
  Touch(dir / "empty/loose.jpg");  // a file at root level is not a class
  error = CatchSourceError([&] { ImageFolder::Open(dir / "empty"); });
  EXPECT_EQ(error.where(), dir / "empty");
  EXPECT_THAT(error.reason(), HasSubstr("no class directories"));

  Touch(dir / "no_images/k/notes.txt");
  fs::create_directories(dir / "no_images/j");
  error = CatchSourceError([&] { ImageFolder::Open(dir / "no_images"); });
  EXPECT_THAT(error.reason(), HasSubstr("no images"));
  EXPECT_THAT(error.reason(), HasSubstr(".jpg, .jpeg"));
  EXPECT_THAT(error.reason(), HasSubstr("2 class directories"));
}

TEST(ImageFolderTest, EmptyClassIsAnErrorUnlessAllowed) {
  TempDir dir;
  Touch(dir / "full/a.jpg");
  fs::create_directories(dir / "hollow/sub");
  const SourceError error = CatchSourceError([&] { ImageFolder::Open(dir.path().string()); });
  EXPECT_THAT(error.reason(), HasSubstr("have no images"));
  EXPECT_THAT(error.reason(), HasSubstr("hollow"));

  ImageFolderOptions options;
  options.allow_empty_classes = true;
  const auto folder = ImageFolder::Open(dir.path().string(), options);
  EXPECT_THAT(folder->class_names(), ElementsAre("full", "hollow"));
  EXPECT_EQ(folder->size(), 1u);
}

TEST(ImageFolderTest, ConcurrentReadsGetTheRightBytes) {
  TempDir dir;
  constexpr std::size_t kFiles = 64;
  std::vector<std::vector<std::byte>> contents;
  for (std::size_t i = 0; i < kFiles; ++i) {
    contents.push_back(RandomBytes(100 + 397 * i, static_cast<std::uint32_t>(i)));
    // Zero-padded names keep byte order equal to creation order.
    char name[32];
    std::snprintf(name, sizeof(name), "c%zu/%03zu.jpg", i % 4, i);
    WriteFile(dir / name, contents.back());
  }
  const auto folder = ImageFolder::Open(dir.path().string());
  ASSERT_EQ(folder->size(), kFiles);
  // Sample order is class c0 (0, 4, 8, ...), then c1, ...: map index -> file number.
  std::vector<std::size_t> file_of(kFiles);
  for (std::size_t i = 0; i < kFiles; ++i)
    file_of[i] = std::stoul(folder->RelativePath(i).substr(3, 3));

  std::atomic<int> mismatches{0};
  {
    std::vector<std::jthread> threads;
    threads.reserve(4);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::byte> buffer;
        for (int round = 0; round < 20; ++round) {
          for (std::size_t k = 0; k < kFiles; ++k) {
            const std::size_t i = (k * 7 + static_cast<std::size_t>(t) * 13 + round) % kFiles;
            const SampleInfo info = folder->Read(i, buffer);
            if (buffer != contents[file_of[i]] ||
                info.label != static_cast<std::int32_t>(file_of[i] % 4)) {
              mismatches.fetch_add(1);
            }
          }
        }
      });
    }
  }
  EXPECT_EQ(mismatches.load(), 0);
}

// ---------------------------------------------------------------------------------------
// Cifar10

constexpr std::size_t kCifarRecord = 3073;

// Record r of a test batch: label `label`, pixel byte at CHW offset o = (seed + o * 7) mod
// 256, so every channel plane and position holds a different value.
std::vector<std::byte> CifarRecord(std::uint8_t label, std::uint32_t seed) {
  std::vector<std::byte> record(kCifarRecord);
  record[0] = static_cast<std::byte>(label);
  for (std::size_t o = 0; o < 3072; ++o)
    record[1 + o] = static_cast<std::byte>((seed + o * 7) & 0xFF);
  return record;
}

// Writes `labels.size()` records; record r uses seed base_seed + r.
void WriteCifarBatch(const fs::path& path, const std::vector<std::uint8_t>& labels,
                     std::uint32_t base_seed) {
  std::vector<std::byte> bytes;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const auto record = CifarRecord(labels[r], base_seed + static_cast<std::uint32_t>(r));
    bytes.insert(bytes.end(), record.begin(), record.end());
  }
  WriteFile(path, bytes);
}

// Five training batches of 7, 1, 3, 2 and 4 records; batch b's seeds start at 100 * b.
std::vector<std::vector<std::uint8_t>> WriteCifarTrain(const fs::path& dir) {
  std::vector<std::vector<std::uint8_t>> labels = {
      {0, 1, 2, 3, 4, 5, 6}, {9}, {7, 8, 9}, {1, 1}, {2, 0, 4, 3}};
  for (std::size_t b = 0; b < labels.size(); ++b) {
    WriteCifarBatch(dir / ("data_batch_" + std::to_string(b + 1) + ".bin"), labels[b],
                    static_cast<std::uint32_t>(100 * b));
  }
  return labels;
}

TEST(CifarTest, TrainSplitReadsLabelsAndConvertsChwToHwc) {
  TempDir dir;
  const auto labels = WriteCifarTrain(dir.path());
  const auto cifar = Cifar10::Open(dir.path().string(), Split::kTrain);
  ASSERT_EQ(cifar->size(), 17u);
  EXPECT_EQ(cifar->class_names().size(), 10u);
  EXPECT_EQ(cifar->class_names()[0], "airplane");
  EXPECT_EQ(cifar->class_names()[9], "truck");

  std::vector<std::byte> buffer;
  std::size_t index = 0;
  for (std::size_t b = 0; b < labels.size(); ++b) {
    for (std::size_t r = 0; r < labels[b].size(); ++r, ++index) {
      SCOPED_TRACE(cifar->Describe(index));
      EXPECT_EQ(cifar->Describe(index),
                "data_batch_" + std::to_string(b + 1) + ".bin#" + std::to_string(r));
      EXPECT_EQ(cifar->Label(index), labels[b][r]);
      const SampleInfo info = cifar->Read(index, buffer);
      EXPECT_EQ(info.label, labels[b][r]);
      EXPECT_EQ(info.codec, SampleCodec::kRawHwc);
      EXPECT_EQ(info.height, 32);
      EXPECT_EQ(info.width, 32);
      EXPECT_EQ(info.channels, 3);
      ASSERT_EQ(buffer.size(), 3072u);
      const auto chw = CifarRecord(labels[b][r], static_cast<std::uint32_t>(100 * b + r));
      int wrong = 0;
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x) {
          for (int c = 0; c < 3; ++c) {
            wrong += buffer[(y * 32 + x) * 3 + c] != chw[1 + c * 1024 + y * 32 + x];
          }
        }
      }
      EXPECT_EQ(wrong, 0);
    }
  }
}

TEST(CifarTest, TestSplitUsesTestBatchAndMetaNames) {
  TempDir dir;
  WriteCifarBatch(dir.path() / "test_batch.bin", {3, 5}, 7);
  std::string meta;
  for (int i = 0; i < 10; ++i) meta += "class" + std::to_string(i) + "\r\n";
  meta += "\n\n";  // the official file ends with blank lines
  WriteFile(dir.path() / "batches.meta.txt", Bytes(meta));
  const auto cifar = Cifar10::Open(dir.path().string(), Split::kVal);
  ASSERT_EQ(cifar->size(), 2u);
  EXPECT_EQ(cifar->Describe(1), "test_batch.bin#1");
  EXPECT_EQ(cifar->Label(1), 5);
  EXPECT_EQ(cifar->class_names()[0], "class0");
  EXPECT_EQ(cifar->class_names()[9], "class9");
  // The held-out batch is both val and test.
  EXPECT_EQ(Cifar10::Open(dir.path().string(), Split::kTest)->Describe(1), "test_batch.bin#1");

  WriteFile(dir.path() / "batches.meta.txt", Bytes("only\ntwo\n"));
  const SourceError error =
      CatchSourceError([&] { Cifar10::Open(dir.path().string(), Split::kVal); });
  EXPECT_EQ(error.where(), dir / "batches.meta.txt");
  EXPECT_THAT(error.reason(), HasSubstr("found 2"));
}

TEST(CifarTest, BadSizeAndMissingFileAreRejectedWithTheFileName) {
  TempDir dir;
  WriteCifarTrain(dir.path());
  std::vector<std::byte> bytes(2 * kCifarRecord + 5);
  WriteFile(dir.path() / "data_batch_4.bin", bytes);
  SourceError error = CatchSourceError([&] { Cifar10::Open(dir.path().string(), Split::kTrain); });
  EXPECT_EQ(error.where(), dir / "data_batch_4.bin");
  EXPECT_THAT(error.reason(), HasSubstr("6151 bytes"));

  WriteFile(dir.path() / "data_batch_4.bin", {});
  error = CatchSourceError([&] { Cifar10::Open(dir.path().string(), Split::kTrain); });
  EXPECT_THAT(error.what(), HasSubstr("data_batch_4.bin: size 0 bytes"));

  fs::remove(dir.path() / "data_batch_4.bin");
  error = CatchSourceError([&] { Cifar10::Open(dir.path().string(), Split::kTrain); });
  EXPECT_EQ(error.where(), dir / "data_batch_4.bin");
  EXPECT_THAT(error.reason(), HasSubstr("No such file"));
}

TEST(CifarTest, LabelAboveNineNamesTheRecord) {
  TempDir dir;
  WriteCifarBatch(dir.path() / "test_batch.bin", {1, 2, 3, 10, 4}, 0);
  const auto cifar = Cifar10::Open(dir.path().string(), Split::kVal);
  std::vector<std::byte> buffer;
  EXPECT_EQ(cifar->Read(4, buffer).label, 4);
  SourceError error = CatchSourceError([&] { cifar->Read(3, buffer); });
  EXPECT_EQ(error.where(), "test_batch.bin#3");
  EXPECT_THAT(error.reason(), HasSubstr("label 10"));
  error = CatchSourceError([&] { cifar->Label(3); });
  EXPECT_EQ(error.where(), "test_batch.bin#3");
}

TEST(CifarTest, ConcurrentReadsGetTheRightRecords) {
  TempDir dir;
  WriteCifarTrain(dir.path());
  const auto cifar = Cifar10::Open(dir.path().string(), Split::kTrain);
  std::vector<std::vector<std::byte>> expected(cifar->size());
  {
    std::vector<std::byte> buffer;
    for (std::size_t i = 0; i < cifar->size(); ++i) {
      cifar->Read(i, buffer);
      expected[i] = buffer;
    }
  }
  std::atomic<int> mismatches{0};
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::byte> buffer;
        for (std::size_t k = 0; k < 500; ++k) {
          const std::size_t i = (k * 5 + t) % cifar->size();
          cifar->Read(i, buffer);
          if (buffer != expected[i]) mismatches.fetch_add(1);
        }
      });
    }
  }
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace tilefeed::loader
