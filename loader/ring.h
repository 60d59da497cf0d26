#pragma once

// SpscRing<T>: a bounded single-producer/single-consumer FIFO of move-only values. The
// loader uses two: a "ready" ring (publisher -> consumer hands finished batch-slot indices
// out in order) and a "free" ring (consumer -> producer returns released slots).
//
// Ownership: the ring owns the elements between a successful push and the pop that moves
// them out; elements still inside when the ring is destroyed are destroyed with it.
//
// Thread safety: exactly one producer thread calls TryPush/PushFor and exactly one consumer
// thread calls TryPop/PopFor at any one time (the roles may move between threads if the
// hand-over itself synchronises). size(), capacity() and empty() may be called from any
// thread; size() and empty() are snapshots. Construction and destruction are not
// concurrent with anything.
//
// Design note (the protocol; after rigtorp/SPSCQueue):
// - slots_ has capacity + 1 entries: one spare slot tells full (write + 1 == read) from
//   empty (write == read) without a separate count, and keeps the capacity exactly what was
//   asked for (no rounding to a power of two). Indices wrap with a compare, not a modulo.
// - write_index_ is stored only by the producer, read_index_ only by the consumer; each lives on
//   its own cache line, and each side keeps a plain cached copy of the other's index on a line of
//   its own, refreshed only when the cached value says full/empty. The element is written before
//   its index is published (a release store; seq_cst, for the reason below) and read after the
//   index is observed (acquire), so the element itself needs no atomics.
// - Blocking: the fast path never takes a lock. A waiter that finds the ring empty (or full) locks
//   its Waiters' mutex, increments `sleepers`, re-checks the index and only then waits on the
//   condition variable. The other side, after every index store, loads `sleepers` and, if non-zero,
//   takes and releases the same mutex, then notifies. This is the store-buffer pattern (store index
//   / load sleepers vs store sleepers / load index), so all four accesses are seq_cst: in their
//   single total order either the notifier sees sleepers > 0, or the waiter's re-check sees the new
//   index. A notifier that sees sleepers > 0 takes the mutex, which the waiter holds from its
//   increment until it is inside wait(), so the notify cannot fall between the waiter's re-check
//   and its sleep. No wakeup is lost, nobody spins.
// - condition_variable_any::wait_until(lock, stop_token, deadline, pred) also wakes on a
//   stop request, so a stopped token releases a blocked waiter promptly.

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace tilefeed::loader {

// The one place the cache-line size is named; fixed rather than
// std::hardware_destructive_interference_size so the layout does not change with -mtune.
inline constexpr std::size_t kCacheLineSize = 64;

template <typename T>
class SpscRing {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "SpscRing<T>: T must be nothrow-move-constructible (pushes are noexcept)");
  static_assert(std::is_nothrow_destructible_v<T>, "SpscRing<T>: T must be nothrow-destructible");

 public:
  // Makes an empty ring that holds up to `capacity` elements.
  // REQUIRES: capacity >= 1.
  explicit SpscRing(std::size_t capacity)
      : slot_count_(capacity + 1), slots_(Allocator().allocate(slot_count_ + 2 * kPadding)) {
    assert(capacity >= 1 && "SpscRing capacity must be at least 1");
    static_assert(alignof(SpscRing) == kCacheLineSize);
    static_assert(sizeof(SpscRing) >= 6 * kCacheLineSize);
    static_assert(std::atomic<std::size_t>::is_always_lock_free);
    assert(reinterpret_cast<const char*>(&read_index_) -
               reinterpret_cast<const char*>(&write_index_) >=
           static_cast<std::ptrdiff_t>(kCacheLineSize));
  }

  // Destroys the elements still in the ring.
  // REQUIRES: no thread is using the ring.
  ~SpscRing() {
    std::size_t read = read_index_.load(std::memory_order_relaxed);
    const std::size_t write = write_index_.load(std::memory_order_relaxed);
    while (read != write) {
      Slot(read)->~T();
      read = Next(read);
    }
    Allocator().deallocate(slots_, slot_count_ + 2 * kPadding);
  }

  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Producer: moves `value` in and returns true, or returns false (value untouched) if full.
  // REQUIRES: called only by the producer.
  [[nodiscard]] bool TryPush(T&& value) noexcept {
    const std::size_t write = write_index_.load(std::memory_order_relaxed);
    const std::size_t next = Next(write);
    if (next == read_index_cache_) {
      read_index_cache_ = read_index_.load(std::memory_order_acquire);
      if (next == read_index_cache_) return false;
    }
    ::new (static_cast<void*>(Slot(write))) T(std::move(value));
    // seq_cst, not just release: this store and the sleepers load below are one half of the
    // store-buffer handshake described at the top of the file.
    write_index_.store(next, std::memory_order_seq_cst);
    WakeIfSleeping(not_empty_);
    return true;
  }

  // Consumer: moves the oldest element out, or returns nullopt if the ring is empty.
  // REQUIRES: called only by the consumer.
  [[nodiscard]] std::optional<T> TryPop() noexcept {
    const std::size_t read = read_index_.load(std::memory_order_relaxed);
    if (read == write_index_cache_) {
      write_index_cache_ = write_index_.load(std::memory_order_acquire);
      if (read == write_index_cache_) return std::nullopt;
    }
    T* slot = Slot(read);
    std::optional<T> value(std::move(*slot));
    slot->~T();
    read_index_.store(Next(read), std::memory_order_seq_cst);  // handshake, as in TryPush
    WakeIfSleeping(not_full_);
    return value;
  }

  // Producer: like TryPush, but waits while the ring is full. Returns false (value untouched)
  // if `timeout` passes or `stop` is stopped first; a ring with room succeeds even when `stop`
  // is already stopped. Timeouts beyond a year are treated as a year.
  // REQUIRES: called only by the producer.
  [[nodiscard]] bool PushFor(T&& value, std::chrono::milliseconds timeout, std::stop_token stop) {
    if (TryPush(std::move(value))) return true;
    const bool has_room = Wait(not_full_, timeout, stop, [this] {
      return Next(write_index_.load(std::memory_order_relaxed)) !=
             read_index_.load(std::memory_order_seq_cst);
    });
    // Only the consumer frees room, and only the producer takes it, so room seen stays room.
    // TryPush moves from `value` only when it succeeds, so a failed push left it whole.
    return has_room && TryPush(std::move(value));  // NOLINT(bugprone-use-after-move)
  }

  // Consumer: like TryPop, but waits while the ring is empty. Returns nullopt if `timeout`
  // passes or `stop` is stopped first; a non-empty ring yields an element even when `stop` is
  // already stopped. Timeouts beyond a year are treated as a year.
  // REQUIRES: called only by the consumer.
  [[nodiscard]] std::optional<T> PopFor(std::chrono::milliseconds timeout, std::stop_token stop) {
    if (std::optional<T> value = TryPop()) return value;
    const bool has_data = Wait(not_empty_, timeout, stop, [this] {
      return read_index_.load(std::memory_order_relaxed) !=
             write_index_.load(std::memory_order_seq_cst);
    });
    if (!has_data) return std::nullopt;
    return TryPop();
  }

  // Number of elements in the ring; a snapshot when the other side is active.
  std::size_t size() const noexcept {
    const std::size_t write = write_index_.load(std::memory_order_acquire);
    const std::size_t read = read_index_.load(std::memory_order_acquire);
    return write >= read ? write - read : write + slot_count_ - read;
  }

  // The most elements the ring holds, as given to the constructor.
  std::size_t capacity() const noexcept { return slot_count_ - 1; }

  // Whether the ring is empty; a snapshot when the other side is active.
  bool empty() const noexcept {
    return write_index_.load(std::memory_order_acquire) ==
           read_index_.load(std::memory_order_acquire);
  }

 private:
  using Allocator = std::allocator<T>;

  // Spare slots before and after the live ones, so that neighbouring heap objects do not
  // share a cache line with the first or last slot.
  static constexpr std::size_t kPadding = (kCacheLineSize - 1) / sizeof(T) + 1;

  // One side's sleep state. `sleepers` is read by the other side after each index store.
  struct alignas(kCacheLineSize) Waiters {
    std::atomic<int> sleepers{0};
    std::mutex mutex;
    std::condition_variable_any cv;
  };

  std::size_t Next(std::size_t index) const noexcept {
    return index + 1 == slot_count_ ? 0 : index + 1;
  }
  T* Slot(std::size_t index) const noexcept { return slots_ + kPadding + index; }

  // Called after an index store; see the design note for why the load is seq_cst.
  static void WakeIfSleeping(Waiters& waiters) noexcept {
    if (waiters.sleepers.load(std::memory_order_seq_cst) == 0) return;
    // The waiter holds the mutex from its increment until wait() has released it, so once
    // we have had the mutex the waiter is asleep (or gone) and the notify cannot be missed.
    // Notifying after unlocking spares the woken waiter from blocking on the mutex again.
    // A lock failure (std::system_error) is a broken invariant; noexcept makes it terminate.
    { std::lock_guard<std::mutex> lock(waiters.mutex); }
    waiters.cv.notify_one();
  }

  // Sleeps on `waiters` until `ready()`, the deadline, or a stop request; returns ready().
  template <typename Ready>
  static bool Wait(Waiters& waiters, std::chrono::milliseconds timeout, std::stop_token& stop,
                   Ready ready) {
    using Clock = std::chrono::steady_clock;
    constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24 * 365);
    const auto deadline =
        Clock::now() + std::clamp(timeout, std::chrono::milliseconds::zero(), kMaxTimeout);
    std::unique_lock<std::mutex> lock(waiters.mutex);
    waiters.sleepers.fetch_add(1, std::memory_order_seq_cst);
    // wait_until evaluates ready() before sleeping: that is the re-check of the protocol.
    const bool is_ready = waiters.cv.wait_until(lock, stop, deadline, ready);
    waiters.sleepers.fetch_sub(1, std::memory_order_relaxed);
    return is_ready;
  }

  const std::size_t slot_count_;  // capacity + 1: the spare slot tells full from empty
  T* const slots_;

  // Producer-written; read by the consumer.
  alignas(kCacheLineSize) std::atomic<std::size_t> write_index_{0};
  // Producer-only copy of read_index_.
  alignas(kCacheLineSize) std::size_t read_index_cache_ = 0;
  // Consumer-written; read by the producer.
  alignas(kCacheLineSize) std::atomic<std::size_t> read_index_{0};
  // Consumer-only copy of write_index_.
  alignas(kCacheLineSize) std::size_t write_index_cache_ = 0;

  Waiters not_empty_;  // the consumer sleeps here while the ring is empty
  Waiters not_full_;   // the producer sleeps here while the ring is full
};

}  // namespace tilefeed::loader
