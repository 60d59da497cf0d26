#include "tilefeed/loader/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "loader/cifar.h"
#include "loader/image_folder.h"
#include "loader/loader_impl.h"
#include "tests/support/jpeg_maker.h"
#include "tests/support/temp_dir.h"
#include "tilefeed/codecs/jpeg_encoder.h"

namespace tilefeed::loader {
namespace {

using testing::TempDir;

// A small ImageFolder of real JPEGs with mixed sizes and encodings: 3 classes.
struct Dataset {
  TempDir dir{"tilefeed-loader"};
  std::vector<std::string> bad_files;  // relative paths of the broken ones
  std::size_t total = 0;
};

std::unique_ptr<Dataset> MakeDataset(int per_class, int bad_every = 0) {
  auto d = std::make_unique<Dataset>();
  int n = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < per_class; ++i, ++n) {
      const std::string rel = "class" + std::to_string(c) + "/img" + std::to_string(i) + ".JPEG";
      std::vector<std::byte> bytes;
      if (bad_every > 0 && n % bad_every == bad_every - 1) {
        // Rotate through broken kinds.
        switch ((n / bad_every) % 4) {
          case 0:  // a PNG named .JPEG decodes (the loader goes by the bytes); a cut one fails
            bytes = testing::MakePngBytes();
            bytes.resize(bytes.size() - 20);
            break;
          case 1: {
            bytes = testing::MakeJpeg(64, 48, codecs::EncodeOptions{}, n);
            bytes.resize(bytes.size() / 3);
            break;
          }
          case 2:
            break;  // empty
          default:
            bytes = testing::MakeTextBytes();
        }
        d->bad_files.push_back(rel);
      } else {
        codecs::EncodeOptions o;
        o.progressive = n % 7 == 3;
        o.subsampling = n % 5 == 1 ? codecs::Subsampling::k444 : codecs::Subsampling::k420;
        bytes = testing::MakeJpeg(40 + (n * 13) % 90, 36 + (n * 29) % 70, o, n);
      }
      testing::WriteFile(d->dir.path() / rel, bytes);
    }
  }
  d->total = static_cast<std::size_t>(n);
  return d;
}

struct Collected {
  std::vector<std::vector<std::uint8_t>> images;  // one entry per batch
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> indices;
  std::size_t batches = 0;
  std::size_t substituted = 0;
};

Collected RunEpoch(Loader& loader) {
  Collected out;
  for (Batch& batch : loader) {
    EXPECT_EQ(batch.index(), out.batches);
    out.images.emplace_back(batch.images().begin(), batch.images().end());
    out.labels.insert(out.labels.end(), batch.labels().begin(), batch.labels().end());
    out.indices.insert(out.indices.end(), batch.sample_indices().begin(),
                       batch.sample_indices().end());
    out.substituted += batch.substituted();
    ++out.batches;
  }
  return out;
}

LoaderOptions SmallOptions(int workers) {
  LoaderOptions o;
  o.batch_size = 8;
  o.image_size = 24;
  o.workers = workers;
  o.prefetch_depth = 3;
  o.seed = 1234;
  return o;
}

TEST(Loader, SameSeedGivesIdenticalBatchesForAnyWorkerCount) {
  auto data = MakeDataset(14);
  std::vector<Collected> runs;
  for (int workers : {1, 2, 4, 2}) {
    Loader loader(ImageFolder::Open(data->dir.path().string()), SmallOptions(workers));
    runs.push_back(RunEpoch(loader));
  }
  ASSERT_EQ(runs[0].batches, (3 * 14 + 7) / 8);
  for (std::size_t r = 1; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].indices, runs[0].indices) << "run " << r;
    EXPECT_EQ(runs[r].labels, runs[0].labels) << "run " << r;
    EXPECT_TRUE(runs[r].images == runs[0].images) << "pixels differ in run " << r;
  }
  // A different seed changes the order.
  LoaderOptions other = SmallOptions(2);
  other.seed = 99;
  Loader loader(ImageFolder::Open(data->dir.path().string()), other);
  EXPECT_NE(RunEpoch(loader).indices, runs[0].indices);
}

TEST(Loader, EveryEpochDeliversEverySampleOnceAndThenEnds) {
  auto data = MakeDataset(10);
  LoaderOptions o = SmallOptions(2);
  o.epochs = 3;
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  std::vector<std::uint64_t> first;
  for (int epoch = 0; epoch < 3; ++epoch) {
    const Collected c = RunEpoch(loader);
    std::vector<std::uint64_t> sorted = c.indices;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> all(data->total);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    EXPECT_EQ(sorted, all) << "epoch " << epoch;
    if (epoch == 0) first = c.indices;
    if (epoch == 1) {
      EXPECT_NE(c.indices, first) << "epochs must be shuffled differently";
    }
    // Labels follow the class directories.
    for (std::size_t i = 0; i < c.indices.size(); ++i) {
      EXPECT_EQ(c.labels[i], static_cast<std::int32_t>(c.indices[i] / 10));
    }
  }
  EXPECT_FALSE(loader.Next().has_value());  // all epochs done
  EXPECT_FALSE(loader.Next().has_value());
}

TEST(Loader, InstanceShardsAreDisjointAndCoverTheEpoch) {
  auto data = MakeDataset(11);  // 33 samples over 4 instances: padded to 36
  std::multiset<std::uint64_t> seen;
  std::size_t batches = 0;
  for (int i = 0; i < 4; ++i) {
    LoaderOptions o = SmallOptions(2);
    o.batch_size = 3;
    o.slice = {i, 4};
    Loader loader(ImageFolder::Open(data->dir.path().string()), o);
    EXPECT_EQ(loader.samples_per_epoch(), 9u);
    const Collected c = RunEpoch(loader);
    if (i == 0) batches = c.batches;
    EXPECT_EQ(c.batches, batches) << "instances must run the same number of steps";
    seen.insert(c.indices.begin(), c.indices.end());
  }
  EXPECT_EQ(seen.size(), 36u);
  std::size_t repeats = 0;
  for (std::uint64_t i = 0; i < data->total; ++i) {
    ASSERT_GE(seen.count(i), 1u) << "sample " << i << " was not delivered";
    repeats += seen.count(i) - 1;
  }
  EXPECT_EQ(repeats, 3u);  // only the padding repeats
}

TEST(Loader, SkipPolicyReplacesAndReportsEveryBadSample) {
  auto data = MakeDataset(20, 6);  // 10 of 60 broken
  std::mutex m;
  std::vector<BadSample> reported;
  LoaderOptions o = SmallOptions(2);
  // The loader runs ahead into the next epoch, so count this epoch's reports only.
  o.on_bad_sample = [&](const BadSample& b) {
    std::lock_guard lock(m);
    if (b.epoch == 0) reported.push_back(b);
  };
  auto source = ImageFolder::Open(data->dir.path().string());
  Loader loader(std::move(source), o);
  const Collected c = RunEpoch(loader);
  EXPECT_EQ(c.indices.size(), data->total);  // full batches all the same
  EXPECT_EQ(c.substituted, data->bad_files.size());
  ASSERT_EQ(reported.size(), data->bad_files.size());
  std::set<std::string> where;
  for (const BadSample& b : reported) {
    where.insert(b.where);
    EXPECT_FALSE(b.reason.empty());
  }
  for (const std::string& rel : data->bad_files) {
    const std::string path = (data->dir.path() / rel).string();
    EXPECT_TRUE(where.count(path)) << path << " was not reported";
  }
  // Good samples all arrive; bad ones never do.
  const std::set<std::uint64_t> delivered(c.indices.begin(), c.indices.end());
  EXPECT_EQ(delivered.size(), data->total - data->bad_files.size());
  loader.Stop();
  std::size_t first_epoch_bad = 0;
  for (const BadSample& b : loader.bad_samples()) first_epoch_bad += b.epoch == 0;
  EXPECT_EQ(first_epoch_bad, data->bad_files.size());
  EXPECT_GE(loader.metrics().bad_samples, data->bad_files.size());

  // The substitutes are deterministic too.
  Loader again(ImageFolder::Open(data->dir.path().string()), SmallOptions(1));
  EXPECT_EQ(RunEpoch(again).indices, c.indices);
}

TEST(Loader, FailPolicySurfacesThePathOnTheConsumerThread) {
  auto data = MakeDataset(8, 5);
  LoaderOptions o = SmallOptions(2);
  o.bad_sample_policy = BadSamplePolicy::kFail;
  o.shuffle = false;  // the first bad file in order is known
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  std::string message;
  try {
    while (loader.Next()) {
    }
  } catch (const LoaderError& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty()) << "no error surfaced";
  EXPECT_NE(message.find(data->bad_files.front()), std::string::npos) << message;
  EXPECT_THROW(loader.Next(), LoaderError);  // and it stays failed
}

TEST(Loader, StopsPromptlyMidEpochUnderLoad) {
  auto data = MakeDataset(30);
  for (int taken : {0, 1, 2}) {
    LoaderOptions o = SmallOptions(2);
    o.batch_size = 4;
    o.image_size = 160;
    o.epochs = 0;  // endless
    auto loader = std::make_unique<Loader>(ImageFolder::Open(data->dir.path().string()), o);
    std::vector<Batch> held;
    held.reserve(static_cast<std::size_t>(taken));
    for (int i = 0; i < taken; ++i) held.push_back(*loader->Next());
    held.clear();  // slots go back before the loader goes
    const auto start = std::chrono::steady_clock::now();
    loader->Stop();
    EXPECT_FALSE(loader->Next().has_value());
    loader.reset();
    // Generous: one decode per worker plus a poll interval, not a timing assertion of speed.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  }
}

TEST(Loader, BatchesHeldByTheConsumerBoundTheWork) {
  auto data = MakeDataset(10);
  LoaderOptions o = SmallOptions(2);
  o.batch_size = 2;
  o.prefetch_depth = 3;
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  std::vector<Batch> held;
  held.reserve(3);
  for (int i = 0; i < 3; ++i) held.push_back(*loader.Next());  // every slot is out
  EXPECT_EQ(loader.metrics().images, 6u);                      // so nothing else could be decoded
  held.erase(held.begin());
  auto next = loader.Next();  // a returned slot lets the next batch through
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->index(), 3u);
  EXPECT_EQ(loader.metrics().slot_bytes, 2u * 24 * 24 * 3 + 2 * (4 + 8));
}

TEST(Loader, KeepingEverySlotThrowsInsteadOfWaitingForever) {
  auto data = MakeDataset(10);
  LoaderOptions o = SmallOptions(2);
  o.batch_size = 2;
  o.prefetch_depth = 2;
  o.held_slots_timeout = std::chrono::milliseconds(100);
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  std::vector<Batch> kept;
  kept.reserve(2);
  for (int i = 0; i < 2; ++i) kept.push_back(*loader.Next());
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)loader.Next();
    FAIL() << "Next() returned while the consumer held every slot";
  } catch (const SlotsHeldError& e) {
    EXPECT_NE(std::string(e.what()).find("prefetch_depth=2"), std::string::npos) << e.what();
  }
  // Generous for a loaded machine: the point is that it returns at all.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  kept.erase(kept.begin());  // not sticky: a returned slot lets the next batch through
  auto next = loader.Next();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->index(), 2u);
}

TEST(Loader, SlotsReleasedByAnotherThreadOrAnEpochEndAreNotADeadlock) {
  auto small = MakeDataset(2);  // 6 samples: 3 batches of 2
  LoaderOptions o = SmallOptions(2);
  o.batch_size = 2;
  o.prefetch_depth = 3;
  // Long enough for the end-of-epoch marker to be published after the last batch.
  o.held_slots_timeout = std::chrono::seconds(30);
  {
    Loader loader(ImageFolder::Open(small->dir.path().string()), o);
    std::vector<Batch> kept;
    kept.reserve(3);
    for (int i = 0; i < 3; ++i) kept.push_back(*loader.Next());
    EXPECT_FALSE(loader.Next().has_value());  // the end-of-epoch marker needs no slot
  }
  auto data = MakeDataset(4);                                 // 12 samples: 6 batches of 2
  o.held_slots_timeout = LoaderOptions().held_slots_timeout;  // the default: forever
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  std::vector<Batch> kept;
  kept.reserve(3);
  for (int i = 0; i < 3; ++i) kept.push_back(*loader.Next());
  std::jthread releaser([batch = std::move(kept.front())]() mutable { batch.ReturnSlot(); });
  auto next = loader.Next();  // waits for the other thread's release
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->index(), 3u);
}

TEST(Loader, NchwIsTheTransposeOfNhwc) {
  auto data = MakeDataset(4);
  LoaderOptions o = SmallOptions(2);
  Loader nhwc(ImageFolder::Open(data->dir.path().string()), o);
  o.output.layout = Layout::kNchw;
  Loader nchw(ImageFolder::Open(data->dir.path().string()), o);
  const Collected a = RunEpoch(nhwc), b = RunEpoch(nchw);
  ASSERT_EQ(a.batches, b.batches);
  const int s = 24;
  for (std::size_t k = 0; k < a.images.size(); ++k) {
    const std::size_t n = a.images[k].size() / (static_cast<std::size_t>(s) * s * 3);
    for (std::size_t i = 0; i < n; ++i) {
      for (int p = 0; p < s * s; ++p) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(a.images[k][(i * s * s + p) * 3 + c], b.images[k][(i * 3 + c) * s * s + p]);
        }
      }
    }
  }
}

TEST(Loader, DropLastBatchAndPartialLastBatch) {
  auto data = MakeDataset(5);  // 15 samples
  LoaderOptions o = SmallOptions(1);
  o.batch_size = 4;
  {
    Loader loader(ImageFolder::Open(data->dir.path().string()), o);
    EXPECT_EQ(loader.batches_per_epoch(), 4u);
    std::vector<std::size_t> sizes;
    for (Batch& b : loader) sizes.push_back(b.size());
    EXPECT_EQ(sizes, (std::vector<std::size_t>{4, 4, 4, 3}));
  }
  o.drop_last_batch = true;
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  EXPECT_EQ(loader.batches_per_epoch(), 3u);
  EXPECT_EQ(RunEpoch(loader).indices.size(), 12u);
}

TEST(Loader, RejectsBadOptions) {
  auto data = MakeDataset(2);
  auto make = [&](auto edit) {
    LoaderOptions o = SmallOptions(1);
    edit(o);
    return Loader(ImageFolder::Open(data->dir.path().string()), o);
  };
  EXPECT_THROW(make([](LoaderOptions& o) { o.batch_size = 0; }), std::invalid_argument);
  EXPECT_THROW(make([](LoaderOptions& o) { o.prefetch_depth = 1 << 21; }), std::invalid_argument);
  EXPECT_THROW(make([](LoaderOptions& o) { o.slice = {2, 2}; }), std::invalid_argument);
  EXPECT_THROW(make([](LoaderOptions& o) {
                 o.batch_size = 100;
                 o.drop_last_batch = true;
               }),
               std::invalid_argument);
}

// A batch larger than the machine was std::bad_alloc with no arithmetic, and a
// huge prefetch depth allocated for gigabytes before failing. Both are refused before any
// slot is allocated, with the arithmetic. (Do not run this on an older tilefeed: its
// prefetch-depth case allocates until the machine runs out.)
TEST(Loader, RefusesSlotsLargerThanTheMachineWithTheArithmetic) {
  auto data = MakeDataset(2);
  auto message = [&](auto edit) -> std::string {
    LoaderOptions o = SmallOptions(1);
    edit(o);
    try {
      Loader loader(ImageFolder::Open(data->dir.path().string()), o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_THAT(message([](LoaderOptions& o) {
                o.batch_size = std::size_t{1} << 40;
                o.image_size = 224;
                o.drop_last_batch = false;
              }),
              ::testing::HasSubstr("bytes this process may use ("));
  EXPECT_THAT(message([](LoaderOptions& o) {
                o.batch_size = std::size_t{1} << 40;
                o.image_size = 224;
                o.drop_last_batch = false;
              }),
              ::testing::HasSubstr("batch 1099511627776 x 224 x 224 x 3 (+ 12 bytes"));
  EXPECT_THAT(message([](LoaderOptions& o) {
                o.prefetch_depth = std::size_t{1} << 20;
                o.batch_size = 256;
                o.image_size = 1024;
                o.drop_last_batch = false;
              }),
              ::testing::HasSubstr("prefetch_depth 1048576 slots x batch 256 x 1024 x 1024 x 3"));
}

// The limit slots are held to is the process's own cgroup's, v1 or v2, nested: read from a
// folder laid out like /proc/self/cgroup and /sys/fs/cgroup (a real cgroup:
// tests/loader/memory_cgroup_test.sh).
TEST(MemoryLimit, IsTheLowestOfTheProcessCgroupTheGroupsAboveItAndPhysicalMemory) {
  TempDir root("tilefeed-cgroup");
  const auto write = [&](const std::string& path, const std::string& text) {
    testing::WriteFile(root.path() / path, std::as_bytes(std::span(text)));
  };
  const auto limit = [&](std::uint64_t physical) {
    const detail::MemoryLimit got = detail::MemoryLimitOf(root.path(), physical);
    return std::to_string(got.bytes) + " " +
           std::filesystem::path(got.where).lexically_relative(root.path()).string();
  };
  EXPECT_EQ(detail::MemoryLimitOf(root.path(), 1 << 30).where, "physical memory");
  // v2, nested: the group's own memory.max is "max", its parent's and grandparent's are set.
  write("proc/self/cgroup", "0::/jobs/a/b\n");
  write("sys/fs/cgroup/jobs/a/b/memory.max", "max\n");
  write("sys/fs/cgroup/jobs/a/memory.max", "2147483648\n");
  write("sys/fs/cgroup/jobs/memory.max", "4294967296\n");
  EXPECT_EQ(limit(8ULL << 30), "2147483648 sys/fs/cgroup/jobs/a/memory.max");
  EXPECT_EQ(detail::MemoryLimitOf(root.path(), 1 << 30).where, "physical memory");
  // Hybrid: v2 mounted at sys/fs/cgroup/unified.
  write("sys/fs/cgroup/unified/jobs/a/b/memory.max", "1610612736\n");
  EXPECT_EQ(limit(8ULL << 30), "1610612736 sys/fs/cgroup/unified/jobs/a/b/memory.max");
  // v1: the memory controller's line (alone or with others), v1's "no limit", a nested limit.
  for (const char* controllers : {"memory", "cpu,memory"}) {
    write("proc/self/cgroup",
          std::string("9:cpu,cpuacct:/\n4:") + controllers + ":/slurm/job7/step0\n0::/\n");
    write("sys/fs/cgroup/memory/slurm/job7/step0/memory.limit_in_bytes", "9223372036854771712\n");
    write("sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes", "1073741824\n");
    EXPECT_EQ(limit(8ULL << 30), "1073741824 sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes")
        << controllers;
  }
  // A v1 line without the memory controller is not read.
  write("proc/self/cgroup", "9:cpu,cpuacct:/slurm/job7/step0\n");
  EXPECT_EQ(limit(8ULL << 30), std::to_string(8ULL << 30) + " ");
}

// Caller-provided slot memory (LoaderOptions::slot_memory): one arena with a guard gap
// between the slots, whose bytes must stay untouched.
class ArenaSlots final : public SlotMemory {
 public:
  explicit ArenaSlots(std::size_t shorten = 0) : shorten_(shorten) {}
  Spans Slot(std::size_t slot, std::size_t slots, std::size_t samples,
             std::size_t image_bytes) override {
    if (arena_.empty()) {
      image_stride_ = samples * image_bytes + kGuard;
      arena_.assign(slots * image_stride_, kGuardByte);
      labels_.assign(slots * samples, 0);
      indices_.assign(slots * samples, 0);
      samples_ = samples;
      slots_ = slots;
    }
    ++calls;
    return Spans{{arena_.data() + slot * image_stride_, samples * image_bytes - shorten_},
                 {labels_.data() + slot * samples, samples},
                 {indices_.data() + slot * samples, samples}};
  }
  // Which slot `images` lies in, or -1 if it is not inside this arena's slots.
  int SlotOf(std::span<const std::uint8_t> images) const {
    for (std::size_t k = 0; k < slots_; ++k) {
      const std::uint8_t* begin = arena_.data() + k * image_stride_;
      if (images.data() == begin && images.size() <= image_stride_ - kGuard) {
        return static_cast<int>(k);
      }
    }
    return -1;
  }
  bool GuardsIntact() const {
    for (std::size_t k = 0; k < slots_; ++k) {
      const std::uint8_t* guard = arena_.data() + (k + 1) * image_stride_ - kGuard;
      for (std::size_t i = 0; i < kGuard; ++i) {
        if (guard[i] != kGuardByte) return false;
      }
    }
    return true;
  }
  int calls = 0;

 private:
  static constexpr std::size_t kGuard = 64;
  static constexpr std::uint8_t kGuardByte = 0xA5;
  std::size_t shorten_ = 0;
  std::size_t image_stride_ = 0, samples_ = 0, slots_ = 0;
  std::vector<std::uint8_t> arena_;
  std::vector<std::int32_t> labels_;
  std::vector<std::uint64_t> indices_;
};

TEST(Loader, DecodesIntoCallerProvidedSlotMemory) {
  auto data = MakeDataset(9);
  Loader reference(ImageFolder::Open(data->dir.path().string()), SmallOptions(2));
  const Collected expected = RunEpoch(reference);

  LoaderOptions options = SmallOptions(2);
  auto arena = std::make_shared<ArenaSlots>();
  options.slot_memory = arena;
  Loader loader(ImageFolder::Open(data->dir.path().string()), options);
  EXPECT_EQ(arena->calls, 3);  // once per slot (prefetch_depth)
  Collected got;
  for (Batch& batch : loader) {
    // The batch views the caller's memory of the slot it reports.
    EXPECT_EQ(arena->SlotOf(batch.images()), static_cast<int>(batch.slot()));
    EXPECT_LT(batch.slot(), options.prefetch_depth);
    got.images.emplace_back(batch.images().begin(), batch.images().end());
    got.labels.insert(got.labels.end(), batch.labels().begin(), batch.labels().end());
    got.indices.insert(got.indices.end(), batch.sample_indices().begin(),
                       batch.sample_indices().end());
  }
  EXPECT_TRUE(got.images == expected.images);
  EXPECT_EQ(got.labels, expected.labels);
  EXPECT_EQ(got.indices, expected.indices);
  EXPECT_TRUE(arena->GuardsIntact());

  // Too little memory for a batch is refused before any worker starts.
  LoaderOptions short_options = SmallOptions(1);
  short_options.slot_memory = std::make_shared<ArenaSlots>(1);
  EXPECT_THROW(Loader(ImageFolder::Open(data->dir.path().string()), short_options),
               std::invalid_argument);
}

TEST(Loader, EvalModeIsTheSameEveryEpochUpToOrder) {
  auto data = MakeDataset(4);
  LoaderOptions o = SmallOptions(2);
  o.mode = Mode::kEval;
  o.eval_resize = 32;
  o.epochs = 2;
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  std::map<std::uint64_t, std::vector<std::uint8_t>> first;
  const std::size_t image = std::size_t{24} * 24 * 3;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (Batch& b : loader) {
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto at = b.images().begin() + static_cast<std::ptrdiff_t>(i * image);
        std::vector<std::uint8_t> px(at, at + static_cast<std::ptrdiff_t>(image));
        const std::uint64_t idx = b.sample_indices()[i];
        if (epoch == 0) {
          first[idx] = px;
        } else {
          EXPECT_EQ(first[idx], px) << "sample " << idx;
        }
      }
    }
  }
}

TEST(Loader, RawCifarSamplesPassThroughUnchangedAtTheirOwnSize) {
  TempDir dir("tilefeed-cifar");
  std::vector<std::byte> records;
  for (int r = 0; r < 10; ++r) {
    records.push_back(std::byte(r % 10));
    for (int i = 0; i < 3072; ++i) records.push_back(std::byte((i * 7 + r * 31) & 0xFF));
  }
  testing::WriteFile(dir.path() / "test_batch.bin", records);
  LoaderOptions o = SmallOptions(2);
  o.image_size = 32;
  o.mode = Mode::kEval;
  o.eval_resize = 32;
  o.batch_size = 5;
  Loader loader(Cifar10::Open(dir.path().string(), Split::kVal), o);
  for (Batch& b : loader) {
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::uint64_t r = b.sample_indices()[i];
      EXPECT_EQ(b.labels()[i], static_cast<std::int32_t>(r % 10));
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x) {
          for (int c = 0; c < 3; ++c) {
            const auto expected = std::uint8_t(
                (static_cast<std::size_t>((c * 1024 + y * 32 + x)) * 7 + r * 31) & 0xFF);
            ASSERT_EQ(b.images()[i * 3072 + static_cast<std::size_t>((y * 32 + x)) * 3 + c],
                      expected);
          }
        }
      }
    }
  }
}

// Every batch of a run, flattened: (epoch, index, labels, indices, pixels).
struct Delivered {
  std::uint64_t epoch;
  std::uint64_t index;
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> indices;
  std::vector<std::uint8_t> images;
  friend bool operator==(const Delivered&, const Delivered&) = default;
};

// A copy of a batch's contents.
Delivered Copy(const Batch& batch) {
  return {batch.epoch(),
          batch.index(),
          {batch.labels().begin(), batch.labels().end()},
          {batch.sample_indices().begin(), batch.sample_indices().end()},
          {batch.images().begin(), batch.images().end()}};
}

// 27 samples in batches of 4 for two epochs: 7 batches per epoch, the last one short.
LoaderOptions TwoEpochsOfSevenBatches(int workers) {
  LoaderOptions o = SmallOptions(workers);
  o.batch_size = 4;
  o.epochs = 2;
  return o;
}

// Takes up to `limit` batches (crossing epoch ends) and returns them.
std::vector<Delivered> Take(Loader& loader, std::size_t limit, std::uint64_t last_epoch) {
  std::vector<Delivered> out;
  while (out.size() < limit) {
    auto batch = loader.Next();
    if (!batch) {
      if (loader.state().epoch > last_epoch) break;
      continue;
    }
    out.push_back(Copy(*batch));
  }
  return out;
}

// Every batch of a run over `data` with `o` from epoch 0 through its last (o.epochs != 0).
std::vector<Delivered> Uninterrupted(const Dataset& data, const LoaderOptions& o) {
  Loader loader(ImageFolder::Open(data.dir.path().string()), o);
  return Take(loader, std::numeric_limits<std::size_t>::max(), o.epochs - 1);
}

TEST(LoaderResume, ResumingAtAnyBatchGivesTheUninterruptedBatchesByteForByte) {
  auto data = MakeDataset(9);
  const LoaderOptions o = TwoEpochsOfSevenBatches(2);
  const std::vector<Delivered> expected = Uninterrupted(*data, o);
  ASSERT_EQ(expected.size(), 14u);
  for (std::size_t cut = 0; cut <= expected.size(); ++cut) {
    SCOPED_TRACE(cut);
    LoaderState saved;
    {
      Loader first(ImageFolder::Open(data->dir.path().string()), o);
      const auto before = Take(first, cut, 1);
      ASSERT_EQ(before.size(), cut);
      saved = LoaderState::Parse(first.state().Serialize());  // through a checkpoint file
    }
    LoaderOptions resumed = SmallOptions(static_cast<int>(cut % 2 + 1));  // any worker count
    resumed.batch_size = 4;
    resumed.epochs = 2 - saved.epoch;
    std::vector<Delivered> after;
    if (resumed.epochs > 0) {
      Loader second(ImageFolder::Open(data->dir.path().string()), resumed, saved);
      after = Take(second, 1000, 1);
    }
    ASSERT_EQ(after.size(), expected.size() - cut);
    for (std::size_t i = 0; i < after.size(); ++i) {
      const Delivered& want = expected[cut + i];
      EXPECT_EQ(after[i].epoch, want.epoch);
      EXPECT_EQ(after[i].indices, want.indices);
      EXPECT_EQ(after[i].labels, want.labels);
      EXPECT_TRUE(after[i].images == want.images) << "pixels differ in batch " << i;
    }
  }
}

TEST(LoaderResume, AnotherInstanceCountLosesAndRepeatsNothing) {
  auto data = MakeDataset(13);  // 39 samples
  LoaderOptions o = SmallOptions(1);
  o.batch_size = 3;
  o.epochs = 1;
  std::multiset<std::uint64_t> seen;
  LoaderState saved;
  for (int i = 0; i < 2; ++i) {  // two instances take two batches each, then stop
    LoaderOptions mine = o;
    mine.slice = {i, 2};
    Loader loader(ImageFolder::Open(data->dir.path().string()), mine);
    for (const Delivered& d : Take(loader, 2, 0)) seen.insert(d.indices.begin(), d.indices.end());
    saved = loader.state();
  }
  EXPECT_EQ(saved.position, 12u);  // 2 instances x 2 batches x 3 samples
  std::size_t padding = 0;
  for (int i = 0; i < 3; ++i) {  // three instances finish the epoch
    LoaderOptions mine = o;
    mine.slice = {i, 3};
    Loader loader(ImageFolder::Open(data->dir.path().string()), mine, saved);
    EXPECT_EQ(loader.state(), saved);
    for (const Delivered& d : Take(loader, 1000, 0)) {
      seen.insert(d.indices.begin(), d.indices.end());
    }
    padding = 3 * 9 - (39 - 12);  // 27 remaining samples over 3 instances: no padding
  }
  EXPECT_EQ(padding, 0u);
  for (std::uint64_t i = 0; i < data->total; ++i) {
    EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
  }
  EXPECT_EQ(seen.size(), data->total);
}

TEST(LoaderResume, StateTextIsValidated) {
  EXPECT_THROW(LoaderState::Parse("nonsense"), std::invalid_argument);
  EXPECT_THROW(LoaderState::Parse("tilefeed-loader-state v1 seed=1 epoch=2 position=50 size=10"),
               std::invalid_argument);
  EXPECT_THROW(
      LoaderState::Parse("tilefeed-loader-state v1 seed=1 epoch=2 position=5 size=10 extra"),
      std::invalid_argument);
  const LoaderState state{7, 3, 5, 10};
  EXPECT_EQ(LoaderState::Parse(state.Serialize()), state);
  // A start state for another dataset, or past its end, is refused; its seed is the run's.
  auto data = MakeDataset(2);
  const LoaderOptions o = SmallOptions(1);
  EXPECT_THROW(Loader(ImageFolder::Open(data->dir.path().string()), o, LoaderState{7, 0, 0, 99}),
               std::invalid_argument);
  EXPECT_THROW(Loader(ImageFolder::Open(data->dir.path().string()), o,
                      LoaderState{7, 0, data->total + 1, data->total}),
               std::invalid_argument);
  const Loader started(ImageFolder::Open(data->dir.path().string()), o,
                       LoaderState{7, 2, 1, data->total});
  EXPECT_EQ(started.options().seed, 7u);
  EXPECT_EQ(started.first_epoch(), 2u);
  EXPECT_EQ(started.state(), (LoaderState{7, 2, 1, data->total}));
}

// A Source that reads nothing until the test opens its gate: a loader over it has no batch
// ready, deterministically, until then.
class GatedSource : public Source {
 public:
  explicit GatedSource(std::unique_ptr<Source> inner) : inner_(std::move(inner)) {}
  void Open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    opened_.notify_all();
  }
  std::size_t size() const override { return inner_->size(); }
  SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override {
    std::unique_lock lock(mutex_);
    opened_.wait(lock, [&] { return open_; });
    lock.unlock();
    return inner_->Read(index, buffer);
  }
  std::string Describe(std::size_t index) const override { return inner_->Describe(index); }
  std::int32_t Label(std::size_t index) const override { return inner_->Label(index); }

 private:
  std::unique_ptr<Source> inner_;
  mutable std::mutex mutex_;
  mutable std::condition_variable opened_;
  bool open_ = false;
};

// Every batch until the loader ends, asking with Next(timeout); counts the timeouts.
std::vector<Delivered> TakeWithTimeouts(Loader& loader, std::chrono::milliseconds timeout,
                                        std::size_t& timeouts) {
  std::vector<Delivered> out;
  for (;;) {
    Loader::NextResult next = loader.Next(timeout);
    if (next.status == NextStatus::kEnded) return out;
    if (next.status == NextStatus::kTimedOut) ++timeouts;
    if (next.status == NextStatus::kBatch) out.push_back(Copy(*next.batch));
  }
}

TEST(Loader, TimedOutNextConsumesNothing) {
  auto data = MakeDataset(9);
  const LoaderOptions o = TwoEpochsOfSevenBatches(2);
  const std::vector<Delivered> expected = Uninterrupted(*data, o);
  ASSERT_EQ(expected.size(), 14u);

  auto gated = std::make_unique<GatedSource>(ImageFolder::Open(data->dir.path().string()));
  GatedSource& gate = *gated;
  Loader loader(std::move(gated), o);
  const LoaderState before = loader.state();
  for (int i = 0; i < 3; ++i) {
    const Loader::NextResult next = loader.Next(std::chrono::milliseconds{3});
    EXPECT_EQ(next.status, NextStatus::kTimedOut);
    EXPECT_FALSE(next.batch.has_value());
    EXPECT_EQ(loader.state(), before);
    EXPECT_FALSE(loader.ended());
  }
  gate.Open();
  // Slices of 1 ms time out often on a loaded machine; none may lose or repeat a batch.
  std::size_t timeouts = 0;
  const std::vector<Delivered> got =
      TakeWithTimeouts(loader, std::chrono::milliseconds{1}, timeouts);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i] == expected[i]) << "batch " << i << " differs (" << timeouts << " timeouts)";
  }
}

TEST(Loader, EndedAfterTheLastEpochAndAfterStop) {
  auto data = MakeDataset(4);  // 12 samples, batch 8: 2 batches per epoch
  LoaderOptions o = SmallOptions(2);
  o.epochs = 2;
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    EXPECT_FALSE(loader.ended());
    EXPECT_EQ(RunEpoch(loader).batches, 2u);
  }
  EXPECT_TRUE(loader.ended());
  EXPECT_EQ(loader.Next(std::chrono::seconds{60}).status, NextStatus::kEnded);
  EXPECT_FALSE(loader.Next().has_value());

  o.epochs = 0;  // no end of its own
  Loader endless(ImageFolder::Open(data->dir.path().string()), o);
  EXPECT_EQ(RunEpoch(endless).batches, 2u);
  std::optional<Batch> held = endless.Next();
  ASSERT_TRUE(held.has_value());
  EXPECT_FALSE(endless.ended());
  endless.Stop();
  EXPECT_TRUE(endless.ended());
  EXPECT_EQ(endless.Next(std::chrono::milliseconds{0}).status, NextStatus::kEnded);
}

TEST(LoaderResume, SeekGivesTheBatchesOfAStartedLoaderByteForByte) {
  auto data = MakeDataset(9);
  LoaderOptions o = TwoEpochsOfSevenBatches(2);
  o.image_size = SizeSchedule::Parse("ramp:16,32,0,1,8");  // a Seek lands at its epoch's size
  // expected[k] is the k-th batch of an uninterrupted run; states[k] the state before it.
  std::vector<Delivered> expected;
  std::vector<LoaderState> states;
  {
    Loader whole(ImageFolder::Open(data->dir.path().string()), o);
    for (;;) {
      const LoaderState state = whole.state();
      std::optional<Batch> batch = whole.Next();
      if (!batch) {
        if (whole.ended()) break;
        continue;
      }
      states.push_back(state);
      expected.push_back(Copy(*batch));
    }
  }
  ASSERT_EQ(expected.size(), 14u);
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  // Forward, backward, across the epoch end and to the very start, from wherever the
  // loader is, while a batch from before the Seek is still held.
  for (const std::size_t target : {5u, 1u, 7u, 0u, 3u, 12u}) {
    SCOPED_TRACE(target);
    std::optional<Batch> kept = loader.Next();
    ASSERT_TRUE(kept.has_value());
    const Delivered kept_copy = Copy(*kept);
    loader.Seek(states[target]);
    EXPECT_EQ(loader.state(), states[target]);
    EXPECT_FALSE(loader.ended());
    for (std::size_t k = target; k < std::min<std::size_t>(target + 3, expected.size()); ++k) {
      std::optional<Batch> batch = loader.Next();
      if (!batch) batch = loader.Next();  // the end of epoch 0
      ASSERT_TRUE(batch.has_value()) << "batch " << k;
      // index() counts from the resumed position, as in a loader started there.
      Delivered got = Copy(*batch);
      got.index = expected[k].index;
      EXPECT_TRUE(got == expected[k]) << "batch " << k << " differs";
    }
    EXPECT_TRUE(Copy(*kept) == kept_copy) << "a batch held across Seek() was overwritten";
  }
  // A state outside the loader's epochs leaves it ended; one inside starts it again.
  loader.Seek(LoaderState{o.seed, 2, 0, data->total});
  EXPECT_TRUE(loader.ended());
  EXPECT_FALSE(loader.Next().has_value());
  loader.Seek(states[13]);
  EXPECT_FALSE(loader.ended());
  std::optional<Batch> last = loader.Next();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->sample_indices()[0], expected[13].indices[0]);
}

TEST(LoaderResume, SeekWhileAnotherThreadDropsBatchesLosesNoSlot) {
  auto data = MakeDataset(9);
  LoaderOptions o = TwoEpochsOfSevenBatches(2);
  o.held_slots_timeout = std::chrono::seconds{30};  // a lost slot fails instead of hanging
  const std::vector<Delivered> expected = Uninterrupted(*data, o);
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  const LoaderState start = loader.state();
  for (int round = 0; round < 10; ++round) {
    std::vector<Batch> held;
    for (int i = 0; i < 2; ++i) {
      std::optional<Batch> batch = loader.Next();
      ASSERT_TRUE(batch.has_value());
      held.push_back(std::move(*batch));
    }
    std::jthread dropper([held = std::move(held)]() mutable { held.clear(); });
    loader.Seek(start);
  }
  // Every slot is back exactly once: prefetch_depth batches can be held at once, and the
  // batches are the uninterrupted run's.
  std::vector<Batch> all_held;
  std::vector<Delivered> got;
  for (std::size_t k = 0; k < expected.size(); ++k) {
    std::optional<Batch> batch = loader.Next();
    if (!batch) batch = loader.Next();  // the end of epoch 0
    ASSERT_TRUE(batch.has_value());
    got.push_back(Copy(*batch));
    all_held.push_back(std::move(*batch));
    if (all_held.size() == o.prefetch_depth) all_held.clear();
  }
  EXPECT_TRUE(got == expected);
}

TEST(LoaderResume, SeekRefusesAnotherSeedOrDatasetSize) {
  auto data = MakeDataset(2);
  const LoaderOptions o = SmallOptions(1);
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  auto message = [&](const LoaderState& state) {
    try {
      loader.Seek(state);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message({o.seed + 1, 0, 0, data->total}).find("seed"), std::string::npos);
  EXPECT_NE(message({o.seed, 0, 0, data->total + 1}).find("dataset"), std::string::npos);
  EXPECT_NE(message({o.seed, 0, data->total + 1, data->total}).find("past"), std::string::npos);
  EXPECT_EQ(loader.state(), (LoaderState{o.seed, 0, 0, data->total}));  // unchanged
  EXPECT_TRUE(loader.Next().has_value());
  loader.Stop();
  EXPECT_THROW(loader.Seek({o.seed, 0, 0, data->total}), std::logic_error);
}

}  // namespace
}  // namespace tilefeed::loader

namespace tilefeed::loader {
namespace {

// A fork() pauses a running loader mid-epoch: the batches after Resume() are those of a
// loader that was never paused, and while paused a timed Next() consumes nothing.
TEST(LoaderPause, ResumeGivesTheUninterruptedBatchesByteForByte) {
  auto data = MakeDataset(9);
  const LoaderOptions o = TwoEpochsOfSevenBatches(2);
  const std::vector<Delivered> expected = Uninterrupted(*data, o);
  for (std::size_t at : {0u, 3u, 7u, 10u}) {
    Loader loader(ImageFolder::Open(data->dir.path().string()), o);
    std::vector<Delivered> got = Take(loader, at, 1);
    loader.Pause();
    loader.Pause();  // idempotent
    const LoaderState paused = loader.state();
    EXPECT_EQ(loader.Next(std::chrono::milliseconds(50)).status, NextStatus::kTimedOut);
    EXPECT_EQ(loader.state(), paused);
    loader.Resume();
    loader.Resume();
    std::vector<Delivered> rest = Take(loader, expected.size() - got.size(), 1);
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, expected) << "paused after " << at << " batches";
  }
}

TEST(LoaderPause, ReleaseWorkerThreadsOnceEveryLoaderIsPaused) {
  auto data = MakeDataset(4);
  Loader loader(ImageFolder::Open(data->dir.path().string()), SmallOptions(2));
  ASSERT_TRUE(loader.Next().has_value());
  loader.Pause();
  EXPECT_TRUE(ReleaseWorkerThreads());
  loader.Resume();  // a new pool
  EXPECT_TRUE(loader.Next().has_value());
}

// LoaderOptions::output: the workers' conversion of each batch equals the contract applied
// to the uint8 batch of the same loader.
TEST(LoaderOutput, ConvertedBatchIsTheContractOfTheUint8Batch) {
  auto data = MakeDataset(5);
  LoaderOptions o = SmallOptions(2);
  o.output.dtype = OutputDType::kFloat32;
  o.output.layout = Layout::kNchw;
  o.output.mean = kImageNetMean;
  o.output.std = kImageNetStd;
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  const int side = o.image_size.At(0).height;
  const std::size_t pixels = static_cast<std::size_t>(side) * side;
  std::size_t batches = 0;
  for (Batch& batch : loader) {
    ASSERT_EQ(batch.output().size(), batch.size() * pixels * 3 * sizeof(float));
    ASSERT_EQ(batch.layout(), Layout::kNhwc);  // images(): the workers decode NHWC
    std::vector<float> out(batch.output().size() / sizeof(float));
    std::memcpy(out.data(), batch.output().data(), batch.output().size());
    for (std::size_t n = 0; n < batch.size(); ++n) {
      for (std::size_t p = 0; p < pixels; ++p) {
        for (int c = 0; c < 3; ++c) {
          const float x = batch.images()[(n * pixels + p) * 3 + c];
          const float expected = (x / 255.0f - o.output.mean[c]) / o.output.std[c];
          ASSERT_EQ(out[(n * 3 + c) * pixels + p], expected);
        }
      }
    }
    ++batches;
  }
  EXPECT_EQ(batches, loader.batches_per_epoch());
}

}  // namespace
}  // namespace tilefeed::loader

namespace tilefeed::loader {
namespace {

TEST(SizeSchedule, OneTextReadAndWrittenBack) {
  EXPECT_EQ(SizeSchedule().text(), "224");
  EXPECT_EQ(SizeSchedule::Parse("0192x256").text(), "192x256");
  const SizeSchedule steps = SizeSchedule::Parse("160,8:224,10:192x256");
  EXPECT_EQ(steps.text(), "160,8:224,10:192x256");
  EXPECT_EQ(steps.At(7), (ImageSize{160, 160}));
  EXPECT_EQ(steps.At(8), (ImageSize{224, 224}));
  EXPECT_EQ(steps.At(1000), (ImageSize{192, 256}));
  EXPECT_EQ(steps.Largest(), (ImageSize{224, 224}));  // the most pixels, not the last
  EXPECT_FALSE(steps.fixed());
  // FFCV's get_resolution: 144 / 32 = 4.5 rounds half to even, to 128 (half up: 160).
  const SizeSchedule ramp = SizeSchedule::Parse("ramp:128,160,0,2");
  EXPECT_EQ(ramp.text(), "ramp:128,160,0,2,32");
  EXPECT_EQ(ramp.At(1), (ImageSize{128, 128}));
  EXPECT_EQ(SizeSchedule::Parse("ramp:160,192,0,8").At(4), (ImageSize{192, 192}));  // 5.5 -> 6
  const SizeSchedule ffcv = SizeSchedule::Parse("ramp:160,192,2,10,32");
  for (const auto& [epoch, side] : std::vector<std::pair<int, int>>{
           {0, 160}, {2, 160}, {5, 160}, {6, 192}, {9, 192}, {10, 192}, {99, 192}}) {
    EXPECT_EQ(ffcv.At(epoch).height, side) << "epoch " << epoch;
  }
  EXPECT_EQ(SizeSchedule::Parse(ffcv.text()), ffcv);
  auto refusal = [](const char* text) {
    try {
      (void)SizeSchedule::Parse(text);
      return std::string("accepted");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refusal("160,8:224,4:192"),
            "image_size '160,8:224,4:192': epochs must rise (4 after 8)");
  EXPECT_EQ(refusal(""), "image_size '': size '' is not a whole number");
  EXPECT_EQ(refusal("ramp:1,2,3"),
            "image_size 'ramp:1,2,3': a ramp is START,END,FIRST,LAST[,STEP]");
  EXPECT_EQ(refusal("16384x16385"),
            "image_size '16384x16385': size must be between 1 and 16384, got 16385");
}

TEST(LoaderOutput, EveryBatchHasItsEpochsSizeAcrossPrefetchedEpochEnds) {
  auto data = MakeDataset(4);  // 12 samples, batch 8: 2 batches per epoch
  LoaderOptions o = SmallOptions(2);
  o.image_size = SizeSchedule::Parse("16,1:24x20,2:32");
  o.prefetch_depth = 6;  // the workers run an epoch and more ahead of the consumer
  o.epochs = 3;
  o.output.dtype = OutputDType::kFloat32;
  Loader loader(ImageFolder::Open(data->dir.path().string()), o);
  EXPECT_EQ(loader.metrics().slot_bytes, 8 * (32 * 32 * 3 + 12u));  // the largest size
  SampleDecoder decoder(ImageFolder::Open(data->dir.path().string()), o);
  for (const ImageSize size : {ImageSize{16, 16}, ImageSize{24, 20}, ImageSize{32, 32}}) {
    std::size_t batches = 0;
    for (Batch& batch : loader) {
      EXPECT_EQ(batch.height(), size.height);
      EXPECT_EQ(batch.width(), size.width);
      EXPECT_EQ(batch.images().size(), batch.size() * size.bytes());
      EXPECT_EQ(batch.output().size(), batch.size() * size.bytes() * 4);
      const std::span<const std::uint8_t> row =
          decoder.Decode(batch.epoch(), batch.sample_indices()[0]);
      EXPECT_TRUE(std::ranges::equal(row, batch.images().first(size.bytes())));
      ++batches;
    }
    EXPECT_EQ(batches, 2u);
  }
}

TEST(LoaderOutput, RectangularImagesInEveryModeAndLayout) {
  auto data = MakeDataset(3);
  for (Mode mode : {Mode::kTrain, Mode::kEval}) {
    for (Layout layout : {Layout::kNhwc, Layout::kNchw}) {
      LoaderOptions o = SmallOptions(2);
      o.image_size = SizeSchedule::Parse("20x36");
      o.eval_resize = 40;
      o.mode = mode;
      o.output.layout = layout;
      Loader loader(ImageFolder::Open(data->dir.path().string()), o);
      std::size_t samples = 0;
      for (Batch& batch : loader) {
        EXPECT_EQ(batch.height(), 20);
        EXPECT_EQ(batch.width(), 36);
        EXPECT_EQ(batch.images().size(), batch.size() * 20 * 36 * 3);
        samples += batch.size();
      }
      EXPECT_EQ(samples, data->total);
    }
  }
  EXPECT_THROW(SizeSchedule::Parse("20x"), std::invalid_argument);  // without a width
}

}  // namespace
}  // namespace tilefeed::loader
