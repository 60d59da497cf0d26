// The loader over a dataset with 1 % bad files (one bad file must neither kill a multi-day job
// nor change it silently): under BadSamplePolicy::kSkip every good sample of an instance's
// slice is delivered, no bad one ever is, and each bad one is reported exactly once with its
// path and a reason; under kFail the epoch stops at the first bad file of the instance's order,
// naming it. With 1 and 2 instances (shards).

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "loader/image_folder.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"
#include "tilefeed/loader/loader.h"
#include "tilefeed/loader/sampler.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr int kClasses = 4;
constexpr int kPerClass = 250;  // 1,000 files
constexpr int kBadEvery = 100;  // 1 %: 10 bad files, one of each kind

// A small JPEG whose SOF0 header declares 60000 x 60000 pixels: within libjpeg's dimension
// limit (65500), far over the loader's pixel limit.
std::vector<std::byte> HugeDeclaredJpeg(std::uint64_t seed) {
  std::vector<std::byte> bytes = testing::MakeJpeg(32, 32, codecs::EncodeOptions{}, seed);
  for (std::size_t i = 0; i + 8 < bytes.size(); ++i) {
    if (bytes[i] == std::byte{0xFF} && bytes[i + 1] == std::byte{0xC0}) {
      for (std::size_t k = i + 5; k < i + 9; k += 2) {  // height, then width: 0xEA60
        bytes[k] = std::byte{0xEA};
        bytes[k + 1] = std::byte{0x60};
      }
      return bytes;
    }
  }
  ADD_FAILURE() << "no SOF0 marker in the encoder's output";
  return bytes;
}

// Deterministic non-JPEG noise (a xorshift stream).
std::vector<std::byte> Garbage(std::uint64_t seed, std::size_t n) {
  std::vector<std::byte> bytes(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::byte& b : bytes) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x >> 24);
  }
  return bytes;
}

// What each kind of bad file is, and a word its reason must hold.
struct BadKind {
  std::string name;
  std::string reason_holds;
};

struct BadDataset {
  TempDir dir{"tilefeed-bad-dataset"};
  std::map<std::string, BadKind> bad;  // absolute path -> kind
  std::size_t total = 0;
};

// 1,000 small JPEGs in kClasses classes; every kBadEvery-th file is broken, each in another way.
std::unique_ptr<BadDataset> MakeBadDataset() {
  auto d = std::make_unique<BadDataset>();
  int n = 0;
  for (int c = 0; c < kClasses; ++c) {
    for (int i = 0; i < kPerClass; ++i, ++n) {
      char name[32];
      std::snprintf(name, sizeof(name), "img%04d.jpg", i);
      const fs::path path = d->dir.path() / ("class" + std::to_string(c)) / name;
      const auto seed = static_cast<std::uint64_t>(n);
      if (n % kBadEvery != kBadEvery / 2) {
        codecs::EncodeOptions o;
        o.progressive = n % 9 == 4;
        testing::WriteFile(path, testing::MakeJpeg(24 + n % 17, 24 + n % 13, o, seed));
        continue;
      }
      std::vector<std::byte> bytes;
      BadKind kind;
      switch (n / kBadEvery) {
        case 0:
          kind = {"truncated in the scan", "truncated"};
          bytes = testing::MakeJpeg(32, 32, codecs::EncodeOptions{}, seed);
          bytes.resize(bytes.size() - 12);  // the end of the entropy data and EOI
          break;
        case 1:
          kind = {"truncated in the headers", "truncated"};
          bytes = testing::MakeJpeg(32, 32, codecs::EncodeOptions{}, seed);
          bytes.resize(20);
          break;
        case 2:
          kind = {"garbage", "not a JPEG"};
          bytes = Garbage(seed, 700);
          break;
        case 3:
          // A whole PNG named .jpg decodes (the loader goes by the bytes); a cut one fails.
          kind = {"truncated PNG named .jpg", "truncated PNG"};
          bytes = testing::MakePngBytes();
          bytes.resize(bytes.size() - 20);
          break;
        case 4:
          kind = {"GIF named .jpg", "GIF"};
          bytes = testing::MakeGifBytes();
          break;
        case 5:
          kind = {"BMP named .jpg", "BMP"};
          bytes = testing::MakeBmpBytes();
          break;
        case 6:
          kind = {"empty", "empty"};
          break;
        case 7:
          kind = {"text", "text"};
          bytes = testing::MakeTextBytes();
          break;
        case 8:
          kind = {"huge declared dimensions", "limit"};
          bytes = HugeDeclaredJpeg(seed);
          break;
        default:
          kind = {"broken symlink", "No such file"};
          break;
      }
      if (kind.name == "broken symlink") {
        fs::create_directories(path.parent_path());
        fs::create_symlink(d->dir.path() / "missing.jpg", path);
      } else {
        testing::WriteFile(path, bytes);
      }
      d->bad.emplace(path.string(), kind);
    }
  }
  d->total = static_cast<std::size_t>(n);
  return d;
}

LoaderOptions Options(InstanceSlice slice) {
  LoaderOptions o;
  o.batch_size = 32;
  o.image_size = 16;
  o.workers = 2;
  o.prefetch_depth = 3;
  o.seed = 77;
  o.slice = slice;
  o.epochs = 1;  // no running ahead into a second epoch: every report is this epoch's
  return o;
}

// The dataset indices of the bad files, via the source's own paths.
std::set<std::uint64_t> BadIndices(const Source& source, const BadDataset& data) {
  std::set<std::uint64_t> out;
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (data.bad.count(source.Describe(i)) != 0) out.insert(i);
  }
  return out;
}

class BadDatasetTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() { data_ = MakeBadDataset().release(); }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }
  static BadDataset* data_;
};
BadDataset* BadDatasetTest::data_ = nullptr;

TEST_P(BadDatasetTest, SkipDeliversEveryGoodSampleAndReportsEveryBadOneOnce) {
  const BadDataset& data = *data_;
  ASSERT_EQ(data.bad.size(), data.total / kBadEvery);
  const int instances = GetParam();
  std::set<std::uint64_t> all_delivered;
  std::map<std::uint64_t, int> all_reports;  // sample -> times reported, over all instances
  std::set<std::uint64_t> bad;
  for (int index = 0; index < instances; ++index) {
    SCOPED_TRACE("instance " + std::to_string(index) + " of " + std::to_string(instances));
    std::mutex m;
    std::vector<BadSample> reported;
    LoaderOptions o = Options({index, instances});
    o.on_bad_sample = [&](const BadSample& b) {
      std::lock_guard lock(m);
      reported.push_back(b);
    };
    Loader loader(ImageFolder::Open(data.dir.path().string()), o);
    ASSERT_EQ(loader.source().size(), data.total);
    bad = BadIndices(loader.source(), data);
    ASSERT_EQ(bad.size(), data.bad.size());

    std::vector<std::uint64_t> delivered;
    std::size_t substituted = 0;
    for (Batch& batch : loader) {
      delivered.insert(delivered.end(), batch.sample_indices().begin(),
                       batch.sample_indices().end());
      substituted += batch.substituted();
    }
    EXPECT_FALSE(loader.Next().has_value()) << "more than the one epoch asked for";

    // This instance's slice, as the sampler defines it.
    const EpochOrder order(data.total, o.seed, 0, o.shuffle, o.slice);
    std::set<std::uint64_t> shard_good;
    std::set<std::uint64_t> shard_bad;
    for (std::size_t p = 0; p < order.size(); ++p) {
      (bad.count(order[p]) != 0 ? shard_bad : shard_good).insert(order[p]);
    }
    // Every slot is filled: a bad sample's slot holds a substitute.
    EXPECT_EQ(delivered.size(), order.size());
    EXPECT_EQ(substituted, shard_bad.size());
    const std::set<std::uint64_t> distinct(delivered.begin(), delivered.end());
    for (std::uint64_t s : shard_good) {
      EXPECT_EQ(distinct.count(s), 1u)
          << "good sample " << s << " (" << loader.source().Describe(s) << ") was not delivered";
    }
    for (std::uint64_t s : distinct) {
      EXPECT_EQ(bad.count(s), 0u) << "bad sample " << s << " was delivered";
      all_delivered.insert(s);
    }
    // Every bad sample of the slice reported once, with its path and a reason; nothing else.
    std::map<std::uint64_t, int> times;
    for (const BadSample& b : reported) {
      ++times[b.sample];
      ++all_reports[b.sample];
      EXPECT_EQ(b.epoch, 0u);
      EXPECT_EQ(b.where, loader.source().Describe(b.sample));
      const auto kind = data.bad.find(b.where);
      ASSERT_NE(kind, data.bad.end()) << "reported a good file: " << b.where << ": " << b.reason;
      EXPECT_NE(b.reason.find(kind->second.reason_holds), std::string::npos)
          << kind->second.name << ": " << b.where << ": " << b.reason;
    }
    for (std::uint64_t s : shard_bad) {
      EXPECT_EQ(times[s], 1) << data.bad.at(loader.source().Describe(s)).name << ": "
                             << loader.source().Describe(s) << " reported " << times[s] << " times";
    }
    EXPECT_EQ(times.size(), shard_bad.size());
    EXPECT_EQ(loader.metrics().bad_samples, shard_bad.size());
    EXPECT_EQ(loader.bad_samples().size(), shard_bad.size());
  }
  // Together the instances deliver every good sample and report every bad one once.
  EXPECT_EQ(all_delivered.size(), data.total - data.bad.size());
  ASSERT_EQ(all_reports.size(), bad.size());
  for (const auto& [sample, count] : all_reports) {
    EXPECT_EQ(bad.count(sample), 1u);
    EXPECT_EQ(count, 1) << "sample " << sample;
  }
}

TEST_P(BadDatasetTest, FailStopsAtTheFirstBadFileOfTheOrderNamingIt) {
  const BadDataset& data = *data_;
  const int instances = GetParam();
  for (int index = 0; index < instances; ++index) {
    SCOPED_TRACE("instance " + std::to_string(index) + " of " + std::to_string(instances));
    LoaderOptions o = Options({index, instances});
    o.bad_sample_policy = BadSamplePolicy::kFail;
    Loader loader(ImageFolder::Open(data.dir.path().string()), o);
    const std::set<std::uint64_t> bad = BadIndices(loader.source(), data);
    const EpochOrder order(data.total, o.seed, 0, o.shuffle, o.slice);
    std::size_t first_bad = order.size();
    for (std::size_t p = 0; p < order.size() && first_bad == order.size(); ++p) {
      if (bad.count(order[p]) != 0) first_bad = p;
    }
    ASSERT_LT(first_bad, order.size()) << "this slice has no bad file";
    const std::string path = loader.source().Describe(order[first_bad]);

    std::size_t batches = 0;
    std::string message;
    try {
      while (loader.Next()) ++batches;
    } catch (const LoaderError& e) {
      message = e.what();
    }
    ASSERT_FALSE(message.empty()) << "the epoch ended without an error";
    EXPECT_NE(message.find(path), std::string::npos)
        << "expected the first bad file " << path << " (" << data.bad.at(path).name
        << ") in: " << message;
    // The batches before the one that holds it all arrived.
    EXPECT_EQ(batches, first_bad / o.batch_size);
    EXPECT_THROW(loader.Next(), LoaderError);  // and it stays failed
  }
}

INSTANTIATE_TEST_SUITE_P(Loader, BadDatasetTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Instances";
                         });

}  // namespace
}  // namespace tilefeed::loader
