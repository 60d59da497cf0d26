// DeviceFeed's slot/event protocol without a GPU: a fake device (fake_device.h) whose "DMA
// engine" thread runs each copy later, at its own pace, like a copy engine does, and checks
// the protocol's two rules on every call:
//   * no host batch goes back to its stream (and so is refilled and uploaded again) while
//     a copy out of it has not been marked done;
//   * no device buffer is written again before the consumer released it.
// Each landed buffer is also compared with the batch a reference loader gives, so a slot
// overwritten under a pending copy shows up as wrong bytes too. A broken device that says
// "done" before its copy ran must be caught: that checks the checks. Every run goes through
// two streams: a LoaderStream over a local loader, and PoolStream, a stream that is not a
// loader (it stands in for a remote reader's, whose batches are its own buffers);
// feed_stream_test.cc adds a real reader's ZeroMQ stream where transport is built.

#include "tilefeed/cuda/feed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <stdexcept>
#include <vector>

#include "tests/cuda/fake_device.h"
#include "tests/cuda/raw_source.h"
#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::cuda {
namespace {

using testing::FakeDevice;

constexpr int kSide = 16;

// A stream that is not a loader, standing in for a remote reader's: it receives each batch
// of `source` into one of `pool` buffers of its own (as a shared-memory ring's slots or
// ZeroMQ messages) and lends it as a ReceivedBatch, whose destruction gives the buffer back.
// It records how many buffers were lent whenever it is asked for the next batch, and fails
// as a dead reader does (TransportError) once `fail_after` batches were delivered.
class PoolStream final : public transport::BatchStream {
 public:
  PoolStream(loader::Loader& source, std::size_t pool,
             std::size_t fail_after = static_cast<std::size_t>(-1))
      : source_(source), buffers_(pool), lent_(pool, false), fail_after_(fail_after) {}

  std::optional<transport::ReceivedBatch> Next() override {
    const std::size_t lent = static_cast<std::size_t>(std::count(lent_.begin(), lent_.end(), true));
    most_lent_at_next_ = std::max(most_lent_at_next_, lent);
    if (delivered_ == fail_after_) throw transport::TransportError("pool: the reader went away");
    std::optional<loader::Batch> batch = source_.Next();
    if (!batch) return std::nullopt;
    const auto free = std::find(lent_.begin(), lent_.end(), false);
    if (free == lent_.end()) throw std::logic_error("pool: every buffer is lent to the feed");
    const std::size_t i = static_cast<std::size_t>(free - lent_.begin());
    Buffer& b = buffers_[i];
    b.images.assign(batch->images().begin(), batch->images().end());
    b.labels.assign(batch->labels().begin(), batch->labels().end());
    b.indices.assign(batch->sample_indices().begin(), batch->sample_indices().end());
    lent_[i] = true;
    ++delivered_;
    return transport::ReceivedBatch(transport::MetaOf(*batch), b.images, b.labels, b.indices,
                                    std::make_unique<Lent>(this, i));
  }
  bool ended() const override { return source_.ended(); }
  std::size_t batches_per_epoch() const override { return source_.batches_per_epoch(); }
  loader::LoaderState position() const override { return source_.state(); }

  std::size_t most_lent_at_next() const { return most_lent_at_next_; }
  bool all_back() const { return std::find(lent_.begin(), lent_.end(), true) == lent_.end(); }

 private:
  struct Buffer {
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels;
    std::vector<std::uint64_t> indices;
  };
  struct Lent final : transport::ReceivedBatch::Owner {
    Lent(PoolStream* stream, std::size_t buffer) : stream(stream), buffer(buffer) {}
    ~Lent() override { stream->lent_[buffer] = false; }
    PoolStream* stream;
    std::size_t buffer;
  };

  loader::Loader& source_;
  std::vector<Buffer> buffers_;
  std::vector<bool> lent_;
  std::size_t fail_after_;
  std::size_t delivered_ = 0;
  std::size_t most_lent_at_next_ = 0;
};

enum class Stream { kLoader, kPool };

// Runs `epochs` epochs through a DeviceFeed over `device`, reading each batch only after
// asking for the next ones (as a GPU computes on one batch while the next lands): up to
// buffers - 1 batches behind. Returns the batches whose landed bytes or labels differ from
// the reference loader's. The feed may hold prefetch_depth - 1 host batches (the rule
// feed.h gives for a LoaderStream); the pool stream has prefetch_depth buffers.
int LandAll(FakeDevice& device, std::size_t buffers, std::uint64_t epochs, Stream kind) {
  const loader::LoaderOptions options = testing::RawOptions(4, kSide, epochs);
  struct Expected {
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels;
  };
  // The reference batches first, from a loader that is gone before the feed's starts (two
  // loaders starting their oneTBB arenas at once trip a false TSan report inside libtbb).
  std::vector<std::vector<Expected>> expected(epochs);
  {
    loader::Loader reference(std::make_unique<testing::RawSource>(40, kSide), options);
    for (auto& epoch : expected) {
      while (std::optional<loader::Batch> b = reference.Next()) {
        epoch.push_back(
            {{b->images().begin(), b->images().end()}, {b->labels().begin(), b->labels().end()}});
      }
    }
  }
  loader::Loader loader(std::make_unique<testing::RawSource>(40, kSide), options);
  const std::size_t max_host = options.prefetch_depth - 1;
  std::unique_ptr<transport::BatchStream> stream;
  PoolStream* pool = nullptr;
  if (kind == Stream::kLoader) {
    stream = std::make_unique<transport::LoaderStream>(loader);
  } else {
    stream = std::make_unique<PoolStream>(loader, options.prefetch_depth);
    pool = static_cast<PoolStream*>(stream.get());
  }
  std::optional<DeviceFeed> feed(std::in_place, *stream, device, buffers, max_host);
  struct Held {
    DeviceBatch got;
    const Expected* want;
  };
  std::deque<Held> held;
  int wrong = 0;
  auto check_oldest = [&] {
    const Held& h = held.front();
    const bool same = device.images(h.got.buffer()) == h.want->images &&
                      device.labels(h.got.buffer()) == h.want->labels;
    wrong += same ? 0 : 1;
    held.pop_front();  // releases the buffer
  };
  for (const auto& epoch : expected) {
    for (const Expected& want : epoch) {
      std::optional<DeviceBatch> got = feed->Next(nullptr);
      if (!got) {
        ADD_FAILURE() << "the feed ended an epoch early";
        return wrong + 1;
      }
      EXPECT_LE(feed->copies_in_flight(), max_host) << "never all the host slots";
      held.push_back(Held{std::move(*got), &want});
      if (held.size() == buffers) check_oldest();
    }
    while (!held.empty()) check_oldest();
    EXPECT_FALSE(feed->Next(nullptr).has_value()) << "the end of the epoch";
  }
  feed.reset();
  if (pool != nullptr) {
    EXPECT_LT(pool->most_lent_at_next(), max_host) << "asked for more while holding the bound";
    EXPECT_TRUE(pool->all_back()) << "the feed's destructor gives every batch back";
  }
  return wrong;
}

TEST(DeviceFeed, NoSlotOrBufferIsReusedBeforeItsCopyOrRelease) {
  for (Stream kind : {Stream::kLoader, Stream::kPool}) {
    for (std::size_t buffers : {1, 2, 3}) {
      const char* name = kind == Stream::kLoader ? "LoaderStream, " : "PoolStream, ";
      FakeDevice device(buffers);
      EXPECT_EQ(LandAll(device, buffers, 3, kind), 0) << name << buffers << " buffers";
      EXPECT_EQ(device.violations().slot_reused, 0) << name << buffers << " buffers";
      EXPECT_EQ(device.violations().buffer_reused, 0) << name << buffers << " buffers";
      EXPECT_EQ(device.pending(), 0u) << "the feed's destructor waits for its copies";
    }
  }
}

TEST(DeviceFeed, ABrokenDeviceThatReportsCopiesEarlyIsCaught) {
#ifdef __SANITIZE_THREAD__
  GTEST_SKIP() << "races on purpose (a copy reads a slot the workers refill): not under TSan";
#endif
  // The same run over a device whose CopyDone() lies: the feed then returns slots under
  // pending copies, and the fake must see it (else the test above proves nothing).
  for (Stream kind : {Stream::kLoader, Stream::kPool}) {
    FakeDevice device(2, /*lying=*/true);
    const int wrong = LandAll(device, 2, 8, kind);
    EXPECT_GT(device.violations().slot_reused + wrong, 0);
  }
}

TEST(DeviceFeed, KeepingEveryBufferIsAClearError) {
  FakeDevice device(2);
  loader::Loader loader(std::make_unique<testing::RawSource>(40, kSide),
                        testing::RawOptions(4, kSide, 1));
  transport::LoaderStream stream(loader);
  DeviceFeed feed(stream, device, 2, 2);
  std::optional<DeviceBatch> first = feed.Next(nullptr);
  std::optional<DeviceBatch> second = feed.Next(nullptr);
  ASSERT_TRUE(first && second);
  EXPECT_THROW(feed.Next(nullptr), std::logic_error);
  first->Release();
  std::optional<DeviceBatch> third = feed.Next(nullptr);
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->buffer(), first->buffer());
}

TEST(DeviceFeed, AFailedReleaseIsThrownByTheNextNext) {
  FakeDevice device(2);
  loader::Loader loader(std::make_unique<testing::RawSource>(40, kSide),
                        testing::RawOptions(4, kSide, 1));
  transport::LoaderStream stream(loader);
  DeviceFeed feed(stream, device, 2, 2);
  std::optional<DeviceBatch> first = feed.Next(nullptr);
  ASSERT_TRUE(first.has_value());
  device.FailReleases();
  first->Release();  // cannot throw: the error waits for Next()
  EXPECT_THROW(
      {
        try {
          feed.Next(nullptr);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "fake: cannot record the release");
          throw;
        }
      },
      std::runtime_error);
}

TEST(DeviceFeed, AStreamErrorReachesTheConsumerAndTheCopiesStillFinish) {
  FakeDevice device(2);
  loader::Loader loader(std::make_unique<testing::RawSource>(40, kSide),
                        testing::RawOptions(4, kSide, 1));
  PoolStream stream(loader, 3, /*fail_after=*/2);
  {
    DeviceFeed feed(stream, device, 2, 2);
    ASSERT_TRUE(feed.Next(nullptr).has_value());
    ASSERT_TRUE(feed.Next(nullptr).has_value());
    EXPECT_THROW(feed.Next(nullptr), transport::TransportError);
  }
  EXPECT_EQ(device.pending(), 0u) << "the feed's destructor waits for its copies";
  EXPECT_TRUE(stream.all_back());
}

TEST(DeviceFeed, OneHostBatchAtATimeStillFeeds) {
  // prefetch_depth 2, max_host_batches 1: each batch goes back before the next is asked for.
  FakeDevice device(2);
  loader::LoaderOptions options = testing::RawOptions(4, kSide, 1);
  options.prefetch_depth = 2;
  loader::Loader loader(std::make_unique<testing::RawSource>(40, kSide), options);
  PoolStream stream(loader, 2);
  DeviceFeed feed(stream, device, 2, 1);
  std::size_t batches = 0;
  while (std::optional<DeviceBatch> b = feed.Next(nullptr)) {
    EXPECT_EQ(feed.copies_in_flight(), 1u);
    ++batches;
  }
  EXPECT_EQ(batches, 10u);
  EXPECT_EQ(stream.most_lent_at_next(), 0u);
}

TEST(DeviceFeed, RejectsZeroBuffersOrZeroHostBatches) {
  FakeDevice device(1);
  loader::Loader loader(std::make_unique<testing::RawSource>(8, kSide),
                        testing::RawOptions(4, kSide, 1));
  transport::LoaderStream stream(loader);
  EXPECT_THROW(DeviceFeed(stream, device, 0, 1), std::invalid_argument);
  EXPECT_THROW(DeviceFeed(stream, device, 1, 0), std::invalid_argument);
}

TEST(DeviceFeed, RejectsNchwBatches) {
  FakeDevice device(1);
  loader::LoaderOptions nchw = testing::RawOptions(4, kSide, 1);
  nchw.output.layout = loader::Layout::kNchw;
  loader::Loader planar(std::make_unique<testing::RawSource>(8, kSide), nchw);
  transport::LoaderStream stream(planar);
  DeviceFeed feed(stream, device, 1, 1);
  EXPECT_THROW(feed.Next(nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace tilefeed::cuda
