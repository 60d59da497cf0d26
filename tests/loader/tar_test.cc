// Tests TarDataset on WebDataset shards written by Python's tarfile (pax, GNU and ustar
// formats, long names, brace patterns, directories), its merged reads, the sidecar index,
// the loader's batches against the same images packed into tilefeed shards, and the
// documented outcome for each kind of broken tar.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "loader/shard_source.h"
#include "loader/shard_writer.h"
#include "loader/tar_dataset.h"
#include "tests/loader/webdataset_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/loader/dataset.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using testing::MakeImageSamples;
using testing::ReadFile;
using testing::TarSample;
using testing::TempDir;
using testing::WriteWebDataset;
using testing::XorByte;

std::vector<std::byte> Bytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string ReadError(const Source& source, std::size_t index) {
  std::vector<std::byte> buffer;
  try {
    source.Read(index, buffer);
  } catch (const SourceError& e) {
    return e.what();
  }
  return {};
}

// Every format tarfile writes, with names past ustar's 100 characters: the samples, their
// bytes and labels come back in tar order.
TEST(TarDatasetTest, ReadsPythonTarsInEveryFormat) {
  TempDir dir;
  const std::string long_dir = std::string(120, 'd') + "/n01440764/";
  for (const std::string format : {"pax", "gnu", "ustar"}) {
    const std::string prefix = format == "ustar" ? "n01440764/" : long_dir;
    const std::vector<TarSample> samples = MakeImageSamples(23, 4, prefix);
    const fs::path out = dir.path() / format;
    fs::create_directories(out);
    WriteWebDataset(dir.path() / "scratch", (out / "train-%06d.tar").string(), samples, 10, format);
    const auto d = TarDataset::Open((out / "train-{000000..000002}.tar").string());
    ASSERT_EQ(d->size(), 23u) << format;
    EXPECT_EQ(d->tar_count(), 3u);
    EXPECT_EQ(d->class_names(), (std::vector<std::string>{"0", "1", "2", "3"}));
    std::vector<std::byte> buffer;
    for (std::size_t i = 0; i < d->size(); ++i) {
      const SampleInfo info = d->Read(i, buffer);
      EXPECT_EQ(info.label, static_cast<int>(i % 4));
      EXPECT_EQ(d->Label(i), static_cast<int>(i % 4));
      EXPECT_EQ(info.codec, SampleCodec::kEncoded);
      EXPECT_EQ(buffer, samples[i].members[1].bytes) << format << " sample " << i;
    }
    EXPECT_EQ(d->Describe(11), (out / "train-000001.tar").string() + "#" + prefix + "sample_11");
    // The directory form lists the same tars in name order.
    EXPECT_EQ(TarDataset::Open(out.string())->size(), 23u);
    EXPECT_TRUE(IsTarDataset(out.string()));
  }
}

TEST(TarDatasetTest, BracePatterns) {
  EXPECT_EQ(ListTarShards("http://h/a-{08..11}.tar"),
            (std::vector<std::string>{"http://h/a-08.tar", "http://h/a-09.tar", "http://h/a-10.tar",
                                      "http://h/a-11.tar"}));
  EXPECT_EQ(ListTarShards("x.tar"), std::vector<std::string>{"x.tar"});
  EXPECT_THROW(ListTarShards("a-{3..1}.tar"), SourceError);
  EXPECT_THROW(ListTarShards("a-{1..x}.tar"), SourceError);
  EXPECT_THROW(ListTarShards("a-{1..2.tar"), SourceError);
  TempDir dir;
  EXPECT_THROW(TarDataset::Open(dir.path().string()), SourceError) << "no tars";
  EXPECT_THROW(TarDataset::Open((dir.path() / "missing.tar").string()), SourceError);
}

// ReadMany (merged preadv) gives what Read gives, with repeats and across tars.
TEST(TarDatasetTest, MergedReadsMatchSingleReads) {
  TempDir dir;
  const std::vector<TarSample> samples = MakeImageSamples(70, 5);
  WriteWebDataset(dir.path() / "scratch", (dir.path() / "t-%02d.tar").string(), samples, 30);
  const auto d = TarDataset::Open((dir.path() / "t-{00..02}.tar").string());
  ASSERT_EQ(d->size(), 70u);
  std::mt19937 rng(3);
  std::vector<std::uint64_t> indices(100);
  for (auto& i : indices) i = rng() % d->size();
  indices[7] = indices[6];
  std::vector<std::vector<std::byte>> buffers(indices.size());
  std::vector<ReadResult> results(indices.size());
  const std::uint64_t calls = d->read_calls();
  d->ReadMany(indices, buffers, results);
  EXPECT_LT(d->read_calls() - calls, indices.size()) << "some reads were merged";
  for (std::size_t i = 0; i < indices.size(); ++i) {
    ASSERT_TRUE(results[i].ok) << results[i].error;
    EXPECT_EQ(buffers[i], samples[indices[i]].members[1].bytes);
    EXPECT_EQ(results[i].info.label, static_cast<int>(indices[i] % 5));
  }
}

// The loader over tar shards and over the same samples packed into tilefeed shards (which
// also shows PackDataset takes a TarDataset): byte-identical batches for one seed.
TEST(TarDatasetTest, LoaderBatchesMatchPackedShards) {
  TempDir dir;
  WriteWebDataset(dir.path() / "scratch", (dir.path() / "t-%d.tar").string(),
                  MakeImageSamples(90, 3), 40);
  const std::string tars = (dir.path() / "t-{0..2}.tar").string();
  PackOptions pack;
  pack.output_dir = (dir.path() / "packed").string();
  pack.shard_bytes = 20000;
  pack.workers = 1;
  PackDataset(*TarDataset::Open(tars), pack);
  LoaderOptions options;
  options.batch_size = 16;
  options.image_size = 24;
  options.workers = 2;
  options.seed = 11;
  options.epochs = 2;
  auto collect = [&](std::unique_ptr<Source> source) {
    Loader loader(std::move(source), options);
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (Batch& batch : loader) {
        images.insert(images.end(), batch.images().begin(), batch.images().end());
        labels.insert(labels.end(), batch.labels().begin(), batch.labels().end());
      }
    }
    return std::make_pair(images, labels);
  };
  const auto from_tar = collect(TarDataset::Open(tars));
  const auto from_shards = collect(ShardDataset::Open(pack.output_dir));
  EXPECT_FALSE(from_tar.first.empty());
  EXPECT_EQ(from_tar, from_shards);
}

// Missing label, a non-image member, a bad label and an over-long .cls: bad samples that
// name the tar and key; a key with only a .json is no sample; the others read normally.
TEST(TarDatasetTest, IncompleteSamplesAreBadSamples) {
  TempDir dir;
  std::vector<TarSample> samples = MakeImageSamples(6, 2);
  samples[1].members.erase(samples[1].members.begin());  // no .cls
  samples[2].members[1] = {"txt", Bytes("a caption")};   // .cls + .txt, no image
  samples[3].members[0].bytes = Bytes("seven");
  samples[4].members[0].bytes = Bytes(std::string(100, '1'));
  samples.insert(samples.begin() + 5, {"__meta__", {{"json", Bytes("{}")}}});
  WriteWebDataset(dir.path() / "scratch", (dir.path() / "t-%d.tar").string(), samples, 10);
  const auto d = TarDataset::Open((dir.path() / "t-0.tar").string());
  ASSERT_EQ(d->size(), 6u);
  EXPECT_EQ(d->ignored_keys(), 1u);
  const std::string tar = (dir.path() / "t-0.tar").string();
  EXPECT_EQ(ReadError(*d, 0), "");
  EXPECT_EQ(ReadError(*d, 1), tar + "#sample_1: no sample_1.cls member (the label)");
  EXPECT_EQ(ReadError(*d, 2), tar +
                                  "#sample_2: no image member (sample_2.jpg/.jpeg/.png) beside "
                                  "sample_2.cls; found sample_2.txt");
  EXPECT_NE(ReadError(*d, 3).find("sample_3.cls is not a non-negative decimal integer"),
            std::string::npos);
  EXPECT_NE(ReadError(*d, 4).find("sample_4.cls is not a non-negative"), std::string::npos);
  EXPECT_EQ(ReadError(*d, 5), "");
  EXPECT_EQ(d->Label(1), -1);
  EXPECT_EQ(d->Label(0), 0);
  std::vector<std::uint64_t> indices = {0, 1, 2, 5};
  std::vector<std::vector<std::byte>> buffers(4);
  std::vector<ReadResult> results(4);
  d->ReadMany(indices, buffers, results);
  EXPECT_TRUE(results[0].ok && results[3].ok);
  EXPECT_FALSE(results[1].ok || results[2].ok);
  EXPECT_EQ(results[1].error, "no sample_1.cls member (the label)");
}

// Class names are made for every label up to the largest, so a .cls of
// 100000000 built 10^8 names at open (92 s, 4.2 GB) and 2147483647 ran out of memory.
// Labels at or past TarOptions::max_classes are bad samples that say so; the class count
// comes from the good labels only. (The default limit's memory is not asserted: no
// timing or RSS assertions; a regression here takes minutes and gigabytes.)
TEST(TarDatasetTest, LabelsPastTheClassLimitAreBadSamples) {
  TempDir dir;
  std::vector<TarSample> samples = MakeImageSamples(5, 2);
  samples[2].members[0].bytes = Bytes("100000000");
  samples[3].members[0].bytes = Bytes("2147483647\n");
  WriteWebDataset(dir.path() / "scratch", (dir.path() / "t-%d.tar").string(), samples, 10);
  const std::string tar = (dir.path() / "t-0.tar").string();
  const auto d = TarDataset::Open(tar);
  ASSERT_EQ(d->size(), 5u);
  EXPECT_EQ(d->class_names().size(), 2u);
  EXPECT_EQ(d->Label(2), -1);
  EXPECT_EQ(d->Label(3), -1);
  EXPECT_EQ(ReadError(*d, 2), tar +
                                  "#sample_2: member sample_2.cls holds label 100000000, past "
                                  "the limit of 1000000 classes (labels 0 to 999999)");
  EXPECT_NE(ReadError(*d, 3).find("holds label 2147483647, past the limit"), std::string::npos);
  EXPECT_EQ(ReadError(*d, 4), "");

  // The limit is an option; the sidecar index written above is re-checked against it.
  TarOptions small;
  small.max_classes = 1;
  const auto limited = TarDataset::Open(tar, small);
  EXPECT_EQ(limited->class_names().size(), 1u);
  EXPECT_EQ(limited->Label(0), 0);
  EXPECT_EQ(limited->Label(1), -1);
  EXPECT_NE(ReadError(*limited, 1)
                .find("holds label 1, past the limit of 1 classes (labels 0 "
                      "to 0)"),
            std::string::npos);
}

// A tar cut inside its last image: that sample is bad, the ones before it read. A size
// field beyond the file does the same. A bad header checksum is an open error that names
// the tar and the header's offset.
TEST(TarDatasetTest, TruncatedAndCorruptTars) {
  TempDir dir;
  WriteWebDataset(dir.path() / "scratch", (dir.path() / "t-%d.tar").string(),
                  MakeImageSamples(5, 2), 10);
  const fs::path tar = dir.path() / "t-0.tar";
  TarOptions no_sidecar;
  no_sidecar.sidecar = false;
  const auto whole = TarDataset::Open(tar.string(), no_sidecar);
  ASSERT_EQ(whole->size(), 5u);
  std::vector<std::byte> bytes = ReadFile(tar);
  // The last image's data starts 512 bytes after its header; cut 10 bytes into it.
  std::vector<std::uint64_t> one = {4};
  std::vector<std::vector<std::byte>> buf(1);
  std::vector<ReadResult> res(1);
  whole->ReadMany(one, buf, res);
  ASSERT_TRUE(res[0].ok);
  const auto image_offset = static_cast<std::size_t>(
      std::search(bytes.begin(), bytes.end(), buf[0].begin(), buf[0].end()) - bytes.begin());
  const fs::path cut = dir.path() / "cut.tar";
  testing::WriteFile(cut, std::span(bytes).first(image_offset + 10));
  const auto truncated = TarDataset::Open(cut.string(), no_sidecar);
  ASSERT_EQ(truncated->size(), 5u);
  EXPECT_EQ(ReadError(*truncated, 3), "");
  EXPECT_EQ(ReadError(*truncated, 4),
            cut.string() + "#sample_4: member sample_4.jpg is truncated (the tar ends inside it)");

  // A huge size in the first image's header (octal 77777777777, checksum fixed up).
  std::vector<std::byte> huge = bytes;
  std::size_t header = 0;
  while (std::string(reinterpret_cast<const char*>(&huge[header])) != "sample_0.jpg") {
    header += 512;
    ASSERT_LT(header, huge.size());
  }
  const std::string size_field = "77777777777";
  std::memcpy(&huge[header + 124], size_field.data(), size_field.size());
  unsigned sum = 0;
  for (std::size_t i = 0; i < 512; ++i) {
    sum += (i >= 148 && i < 156) ? 32u : std::to_integer<unsigned>(huge[header + i]);
  }
  char checksum[8];
  std::snprintf(checksum, sizeof(checksum), "%06o", sum);
  std::memcpy(&huge[header + 148], checksum, 7);
  const fs::path huge_tar = dir.path() / "huge.tar";
  testing::WriteFile(huge_tar, huge);
  const auto h = TarDataset::Open(huge_tar.string(), no_sidecar);
  ASSERT_EQ(h->size(), 1u);
  EXPECT_NE(ReadError(*h, 0).find("sample_0.jpg is truncated"), std::string::npos);

  XorByte(tar, header + 3, 0x20);  // a name byte: the checksum no longer matches
  try {
    TarDataset::Open(tar.string(), no_sidecar);
    FAIL() << "opened a tar with a bad header checksum";
  } catch (const SourceError& e) {
    EXPECT_EQ(e.where(), tar.string());
    EXPECT_NE(e.reason().find("tar header at byte " + std::to_string(header) +
                              ": header checksum mismatch"),
              std::string::npos)
        << e.what();
  }
  const fs::path junk = dir.path() / "junk.tar";
  testing::WriteFile(junk, std::vector<std::byte>(2048, std::byte{'x'}));
  EXPECT_THROW(TarDataset::Open(junk.string(), no_sidecar), SourceError);
}

// The first open writes "<tar>.tfidx"; a later open with the same size and mtime uses it
// without scanning (a header broken behind its back with the mtime restored still opens),
// and a sidecar that does not match is ignored.
TEST(TarDatasetTest, SidecarIndex) {
  TempDir dir;
  WriteWebDataset(dir.path() / "scratch", (dir.path() / "t-%d.tar").string(),
                  MakeImageSamples(8, 3), 10);
  const fs::path tar = dir.path() / "t-0.tar";
  const auto first = TarDataset::Open(tar.string());
  ASSERT_TRUE(fs::exists(tar.string() + ".tfidx"));
  struct stat before;
  ASSERT_EQ(::stat(tar.c_str(), &before), 0);
  XorByte(tar, 3, 0x20);  // the first header's name: a scan would fail
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, tar.c_str(), times, 0), 0);
  const auto second = TarDataset::Open(tar.string());
  EXPECT_EQ(second->size(), 8u);
  EXPECT_EQ(second->Describe(7), first->Describe(7));
  EXPECT_EQ(second->Label(7), 1);
  XorByte(tar.string() + ".tfidx", 40, 0x01);  // the sidecar's checksum no longer matches
  EXPECT_THROW(TarDataset::Open(tar.string()), SourceError) << "rescanned";
}

// The dataset opener knows tars: a directory of them, one tar, a brace pattern.
TEST(TarDatasetTest, OpenDatasetDetectsTars) {
  TempDir dir;
  const fs::path root = dir.path() / "wds";
  fs::create_directories(root);
  WriteWebDataset(dir.path() / "scratch", (root / "train-%04d.tar").string(),
                  MakeImageSamples(12, 3), 5);
  for (const std::string& location : {root.string(), (root / "train-0001.tar").string(),
                                      (root / "train-{0000..0002}.tar").string()}) {
    const OpenedDataset opened = OpenDataset(location);
    EXPECT_EQ(opened.location.kind, DatasetKind::kTar) << location;
    EXPECT_EQ(opened.source->size(), location.ends_with("0001.tar") ? 5u : 12u);
    EXPECT_EQ(Identify(*opened.source).classes, 3u);
  }
  EXPECT_EQ(ParseDatasetKind("tar"), DatasetKind::kTar);
  EXPECT_NE(OpenDataset(root.string()).summary.find("WebDataset tars (3 tars)"), std::string::npos);
}

}  // namespace
}  // namespace tilefeed::loader
