#pragma once

// A FeedDevice without a GPU, for DeviceFeed's tests: its "DMA engine" thread runs each copy
// later, at its own pace, like a copy engine does, and it counts every break of the
// protocol's two rules:
//   * slot_reused: an Upload from host memory that a copy not yet done still reads (the
//     batch went back to its stream, was refilled and uploaded again);
//   * buffer_reused: an Upload into a device buffer the consumer has not released.
// A `lying` device says a copy is done before it ran, to check that the checks catch it.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tilefeed/cuda/feed.h"

namespace tilefeed::cuda::testing {

class FakeDevice final : public FeedDevice {
 public:
  // `lying`: CopyDone() says true at once, before the copy ran (a broken device).
  FakeDevice(std::size_t buffers, bool lying = false)
      : buffers_(buffers), lying_(lying), engine_([this] { Run(); }) {}
  ~FakeDevice() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    engine_.join();
  }

  void Upload(std::size_t buffer, const HostBatch& batch) override {
    std::lock_guard lock(mutex_);
    Buffer& b = buffers_.at(buffer);
    if (!b.released) ++violations_.buffer_reused;
    if (pending_sources_.count(batch.images.data()) != 0) ++violations_.slot_reused;
    b.released = false;
    b.copied = false;
    ++b.generation;
    pending_sources_.insert(batch.images.data());
    queue_.push_back(Copy{buffer, batch.images, batch.labels, b.generation});
    changed_.notify_all();
  }
  bool CopyDone(std::size_t buffer) override {
    std::lock_guard lock(mutex_);
    return lying_ || buffers_.at(buffer).copied;
  }
  void WaitCopy(std::size_t buffer) override {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return lying_ || buffers_.at(buffer).copied; });
  }
  // The consumer's "stream" waits for the copy when it reads (images(), labels()).
  void HandOver(std::size_t /*buffer*/, StreamHandle /*consumer*/) override {}
  void MarkReleased(std::size_t buffer, StreamHandle /*consumer*/) override {
    std::lock_guard lock(mutex_);
    if (fail_release_) throw std::runtime_error("fake: cannot record the release");
    buffers_.at(buffer).released = true;
  }

  // A buffer's landed bytes, once its copy ran (as a consumer stream waits for it).
  std::vector<std::uint8_t> images(std::size_t buffer) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return buffers_.at(buffer).copied; });
    return buffers_.at(buffer).images;
  }
  std::vector<std::int32_t> labels(std::size_t buffer) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return buffers_.at(buffer).copied; });
    return buffers_.at(buffer).labels;
  }
  struct Violations {
    int slot_reused = 0;
    int buffer_reused = 0;
  };
  Violations violations() {
    std::lock_guard lock(mutex_);
    return violations_;
  }
  void FailReleases() {
    std::lock_guard lock(mutex_);
    fail_release_ = true;
  }
  std::size_t pending() {
    std::lock_guard lock(mutex_);
    return pending_sources_.size();
  }

 private:
  struct Buffer {
    std::vector<std::uint8_t> images;
    std::vector<std::int32_t> labels;
    bool copied = true;
    bool released = true;
    std::uint64_t generation = 0;
  };
  struct Copy {
    std::size_t buffer;
    std::span<const std::uint8_t> images;
    std::span<const std::int32_t> labels;
    std::uint64_t generation;
  };

  // The copy engine: takes copies in order, reads the host memory some time later (up to
  // ~2 ms, while the loader's workers run), then marks the copy done.
  void Run() {
    std::mt19937 random(5);
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const Copy copy = queue_.front();
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
      std::vector<std::uint8_t> images(copy.images.begin(), copy.images.end());
      std::vector<std::int32_t> labels(copy.labels.begin(), copy.labels.end());
      lock.lock();
      queue_.pop_front();
      Buffer& b = buffers_.at(copy.buffer);
      b.images = std::move(images);
      b.labels = std::move(labels);
      b.copied = true;
      pending_sources_.erase(pending_sources_.find(copy.images.data()));
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Buffer> buffers_;
  std::deque<Copy> queue_;
  std::multiset<const std::uint8_t*> pending_sources_;
  Violations violations_;
  bool lying_;
  bool fail_release_ = false;
  bool stop_ = false;
  std::thread engine_;  // last: starts after the members it uses
};

}  // namespace tilefeed::cuda::testing
