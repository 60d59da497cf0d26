#include "loader/ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace tilefeed::loader {
namespace {

using std::chrono::milliseconds;

// Bounds every blocking call in these tests: long enough never to fire on a loaded 2-core
// machine under TSan, short enough that a lost wakeup fails the test instead of hanging it.
constexpr milliseconds kGenerous{30'000};

// Counts, per id, how many live (not moved-from) instances were destroyed.
struct Ledger {
  explicit Ledger(std::size_t ids) : destroyed(ids) {}
  std::vector<std::atomic<int>> destroyed;
  std::atomic<std::int64_t> constructions{0};
  std::atomic<std::int64_t> destructions{0};
};

// A move-only element that reports its constructions and destructions to a Ledger.
class Counted {
 public:
  Counted(Ledger* ledger, int id) : ledger_(ledger), id_(id) { ++ledger_->constructions; }
  Counted(Counted&& other) noexcept : ledger_(other.ledger_), id_(std::exchange(other.id_, -1)) {
    ++ledger_->constructions;
  }
  Counted& operator=(Counted&&) = delete;
  ~Counted() {
    ++ledger_->destructions;
    if (id_ >= 0) ++ledger_->destroyed[static_cast<std::size_t>(id_)];
  }
  int id() const { return id_; }

 private:
  Ledger* ledger_;
  int id_;
};

static_assert(!std::is_copy_constructible_v<SpscRing<int>>);
static_assert(!std::is_copy_assignable_v<SpscRing<int>>);
static_assert(!std::is_move_constructible_v<SpscRing<int>>);
static_assert(!std::is_default_constructible_v<SpscRing<int>>);
static_assert(!std::is_convertible_v<std::size_t, SpscRing<int>>, "constructor is explicit");
static_assert(alignof(SpscRing<int>) == kCacheLineSize);
static_assert(alignof(SpscRing<Counted>) == kCacheLineSize);
static_assert(std::is_nothrow_invocable_v<decltype(&SpscRing<Counted>::TryPush), SpscRing<Counted>&,
                                          Counted&&>);
static_assert(
    std::is_nothrow_invocable_v<decltype(&SpscRing<Counted>::TryPop), SpscRing<Counted>&>);

TEST(SpscRing, StartsEmptyWithRequestedCapacity) {
  for (std::size_t capacity : {1u, 2u, 3u, 64u, 1000u}) {
    SpscRing<int> ring(capacity);
    EXPECT_EQ(ring.capacity(), capacity);
    EXPECT_EQ(ring.size(), 0u);
    EXPECT_TRUE(ring.empty());
  }
}

TEST(SpscRing, TryPushFailsWhenFullAndTryPopWhenEmpty) {
  SpscRing<std::unique_ptr<int>> ring(3);
  EXPECT_FALSE(ring.TryPop().has_value());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ring.TryPush(std::make_unique<int>(i)));
    EXPECT_EQ(ring.size(), static_cast<std::size_t>(i + 1));
  }
  auto extra = std::make_unique<int>(99);
  EXPECT_FALSE(ring.TryPush(std::move(extra)));
  // A refused push leaves the value with the caller: the uses after the move are the test.
  // NOLINTBEGIN(bugprone-use-after-move)
  ASSERT_NE(extra, nullptr) << "a failed push must leave the value with the caller";
  EXPECT_EQ(*extra, 99);
  // NOLINTEND(bugprone-use-after-move)
  EXPECT_EQ(ring.size(), 3u);

  // Wrap around the slot array several times, keeping the ring full.
  for (int i = 3; i < 20; ++i) {
    std::optional<std::unique_ptr<int>> front = ring.TryPop();
    ASSERT_TRUE(front.has_value());
    EXPECT_EQ(**front, i - 3);
    ASSERT_TRUE(ring.TryPush(std::make_unique<int>(i)));
    EXPECT_EQ(ring.size(), 3u);
  }
  for (int i = 17; i < 20; ++i) EXPECT_EQ(**ring.TryPop(), i);
  EXPECT_TRUE(ring.empty());
  EXPECT_FALSE(ring.TryPop().has_value());
}

TEST(SpscRing, EveryElementDestroyedExactlyOnceIncludingLeftovers) {
  constexpr int kCount = 50;
  Ledger ledger(kCount);
  {
    SpscRing<Counted> ring(8);
    int pushed = 0;
    int popped = 0;
    // Interleave so that the indices wrap, then leave 5 elements inside at destruction.
    while (pushed < kCount) {
      // A refused push would destroy the temporary, so push only while there is room.
      while (pushed < kCount && ring.size() < ring.capacity()) {
        ASSERT_TRUE(ring.TryPush(Counted(&ledger, pushed++)));
      }
      if (pushed == kCount) break;
      for (int i = 0; i < 3; ++i) {
        std::optional<Counted> value = ring.TryPop();
        ASSERT_TRUE(value.has_value());
        EXPECT_EQ(value->id(), popped++);
      }
    }
    while (ring.size() > 5) {
      std::optional<Counted> value = ring.TryPop();
      ASSERT_TRUE(value.has_value());
      EXPECT_EQ(value->id(), popped++);
    }
    EXPECT_EQ(ring.size(), 5u);
  }
  for (int id = 0; id < kCount; ++id) {
    EXPECT_EQ(ledger.destroyed[static_cast<std::size_t>(id)].load(), 1) << "id " << id;
  }
  EXPECT_EQ(ledger.constructions.load(), ledger.destructions.load());
}

TEST(SpscRing, FailedPushDoesNotConsumeOrDestroy) {
  Ledger ledger(2);
  {
    SpscRing<Counted> ring(1);
    ASSERT_TRUE(ring.TryPush(Counted(&ledger, 0)));
    Counted second(&ledger, 1);
    EXPECT_FALSE(ring.TryPush(std::move(second)));
    // A refused push leaves the value with the caller: the uses after the moves are the test.
    EXPECT_EQ(second.id(), 1);  // NOLINT(bugprone-use-after-move)
    std::stop_source never;
    EXPECT_FALSE(ring.PushFor(std::move(second), milliseconds(1), never.get_token()));
    EXPECT_EQ(second.id(), 1);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(ledger.destroyed[1].load(), 0);
  }
  EXPECT_EQ(ledger.destroyed[0].load(), 1);
  EXPECT_EQ(ledger.destroyed[1].load(), 1);
  EXPECT_EQ(ledger.constructions.load(), ledger.destructions.load());
}

// A tiny ring makes nearly every transfer a sleep and a wakeup: about 10 us each on a busy
// 2-core machine, and several times that under ThreadSanitizer, which needs fewer items to
// see the same interleavings.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kTransferItems = 200'000;
#else
constexpr int kTransferItems = 1'000'000;
#endif

// Moves kTransferItems values through the ring with both sides blocking, and checks FIFO
// order and that every element is destroyed exactly once.
void TransferInOrder(std::size_t capacity) {
  constexpr int kItems = kTransferItems;
  Ledger ledger(kItems);
  {
    SpscRing<Counted> ring(capacity);
    std::stop_source stop;
    std::atomic<int> push_failures{0};
    std::jthread producer([&] {
      for (int i = 0; i < kItems; ++i) {
        if (!ring.PushFor(Counted(&ledger, i), kGenerous, stop.get_token())) {
          ++push_failures;
          return;
        }
      }
    });
    int expected = 0;
    for (; expected < kItems; ++expected) {
      std::optional<Counted> value = ring.PopFor(kGenerous, stop.get_token());
      ASSERT_TRUE(value.has_value()) << "PopFor timed out at item " << expected;
      ASSERT_EQ(value->id(), expected);
    }
    producer.join();
    EXPECT_EQ(push_failures.load(), 0);
    EXPECT_TRUE(ring.empty());
  }
  std::size_t not_once = 0;
  for (auto& count : ledger.destroyed) not_once += count.load() != 1;
  EXPECT_EQ(not_once, 0u);
  EXPECT_EQ(ledger.constructions.load(), ledger.destructions.load());
}

TEST(SpscRing, FifoAcrossThreadsCapacity1) { TransferInOrder(1); }
TEST(SpscRing, FifoAcrossThreadsCapacity3) { TransferInOrder(3); }

TEST(SpscRing, PopForTimesOutOnEmpty) {
  SpscRing<int> ring(4);
  std::stop_source never;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(ring.PopFor(milliseconds(50), never.get_token()).has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_FALSE(ring.PopFor(milliseconds(0), never.get_token()).has_value());
  EXPECT_FALSE(ring.PopFor(milliseconds(-5), never.get_token()).has_value());
}

TEST(SpscRing, PushForTimesOutOnFull) {
  SpscRing<int> ring(1);
  std::stop_source never;
  ASSERT_TRUE(ring.TryPush(1));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(ring.PushFor(2, milliseconds(50), never.get_token()));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_EQ(ring.TryPop(), 1);
}

TEST(SpscRing, AvailableWorkWinsOverStoppedToken) {
  SpscRing<int> ring(1);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_TRUE(ring.PushFor(7, kGenerous, stop.get_token()));
  EXPECT_FALSE(ring.PushFor(8, kGenerous, stop.get_token()));  // full and stopped: at once
  EXPECT_EQ(ring.PopFor(kGenerous, stop.get_token()), 7);
  EXPECT_FALSE(ring.PopFor(kGenerous, stop.get_token()).has_value());  // empty and stopped
}

TEST(SpscRing, StopWakesBlockedPopFor) {
  SpscRing<int> ring(2);
  std::stop_source stop;
  std::promise<void> about_to_wait;
  auto result = std::async(std::launch::async, [&] {
    about_to_wait.set_value();
    // The long timeout means only the stop request can end this wait within the test.
    const auto start = std::chrono::steady_clock::now();
    std::optional<int> value = ring.PopFor(std::chrono::hours(1), stop.get_token());
    return std::make_pair(value, std::chrono::steady_clock::now() - start);
  });
  about_to_wait.get_future().wait();
  stop.request_stop();
  ASSERT_EQ(result.wait_for(kGenerous), std::future_status::ready) << "stop did not wake PopFor";
  const auto [value, waited] = result.get();
  EXPECT_FALSE(value.has_value());
  EXPECT_LT(waited, kGenerous);
}

TEST(SpscRing, StopWakesBlockedPushFor) {
  SpscRing<std::unique_ptr<int>> ring(1);
  ASSERT_TRUE(ring.TryPush(std::make_unique<int>(1)));
  std::stop_source stop;
  std::promise<void> about_to_wait;
  auto result = std::async(std::launch::async, [&] {
    auto value = std::make_unique<int>(2);
    about_to_wait.set_value();
    const bool pushed = ring.PushFor(std::move(value), std::chrono::hours(1), stop.get_token());
    // A refused push leaves the value with the caller.
    // NOLINTNEXTLINE(bugprone-use-after-move)
    return std::make_pair(pushed, value != nullptr && *value == 2);
  });
  about_to_wait.get_future().wait();
  stop.request_stop();
  ASSERT_EQ(result.wait_for(kGenerous), std::future_status::ready) << "stop did not wake PushFor";
  const auto [pushed, value_kept] = result.get();
  EXPECT_FALSE(pushed);
  EXPECT_TRUE(value_kept);
  EXPECT_EQ(ring.size(), 1u);
}

TEST(SpscRing, PushWakesBlockedPopFor) {
  SpscRing<int> ring(1);
  std::stop_source never;
  std::promise<void> about_to_wait;
  auto result = std::async(std::launch::async, [&] {
    about_to_wait.set_value();
    return ring.PopFor(kGenerous, never.get_token());
  });
  about_to_wait.get_future().wait();
  ASSERT_TRUE(ring.TryPush(42));
  ASSERT_EQ(result.wait_for(kGenerous * 2), std::future_status::ready);
  EXPECT_EQ(result.get(), 42);
}

TEST(SpscRing, PopWakesBlockedPushFor) {
  SpscRing<int> ring(1);
  ASSERT_TRUE(ring.TryPush(1));
  std::stop_source never;
  std::promise<void> about_to_wait;
  auto result = std::async(std::launch::async, [&] {
    about_to_wait.set_value();
    return ring.PushFor(2, kGenerous, never.get_token());
  });
  about_to_wait.get_future().wait();
  EXPECT_EQ(ring.TryPop(), 1);
  ASSERT_EQ(result.wait_for(kGenerous * 2), std::future_status::ready);
  EXPECT_TRUE(result.get());
  EXPECT_EQ(ring.TryPop(), 2);
}

}  // namespace
}  // namespace tilefeed::loader
