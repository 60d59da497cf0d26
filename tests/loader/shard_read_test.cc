// Tests ShardDataset's batch reads (ReadMany, which merges reads of nearby records) and
// its mmap mode against the plain one-record Read(): the same bytes and infos for every
// sample, across shard boundaries, with repeats, and with corrupt records inside a merged
// range, where only the corrupt record is reported. Also the loader over a coalescing
// source against the same source read record by record.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

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

// Packs 3 classes of `per_class` small JPEGs into shards of about `shard_bytes`.
fs::path MakeShards(const TempDir& dir, int per_class, std::uint64_t shard_bytes) {
  const fs::path root = dir.path() / "folder";
  int n = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < per_class; ++i, ++n) {
      codecs::EncodeOptions o;
      o.progressive = n % 5 == 2;
      WriteFile(root / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + ".jpg"),
                testing::MakeJpeg(16 + (n * 13) % 40, 16 + (n * 7) % 30, o, n));
    }
  }
  fs::path out = dir.path() / "shards";
  PackOptions options;
  options.output_dir = out.string();
  options.shard_bytes = shard_bytes;
  options.workers = 1;
  PackDataset(*ImageFolder::Open(root.string()), options);
  return out;
}

std::string ShardPath(const fs::path& out, int shard) {
  return (out / detail::ShardFileName(static_cast<std::uint32_t>(shard))).string();
}

// What Read() gives for one sample: bytes and info, or the SourceError's where and reason.
struct Expected {
  bool ok = false;
  std::vector<std::byte> bytes;
  SampleInfo info;
  std::string where;
  std::string reason;
};

Expected ReadAlone(const Source& source, std::size_t index) {
  Expected e;
  try {
    e.info = source.Read(index, e.bytes);
    e.ok = true;
  } catch (const SourceError& error) {
    e.where = error.where();
    e.reason = error.reason();
  }
  return e;
}

// Reads `indices` with ReadMany in runs of `run` and checks each sample against Read().
// The buffers are reused from run to run, as the loader's workers do.
void ExpectReadManyMatchesRead(const Source& source, const std::vector<std::uint64_t>& indices,
                               std::size_t run) {
  std::vector<std::vector<std::byte>> buffers(run);
  std::vector<ReadResult> results(run);
  for (std::size_t begin = 0; begin < indices.size(); begin += run) {
    const std::size_t n = std::min(run, indices.size() - begin);
    const std::span<const std::uint64_t> part(indices.data() + begin, n);
    source.ReadMany(part, std::span(buffers).first(n), std::span(results).first(n));
    for (std::size_t i = 0; i < n; ++i) {
      const Expected e = ReadAlone(source, static_cast<std::size_t>(part[i]));
      const ReadResult& r = results[i];
      ASSERT_EQ(r.ok, e.ok) << "sample " << part[i] << " run " << run;
      if (e.ok) {
        EXPECT_EQ(buffers[i], e.bytes) << "sample " << part[i] << " run " << run;
        EXPECT_EQ(r.info.label, e.info.label);
        EXPECT_EQ(r.info.codec, e.info.codec);
        EXPECT_EQ(r.info.index_size, e.info.index_size);
        EXPECT_TRUE(r.error.empty());
      } else {
        EXPECT_EQ(r.error, e.reason) << "sample " << part[i];
        EXPECT_EQ(source.Describe(static_cast<std::size_t>(part[i])), e.where);
      }
    }
  }
}

std::vector<std::uint64_t> AllInOrder(std::size_t n) {
  std::vector<std::uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(ShardReadTest, ReadManyGivesReadsBytesForEverySampleAcrossShards) {
  TempDir dir;
  const fs::path out = MakeShards(dir, 12, 4096);
  for (const std::size_t gap : {std::size_t{0}, std::size_t{64} << 10}) {
    ShardReadOptions options;
    options.max_gap = gap;
    const auto shards = ShardDataset::Open(out.string(), options);
    ASSERT_GT(shards->shard_count(), 2u);
    const std::size_t n = shards->size();
    // In order (every run crosses shard boundaries somewhere), reversed, shuffled, every
    // other record (gaps of one record), and with repeats.
    std::vector<std::uint64_t> in_order = AllInOrder(n);
    std::vector<std::uint64_t> reversed(in_order.rbegin(), in_order.rend());
    std::vector<std::uint64_t> shuffled = in_order;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(7));
    std::vector<std::uint64_t> strided;
    for (std::uint64_t i = 0; i < n; i += 2) strided.push_back(i);
    for (std::uint64_t i = 1; i < n; i += 2) strided.push_back(i);
    std::vector<std::uint64_t> repeats;
    for (std::uint64_t i = 0; i < n; ++i) {
      repeats.push_back(i);
      if (i % 3 == 0) repeats.push_back(i);
      if (i % 7 == 0) repeats.push_back(n - 1 - i);
    }
    for (const auto* list : {&in_order, &reversed, &shuffled, &strided, &repeats}) {
      for (const std::size_t run : {1, 2, 5, 16, 70, 200}) {
        ExpectReadManyMatchesRead(*shards, *list, run);
      }
    }
  }
}

TEST(ShardReadTest, OnlyTheCorruptRecordOfAMergedReadIsReported) {
  TempDir dir;
  const fs::path out = MakeShards(dir, 6, 1 << 20);  // one shard, records back to back
  const auto shards = ShardDataset::Open(out.string());
  ASSERT_EQ(shards->shard_count(), 1u);
  const std::string path = ShardPath(out, 0);
  const std::vector<std::byte> file = ReadFile(path);
  const detail::ShardIndex index = detail::ParseShardFooter(file, file.size());
  const std::size_t n = shards->size();
  ASSERT_EQ(index.entries.size(), n);
  std::vector<Expected> pristine;
  for (std::size_t i = 0; i < n; ++i) pristine.push_back(ReadAlone(*shards, i));

  // The first, a middle and the last record of the run, header byte and payload byte.
  for (const std::size_t bad : {std::size_t{0}, n / 2, n - 1}) {
    const detail::IndexEntry& e = index.entries[bad];
    for (const std::uint64_t at : {e.offset, e.offset + e.size / 2, e.offset + e.size - 1}) {
      XorByte(path, at, 0x20);
      std::vector<std::vector<std::byte>> buffers(n);
      std::vector<ReadResult> results(n);
      const std::vector<std::uint64_t> all = AllInOrder(n);
      shards->ReadMany(all, buffers, results);
      for (std::size_t i = 0; i < n; ++i) {
        if (i == bad) {
          EXPECT_FALSE(results[i].ok) << "flip at " << at << " in record " << bad;
          EXPECT_NE(results[i].error.find("checksum"), std::string::npos) << results[i].error;
          EXPECT_EQ(results[i].error, ReadAlone(*shards, i).reason);
          EXPECT_EQ(shards->Describe(i), path + "#" + std::to_string(i));
        } else {
          ASSERT_TRUE(results[i].ok)
              << "record " << i << " with " << bad << " bad: " << results[i].error;
          EXPECT_EQ(buffers[i], pristine[i].bytes) << i;
          EXPECT_EQ(results[i].info.label, pristine[i].info.label) << i;
        }
      }
      XorByte(path, at, 0x20);
    }
  }
  // Two bad records in one run, the rest still good.
  XorByte(path, index.entries[1].offset + 9, 0x01);
  XorByte(path, index.entries[n - 2].offset + 9, 0x01);
  ExpectReadManyMatchesRead(*shards, AllInOrder(n), n);
}

TEST(ShardReadTest, ATruncatedShardGivesShortReadsNamingEachRecord) {
  TempDir dir;
  const fs::path out = MakeShards(dir, 6, 1 << 20);
  const auto shards = ShardDataset::Open(out.string());
  const std::string path = ShardPath(out, 0);
  const std::vector<std::byte> file = ReadFile(path);
  const detail::ShardIndex index = detail::ParseShardFooter(file, file.size());
  const std::size_t n = shards->size();
  // Cut the file in the middle of record n/2 after open: that record and every later one
  // fail, each named; the earlier ones still read.
  const detail::IndexEntry& cut = index.entries[n / 2];
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(cut.offset + cut.size / 2)), 0);
  std::vector<std::vector<std::byte>> buffers(n);
  std::vector<ReadResult> results(n);
  shards->ReadMany(AllInOrder(n), buffers, results);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(results[i].ok, i < n / 2) << i;
    if (!results[i].ok) {
      EXPECT_NE(results[i].error.find("short read"), std::string::npos);
    }
  }
  ExpectReadManyMatchesRead(*shards, AllInOrder(n), 7);
}

TEST(ShardReadTest, MmapReadsTheSameBytesAndDetectsTheSameDamage) {
  TempDir dir;
  const fs::path out = MakeShards(dir, 10, 4096);
  ShardReadOptions mapped;
  mapped.io = ShardIo::kMmap;
  const auto by_pread = ShardDataset::Open(out.string());
  const auto by_mmap = ShardDataset::Open(out.string(), mapped);
  ASSERT_EQ(by_mmap->size(), by_pread->size());
  for (std::size_t i = 0; i < by_pread->size(); ++i) {
    const Expected a = ReadAlone(*by_pread, i);
    const Expected b = ReadAlone(*by_mmap, i);
    ASSERT_TRUE(a.ok && b.ok) << i;
    EXPECT_EQ(a.bytes, b.bytes) << i;
    EXPECT_EQ(a.info.label, b.info.label) << i;
  }
  ExpectReadManyMatchesRead(*by_mmap, AllInOrder(by_mmap->size()), 9);
  // A flipped payload byte is seen through the (shared) mapping, with Read()'s message.
  const std::string path = ShardPath(out, 1);
  const std::vector<std::byte> file = ReadFile(path);
  const detail::IndexEntry e = detail::ParseShardFooter(file, file.size()).entries[0];
  XorByte(path, e.offset + e.size - 1, 0x04);
  const std::size_t first_of_shard_1 = [&] {
    for (std::size_t i = 0;; ++i) {
      if (by_mmap->Locate(i).first == 1) return i;
    }
  }();
  const Expected a = ReadAlone(*by_pread, first_of_shard_1);
  const Expected b = ReadAlone(*by_mmap, first_of_shard_1);
  EXPECT_FALSE(a.ok);
  EXPECT_FALSE(b.ok);
  EXPECT_EQ(b.where, path + "#0");
  EXPECT_EQ(a.reason, b.reason);
}

// The loader over the same corrupt shards, with merged reads and record by record: the
// same batches, substitutes and bad-sample reports, in order and shuffled.
TEST(ShardReadTest, LoaderGivesTheSameBatchesWithAndWithoutMergedReads) {
  TempDir dir;
  const fs::path out = MakeShards(dir, 20, 16384);
  const std::string path = ShardPath(out, 0);
  const std::vector<std::byte> file = ReadFile(path);
  const detail::ShardIndex index = detail::ParseShardFooter(file, file.size());
  ASSERT_GT(index.entries.size(), 6u);
  XorByte(path, index.entries[3].offset + 20, 0x08);
  XorByte(path, index.entries[5].offset + 20, 0x08);
  for (const bool shuffle : {false, true}) {
    LoaderOptions options;
    options.batch_size = 32;  // one worker: chunks of 8 samples
    options.image_size = 16;
    options.workers = 1;
    options.prefetch_depth = 2;
    options.seed = 5;
    options.epochs = 2;
    options.shuffle = shuffle;
    options.bad_sample_policy = BadSamplePolicy::kSkip;
    auto collect = [&](bool coalesce) {
      ShardReadOptions read;
      read.coalesce = coalesce;
      Loader loader(ShardDataset::Open(out.string(), read), options);
      std::vector<std::uint8_t> images;
      std::vector<std::int32_t> labels;
      std::vector<std::uint64_t> indices;
      for (int epoch = 0; epoch < 2; ++epoch) {
        for (Batch& batch : loader) {
          images.insert(images.end(), batch.images().begin(), batch.images().end());
          labels.insert(labels.end(), batch.labels().begin(), batch.labels().end());
          indices.insert(indices.end(), batch.sample_indices().begin(),
                         batch.sample_indices().end());
        }
      }
      std::vector<std::tuple<std::uint64_t, std::uint64_t, std::string, std::string>> bad;
      for (const BadSample& b : loader.bad_samples()) {
        bad.emplace_back(b.epoch, b.sample, b.where, b.reason);
      }
      std::sort(bad.begin(), bad.end());
      return std::make_tuple(images, labels, indices, bad);
    };
    const auto merged = collect(true);
    const auto alone = collect(false);
    EXPECT_EQ(std::get<3>(merged).size(), 4u) << "two bad records, two epochs";
    EXPECT_EQ(merged, alone) << "shuffle " << shuffle;
  }
}

}  // namespace
}  // namespace tilefeed::loader
