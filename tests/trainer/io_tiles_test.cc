#include "trainer/io_tiles.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace tilefeed::trainer {
namespace {

// A stream of `epochs` x `per_epoch` batches; batch k's pixels and labels all hold k, so the
// consumer can tell every batch apart. Batches go back through a counting owner.
class CountingStream final : public transport::BatchStream {
 public:
  CountingStream(int epochs, int per_epoch, std::size_t samples, std::size_t sample_bytes)
      : epochs_(epochs), per_epoch_(per_epoch), samples_(samples), sample_bytes_(sample_bytes) {}

  std::optional<transport::ReceivedBatch> Next() override {
    std::lock_guard lock(mutex_);
    // Jitter lets a later tile overtake an earlier one between Next() and landing.
    std::this_thread::sleep_for(std::chrono::microseconds(next_ % 3 * 200));
    ++position_;
    if (epoch_ >= epochs_) return std::nullopt;
    if (index_ == per_epoch_) {
      ++epoch_;
      index_ = 0;
      return std::nullopt;
    }
    const int k = next_++;
    auto owner = std::make_unique<Owner>(*this, samples_ * sample_bytes_, samples_, k);
    transport::BatchMeta meta;
    meta.epoch = static_cast<std::uint64_t>(epoch_);
    meta.index = static_cast<std::uint64_t>(index_++);
    meta.size = samples_;
    meta.height = 1;
    meta.width = static_cast<int>(sample_bytes_ / 3);
    auto images = std::span<const std::uint8_t>(owner->images);
    auto labels = std::span<const std::int32_t>(owner->labels);
    ++outstanding_;
    return transport::ReceivedBatch(meta, images, labels, {}, std::move(owner));
  }
  bool ended() const override { return epoch_ >= epochs_; }
  // Counts the calls of Next(): the IO tiles must pair each item with the position right
  // after the Next() that took it.
  loader::LoaderState position() const override { return {0, 0, position_, 0}; }
  std::size_t batches_per_epoch() const override { return static_cast<std::size_t>(per_epoch_); }
  int outstanding() const { return outstanding_.load(); }

 private:
  struct Owner final : transport::ReceivedBatch::Owner {
    Owner(CountingStream& s, std::size_t bytes, std::size_t n, int k)
        : stream(s), images(bytes, static_cast<std::uint8_t>(k)), labels(n, k) {}
    ~Owner() override { --stream.outstanding_; }
    CountingStream& stream;
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels;
  };

  std::mutex mutex_;
  int epochs_, per_epoch_;
  std::size_t samples_, sample_bytes_;
  int epoch_ = 0, index_ = 0, next_ = 0;
  std::uint64_t position_ = 0;  // Next() calls
  std::atomic<int> outstanding_{0};
};

class IoTilesTest : public ::testing::TestWithParam<int> {};

TEST_P(IoTilesTest, DeliversEveryBatchOnceInOrder) {
  constexpr int kEpochs = 3;
  constexpr int kPerEpoch = 7;
  CountingStream stream(kEpochs, kPerEpoch, 4, 6);
  IoTiles tiles(stream, IoTilesOptions{GetParam(), 3, 4, 6, {}});
  int expected = 0;
  std::vector<std::uint64_t> positions;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (int i = 0; i < kPerEpoch; ++i) {
      const StagedBatch& item = tiles.Acquire();
      ASSERT_FALSE(item.end_of_epoch) << "epoch " << epoch << " batch " << i;
      EXPECT_EQ(item.meta.epoch, static_cast<std::uint64_t>(epoch));
      EXPECT_EQ(item.meta.index, static_cast<std::uint64_t>(i));
      ASSERT_EQ(item.images.size(), 24u);
      for (std::uint8_t p : item.images) ASSERT_EQ(p, static_cast<std::uint8_t>(expected));
      for (std::int32_t l : item.labels) ASSERT_EQ(l, expected);
      positions.push_back(item.position.position);
      ++expected;
      tiles.Release();
    }
    const StagedBatch& end = tiles.Acquire();
    EXPECT_TRUE(end.end_of_epoch);
    EXPECT_EQ(end.end_of_stream, epoch == kEpochs - 1);
    positions.push_back(end.position.position);
    tiles.Release();
  }
  // position() is asked right after each Next(), under the same lock: positions are in order.
  for (std::size_t i = 0; i < positions.size(); ++i) EXPECT_EQ(positions[i], i + 1);
  // Landing copies the batch, so no loader slot stays taken by the core.
  EXPECT_EQ(stream.outstanding(), 0);
}

TEST_P(IoTilesTest, HoldsSeveralItemsAtOnce) {
  CountingStream stream(1, 9, 2, 3);
  IoTiles tiles(stream, IoTilesOptions{GetParam(), 3, 2, 3, {}});
  int expected = 0;
  for (int round = 0; round < 3; ++round) {
    // Three replicas' worth acquired together, released oldest first.
    std::vector<const StagedBatch*> items;
    items.reserve(3);
    for (int r = 0; r < 3; ++r) items.push_back(&tiles.Acquire());
    for (const StagedBatch* item : items) EXPECT_EQ(item->labels[0], expected++);
    for (int r = 0; r < 3; ++r) tiles.Release();
  }
  EXPECT_TRUE(tiles.Acquire().end_of_stream);
  tiles.Release();
}

TEST_P(IoTilesTest, StopsWhileTheConsumerIsBehind) {
  CountingStream stream(100, 100, 2, 3);
  {
    IoTiles tiles(stream, IoTilesOptions{GetParam(), 2, 2, 3, {}});
    EXPECT_EQ(tiles.Acquire().labels[0], 0);
    tiles.Release();
  }  // the tiles are blocked on full slots; the destructor must still return
  EXPECT_EQ(stream.outstanding(), 0);
}

TEST(IoTiles, ABatchLargerThanTheBufferIsAnError) {
  CountingStream stream(1, 2, 8, 3);
  IoTiles tiles(stream, IoTilesOptions{1, 2, 4, 3, {}});
  EXPECT_THROW(tiles.Acquire(), transport::TransportError);
}

INSTANTIATE_TEST_SUITE_P(Tiles, IoTilesTest, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace tilefeed::trainer
