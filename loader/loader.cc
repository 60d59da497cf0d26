// The loader's pipeline.
//
// Design. One producer thread runs a oneTBB parallel_pipeline inside an arena of
// `workers` threads. Its three filters:
//   1. plan (serial, in order): walks the epochs, takes a free slot for each new batch
//      (blocking on the free ring: this is the back-pressure) and cuts the batch into
//      chunks of a few samples; emits an end-of-epoch marker after each epoch.
//   2. decode (parallel): reads and decodes each sample of a chunk straight into its row
//      of the slot, with the worker's own decoder and buffers.
//   3. publish (serial, in order): sees chunks in plan order, so when the last chunk of
//      a batch passes, every earlier batch has been published; pushes the slot (or the
//      marker) to the ready ring.
// The consumer pops the ready ring in Next() and returns slots to the free ring when a
// Batch is dropped. Both rings are SPSC: the ready ring's producer is the publish filter
// (serialized by TBB) and, once the pipeline has returned, the producer thread; its
// consumer is Next() (serialized by next_mutex_). The free ring's producer is Release()
// (serialized by release_mutex_, since Batches may be dropped on any thread) and its
// consumer the plan filter.
//
// Live tokens bound the chunks in flight; slots bound the batches. Stop requests reach
// every blocking wait through the stop_token, and the decode filter skips its work once
// stop is requested, so Stop() returns within one sample decode per worker.
//
// Auto workers/depth (loader/tuner.h): Next() closes the tuner's windows and sets target
// threads and depth; the plan stage stops at a batch boundary for a new thread count (Run()
// then reruns the pipeline in an arena of that size from where the plan stands) and makes a
// new slot when none is free and the target depth allows. Slots are only ever added.
//
// Seek() restarts the pipeline rather than steering a running one: it stops and joins the
// producer (so both rings' other sides are quiet), empties both rings, and refills the free
// ring with every slot the consumer does not hold. Which slots the consumer holds is
// Slot::held, written under release_mutex by Next() and ReturnSlot(), so a Batch dropped
// on another thread during a Seek goes back exactly once. lifecycle_mutex orders Seek()'s
// replacement of the stop source and producer thread against Stop().
//
// This file holds construction, the consumer side (Next, Release), Seek, Pause and Resume,
// the loader's state and metrics, and Batch. The options' checks are in loader_validate.cc,
// the decode stage in loader_decode.cc, the pipeline in loader_pipeline.cc; the types they
// share in loader/loader_impl.h.

#include <tbb/global_control.h>

#include <algorithm>
#include <new>
#include <stdexcept>

#include "loader/loader_impl.h"

namespace tilefeed::loader {

using detail::Clock;
using detail::kPollInterval;
using detail::Nanos;
using detail::Ready;
using detail::Slot;

Loader::Loader(std::unique_ptr<Source> source, LoaderOptions options,
               std::optional<LoaderState> start)
    : impl_(std::make_unique<Impl>(std::move(source), std::move(options))) {
  Impl& s = *impl_;
  s.Validate(start);
  s.slots.resize(s.max_depth);
  for (std::size_t i = 0; i < s.depth; ++i) {
    [[maybe_unused]] const bool pushed = s.free_ring.TryPush(s.AddSlot());
    assert(pushed);
  }
  s.limits = {.max_threads = s.max_workers,
              .cpu = s.options.cpu_share * s.cores,
              .max_depth = s.max_depth,
              .threads = s.options.workers == kAutoWorkers,
              .depth = s.options.prefetch_depth == kAutoDepth};
  s.tuner.setting = {s.workers, s.depth};
  s.target_threads.store(s.workers);
  s.threads.store(s.workers);
  s.target_depth.store(s.depth);
  if (s.limits.threads || s.limits.depth) s.reason.store(detail::TuneReason::kStart);
  s.StartProducer();
}

Loader::~Loader() { Stop(); }

// Makes slot slot_count and returns its index. The constructor makes the first `depth`; under
// auto depth the plan stage makes the others, each before its index reaches any ring.
std::size_t Loader::Impl::AddSlot() {
  const std::size_t i = slot_count.load(std::memory_order_relaxed);
  const std::size_t batch_size = options.batch_size;
  auto slot = std::make_unique<Slot>();
  if (options.slot_memory) {
    const SlotMemory::Spans spans = options.slot_memory->Slot(i, depth, batch_size, image_bytes);
    if (spans.images.size() < image_bytes * batch_size || spans.labels.size() < batch_size ||
        spans.indices.size() < batch_size) {
      throw std::invalid_argument("LoaderOptions: slot_memory gave slot " + std::to_string(i) +
                                  " less memory than a batch of " + std::to_string(batch_size) +
                                  " needs");
    }
    slot->images = spans.images.first(image_bytes * batch_size);
    slot->labels = spans.labels.first(batch_size);
    slot->indices = spans.indices.first(batch_size);
  } else {
    slot->owned_images.resize(image_bytes * batch_size);
    slot->owned_labels.resize(batch_size);
    slot->owned_indices.resize(batch_size);
    slot->images = slot->owned_images;
    slot->labels = slot->owned_labels;
    slot->indices = slot->owned_indices;
  }
  if (converter) {
    const ImageSize largest = options.image_size.Largest();
    slot->output.resize(converter->ImageBytes(largest.height, largest.width) * batch_size);
  }
  slots[i] = std::move(slot);
  slot_count.store(i + 1, std::memory_order_release);
  return i;
}

// After each batch handed out: the tests' schedule, or at the end of a window the policy's
// next setting, for the producer to follow.
void Loader::Impl::Tick() {
  detail::TunerSetting next = tuner.setting;
  if (forced) {
    next = forced(batches.load(std::memory_order_relaxed));
    next.depth = std::clamp<std::size_t>(next.depth, 1, max_depth);
    tuner.reason = detail::TuneReason::kForced;
  } else {
    if (!limits.threads && !limits.depth) return;
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - window_start).count();
    if (++window_batches < detail::kWindowBatches || seconds < detail::kWindowSeconds) return;
    const std::uint64_t wait = wait_ns.load(std::memory_order_relaxed);
    const std::uint64_t idle = idle_ns.load(std::memory_order_relaxed);
    tuner = detail::Tune(tuner,
                         {.batches = double(window_batches),
                          .seconds = seconds,
                          .consumer_wait = double(wait - window_wait_ns) * 1e-9,
                          .producer_idle = double(idle - window_idle_ns) * 1e-9},
                         limits);
    next = tuner.setting;
    window_start = now;
    window_batches = 0;
    window_wait_ns = wait;
    window_idle_ns = idle;
  }
  reason.store(tuner.reason, std::memory_order_relaxed);
  if (next.threads != target_threads.load(std::memory_order_relaxed) ||
      next.depth != target_depth.load(std::memory_order_relaxed)) {
    retunes.fetch_add(1, std::memory_order_relaxed);
  }
  tuner.setting = next;
  target_threads.store(next.threads, std::memory_order_relaxed);
  target_depth.store(next.depth, std::memory_order_relaxed);
}

void detail::TunerAccess::Force(Loader& loader,
                                std::function<TunerSetting(std::uint64_t)> schedule) {
  std::lock_guard lock(loader.impl_->next_mutex);
  loader.impl_->forced = std::move(schedule);
}

void Loader::Impl::StartProducer() {
  producer = std::jthread([this, token = stop.get_token()] { Run(token); });
}

void Loader::Stop() {
  Impl& s = *impl_;
  std::lock_guard lifecycle(s.lifecycle_mutex);
  s.stopped.store(true, std::memory_order_relaxed);
  s.stop.request_stop();
  if (s.producer.joinable()) s.producer.join();
}

namespace {

// `timeout` after `now`, saturating: milliseconds::max() is "never".
Clock::time_point Deadline(Clock::time_point now, std::chrono::milliseconds timeout) {
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      Clock::time_point::max() - now - std::chrono::milliseconds{1});
  if (timeout >= room) return Clock::time_point::max();
  return now + std::max(timeout, std::chrono::milliseconds{0});
}

}  // namespace

std::optional<Batch> Loader::Next() {
  for (;;) {
    NextResult result = Next(std::chrono::milliseconds::max());
    if (result.status != NextStatus::kTimedOut) return std::move(result.batch);
  }
}

Loader::NextResult Loader::Next(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  std::lock_guard lock(s.next_mutex);
  if (s.failure) throw LoaderError(*s.failure);
  if (s.done || s.stop.stop_requested()) {
    s.done = true;
    return {NextStatus::kEnded, std::nullopt};
  }
  const auto wait_start = Clock::now();
  if (!s.wait_resumed) {  // one observation per batch, however many slices its wait takes
    s.ready_observations.fetch_add(1, std::memory_order_relaxed);
    s.ready_sum.fetch_add(s.ready_ring.size(), std::memory_order_relaxed);
  }
  s.wait_resumed = false;
  const std::optional<Ready> ready = s.PopReady(Deadline(wait_start, timeout));
  s.wait_ns.fetch_add(Nanos(Clock::now() - wait_start), std::memory_order_relaxed);
  if (!ready) {
    if (s.stop.stop_requested()) {
      s.done = true;
      return {NextStatus::kEnded, std::nullopt};
    }
    s.wait_resumed = true;
    return {NextStatus::kTimedOut, std::nullopt};
  }
  switch (ready->kind) {
    case Ready::kEndOfEpoch:
      s.position.epoch++;
      s.position.position = 0;
      s.next_batch = 0;
      return {NextStatus::kEndOfEpoch, std::nullopt};
    case Ready::kDone:
      s.FinishPipeline();  // throws the pipeline's error, if any
      return {NextStatus::kEnded, std::nullopt};
    case Ready::kBatch:
      break;
  }
  Batch batch = s.HandOut(this, ready->slot);
  s.Tick();
  return {NextStatus::kBatch, std::move(batch)};
}

// The pipeline has returned: the loader is done, or failed if the pipeline threw.
void Loader::Impl::FinishPipeline() {
  done = true;
  if (!pipeline_error) return;
  try {
    std::rethrow_exception(pipeline_error);
  } catch (const std::exception& e) {
    failure = std::string("loader pipeline failed: ") + e.what();
  } catch (...) {
    failure = "loader pipeline failed with an unknown exception";
  }
  throw LoaderError(*failure);
}

// The Batch for a published slot, and the consumer's position after it; throws the batch's
// error instead (kFail, or no substitute found), which ends the loader.
Batch Loader::Impl::HandOut(Loader* loader, std::size_t slot_index) {
  Slot& slot = *slots[slot_index];
  if (!slot.error.empty()) {
    failure = slot.error;
    ReturnSlot(slot_index);
    stop.request_stop();  // nothing after a failed batch is delivered
    throw LoaderError(*failure);
  }
  {
    std::lock_guard lock(release_mutex);
    slot.held = true;
  }
  Batch batch;
  batch.loader_ = loader;
  batch.slot_ = slot_index;
  batch.epoch_ = slot.epoch;
  batch.index_ = slot.batch;
  batch.size_ = slot.size;
  const ImageSize size = options.image_size.At(slot.epoch);
  batch.height_ = size.height;
  batch.width_ = size.width;
  batch.layout_ = layout;
  batch.substituted_ = slot.substituted.load(std::memory_order_relaxed);
  batch.images_ = std::span(slot.images.data(), size.bytes() * slot.size);
  batch.labels_ = std::span(slot.labels.data(), slot.size);
  batch.sample_indices_ = std::span(slot.indices.data(), slot.size);
  batch.output_ =
      std::span(slot.output)
          .first(converter ? converter->ImageBytes(size.height, size.width) * slot.size : 0);
  // Positions of the epoch order advance by the instance count per local sample.
  const bool first = slot.epoch == start_epoch;
  const std::uint64_t start = first ? start_position : 0;
  const std::uint64_t run_batches = slot.batch - (first ? start_batch : 0);
  const std::uint64_t delivered = (run_batches * options.batch_size + slot.size) *
                                  static_cast<std::uint64_t>(options.slice.count);
  next_batch = slot.batch + 1;
  position.epoch = slot.epoch;
  position.position = std::min<std::uint64_t>(start + delivered, source->size());
  batches.fetch_add(1, std::memory_order_relaxed);
  handed_out.fetch_add(1, std::memory_order_release);
  return batch;
}

// The next ready item, or nullopt once stopped or past `deadline`. While every slot is held
// by batches the consumer has not released, no batch can become ready (only markers can), so
// the wait is bounded by held_slots_timeout: the consumer may be keeping them all itself.
// held_since carries that wait across calls that time out.
std::optional<Ready> Loader::Impl::PopReady(Clock::time_point deadline) {
  using std::chrono::milliseconds;
  const std::stop_token token = stop.get_token();
  // In milliseconds, so that held_slots_timeout = milliseconds::max() cannot overflow.
  auto held_for = [&] { return std::chrono::ceil<milliseconds>(Clock::now() - *held_since); };
  for (;;) {
    milliseconds wait = kPollInterval;
    if (handed_out.load(std::memory_order_acquire) < slot_count.load(std::memory_order_acquire)) {
      held_since.reset();
    } else {
      if (!held_since) held_since = Clock::now();
      wait = std::clamp(options.held_slots_timeout - held_for(), milliseconds{0}, kPollInterval);
    }
    if (deadline != Clock::time_point::max()) {
      wait = std::clamp(std::chrono::ceil<milliseconds>(deadline - Clock::now()), milliseconds{0},
                        wait);
    }
    if (std::optional<Ready> ready = ready_ring.PopFor(wait, token)) {
      held_since.reset();
      return ready;
    }
    // The same stop state as `token`'s; asked of the source because GCC 12 at -O3 warns
    // (falsely, -Wuse-after-free) about `token` after PopFor's copy of it is destroyed.
    if (stop.stop_requested()) return std::nullopt;
    if (held_since && held_for() >= options.held_slots_timeout &&
        handed_out.load(std::memory_order_acquire) >= slot_count.load(std::memory_order_acquire)) {
      held_since.reset();  // not sticky: the next call waits afresh
      throw SlotsHeldError(HeldSlotsMessage());
    }
    if (Clock::now() >= deadline) return std::nullopt;
  }
}

std::string Loader::Impl::HeldSlotsMessage() const {
  const std::string depth = std::to_string(slot_count.load(std::memory_order_acquire));
  return "Next() would wait forever: all " + depth + " batch slots (prefetch_depth=" + depth +
         ") are held by batches it already returned that are still alive, and none came back "
         "within held_slots_timeout (" +
         std::to_string(options.held_slots_timeout.count()) +
         " ms). Release or copy the batches you keep (drop the Batch, or copy its images "
         "out), or raise prefetch_depth above the number you keep";
}

void Loader::Impl::ReturnSlot(std::size_t slot) noexcept {
  std::lock_guard lock(release_mutex);
  slots[slot]->held = false;
  // The free ring holds every slot, so it is never full.
  [[maybe_unused]] const bool pushed = free_ring.TryPush(std::size_t{slot});
  assert(pushed);
}

void Loader::Release(std::size_t slot) noexcept {
  impl_->handed_out.fetch_sub(1, std::memory_order_release);
  impl_->ReturnSlot(slot);
}

bool Loader::ended() const {
  Impl& s = *impl_;
  std::lock_guard lock(s.next_mutex);
  return s.stopped.load(std::memory_order_relaxed) || s.failure || s.done ||
         !s.InEpochRange(s.position.epoch);
}

// Whether `epoch` is one this loader produces: [first_epoch, first_epoch + epochs).
bool Loader::Impl::InEpochRange(std::uint64_t epoch) const {
  return options.epochs == 0 || (epoch >= first_epoch && epoch - first_epoch < options.epochs);
}

void Loader::Impl::CheckSeek(const LoaderState& state) const {
  auto refuse = [](const std::string& what) {
    throw std::invalid_argument("Loader::Seek: " + what);
  };
  if (state.seed != options.seed) {
    refuse("the state is for seed " + std::to_string(state.seed) + "; this loader's seed is " +
           std::to_string(options.seed));
  }
  if (state.dataset_size != source->size()) {
    refuse("the state is for a dataset of " + std::to_string(state.dataset_size) +
           " samples; this source has " + std::to_string(source->size()));
  }
  if (state.position > state.dataset_size) {
    refuse("position " + std::to_string(state.position) + " is past the dataset size " +
           std::to_string(state.dataset_size));
  }
}

// Puts every slot the consumer does not hold back in the free ring, and drops what was
// ready. REQUIRES: the producer is joined (no other side of either ring runs).
void Loader::Impl::ReclaimSlots() {
  while (ready_ring.TryPop()) {
  }
  std::lock_guard lock(release_mutex);
  while (free_ring.TryPop()) {
  }
  for (std::size_t i = 0; i < slot_count.load(std::memory_order_acquire); ++i) {
    if (slots[i]->held) continue;
    [[maybe_unused]] const bool pushed = free_ring.TryPush(std::size_t{i});
    assert(pushed);
  }
}

void Loader::Seek(const LoaderState& state) {
  Impl& s = *impl_;
  s.CheckSeek(state);
  std::lock_guard lock(s.next_mutex);
  std::lock_guard lifecycle(s.lifecycle_mutex);
  if (s.stopped.load(std::memory_order_relaxed)) {
    throw std::logic_error("Loader::Seek: the loader was stopped");
  }
  s.stop.request_stop();
  if (s.producer.joinable()) s.producer.join();
  s.ReclaimSlots();
  s.paused = false;
  s.pipeline_error = nullptr;
  s.failure.reset();
  s.held_since.reset();
  s.wait_resumed = false;
  s.position = state;
  s.start_epoch = state.epoch;
  s.start_position = state.position;
  s.start_batch = 0;
  s.next_batch = 0;
  s.done = !s.InEpochRange(state.epoch);
  if (s.done) return;  // nothing to produce: the loader stays ended
  s.stop = std::stop_source();
  s.StartProducer();
}

void Loader::Pause() {
  Impl& s = *impl_;
  std::lock_guard lock(s.next_mutex);
  std::lock_guard lifecycle(s.lifecycle_mutex);
  if (s.paused || s.stopped.load(std::memory_order_relaxed)) return;
  s.paused = true;
  s.stop.request_stop();
  if (s.producer.joinable()) s.producer.join();
  s.ReclaimSlots();
  s.stop = std::stop_source();  // not stopped: Next() waits (and times out) until Resume()
}

void Loader::Resume() {
  Impl& s = *impl_;
  std::lock_guard lock(s.next_mutex);
  std::lock_guard lifecycle(s.lifecycle_mutex);
  if (!s.paused || s.stopped.load(std::memory_order_relaxed)) return;
  s.paused = false;
  // An error the consumer has seen stays (Next() repeats it); one it has not is found
  // again by the new pipeline, which decodes the same batches.
  s.pipeline_error = nullptr;
  s.held_since.reset();
  s.wait_resumed = false;
  s.start_epoch = s.position.epoch;
  s.start_position = s.position.position;
  s.start_batch = s.position.position == 0 ? 0 : s.next_batch;
  if (s.done || s.failure) return;
  s.done = !s.InEpochRange(s.position.epoch);
  if (s.done) return;
  s.StartProducer();
}

bool ReleaseWorkerThreads() {
  tbb::task_scheduler_handle handle{tbb::attach{}};
  return tbb::finalize(handle, std::nothrow);
}

LoaderState Loader::state() const {
  std::lock_guard lock(impl_->next_mutex);
  return impl_->position;
}

std::string LoaderState::Serialize() const {
  return "tilefeed-loader-state v1 seed=" + std::to_string(seed) +
         " epoch=" + std::to_string(epoch) + " position=" + std::to_string(position) +
         " size=" + std::to_string(dataset_size);
}

LoaderState LoaderState::Parse(const std::string& text) {
  LoaderState state;
  unsigned long long seed = 0, epoch = 0, position = 0, size = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(),
                  "tilefeed-loader-state v1 seed=%llu epoch=%llu position=%llu size=%llu%n", &seed,
                  &epoch, &position, &size, &consumed) != 4 ||
      text.find_first_not_of(" \n", static_cast<std::size_t>(consumed)) != std::string::npos) {
    throw std::invalid_argument("not a tilefeed loader state (v1): '" + text + "'");
  }
  if (position > size) {
    throw std::invalid_argument("loader state position " + std::to_string(position) +
                                " is past the dataset size " + std::to_string(size));
  }
  state.seed = seed;
  state.epoch = epoch;
  state.position = position;
  state.dataset_size = size;
  return state;
}

std::uint64_t Loader::first_epoch() const { return impl_->first_epoch; }
std::size_t Loader::batches_per_epoch() const { return impl_->batches_per_epoch; }
std::size_t Loader::samples_per_epoch() const { return impl_->samples_per_epoch; }
const Source& Loader::source() const { return *impl_->source; }
const LoaderOptions& Loader::options() const { return impl_->options; }

LoaderMetrics Loader::metrics() const {
  const Impl& s = *impl_;
  LoaderMetrics m;
  m.seconds = std::chrono::duration<double>(Clock::now() - s.start).count();
  m.images = s.images.load(std::memory_order_relaxed);
  m.batches = s.batches.load(std::memory_order_relaxed);
  m.bad_samples = s.bad.load(std::memory_order_relaxed);
  m.bytes_read = s.bytes_read.load(std::memory_order_relaxed);
  m.images_per_second = m.seconds > 0 ? double(m.images) / m.seconds : 0;
  m.read_seconds = double(s.read_ns.load(std::memory_order_relaxed)) * 1e-9;
  m.decode_seconds = double(s.decode_ns.load(std::memory_order_relaxed)) * 1e-9;
  m.resize_seconds = double(s.resize_ns.load(std::memory_order_relaxed)) * 1e-9;
  m.wait_seconds = double(s.wait_ns.load(std::memory_order_relaxed)) * 1e-9;
  const auto observations = s.ready_observations.load(std::memory_order_relaxed);
  m.mean_ready_batches =
      observations ? double(s.ready_sum.load(std::memory_order_relaxed)) / double(observations) : 0;
  m.slots = s.slot_count.load(std::memory_order_acquire);
  m.slot_bytes = s.slot_bytes;
  m.threads = s.threads.load(std::memory_order_relaxed);
  m.cores = s.cores;
  m.tuned = detail::ReasonText(s.reason.load(std::memory_order_relaxed));
  m.retunes = s.retunes.load(std::memory_order_relaxed);
  return m;
}

std::vector<BadSample> Loader::bad_samples() const {
  std::lock_guard lock(impl_->bad_mutex);
  return impl_->bad_samples;
}

Batch::Batch(Batch&& other) noexcept { *this = std::move(other); }

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    ReturnSlot();
    loader_ = std::exchange(other.loader_, nullptr);
    slot_ = other.slot_;
    epoch_ = other.epoch_;
    index_ = other.index_;
    size_ = other.size_;
    height_ = other.height_;
    width_ = other.width_;
    layout_ = other.layout_;
    substituted_ = other.substituted_;
    images_ = std::exchange(other.images_, {});
    labels_ = std::exchange(other.labels_, {});
    sample_indices_ = std::exchange(other.sample_indices_, {});
    output_ = std::exchange(other.output_, {});
    other.size_ = 0;
  }
  return *this;
}

void Batch::ReturnSlot() noexcept {
  if (loader_ != nullptr) {
    loader_->Release(slot_);
    loader_ = nullptr;
    images_ = {};
    labels_ = {};
    sample_indices_ = {};
    output_ = {};
  }
}

}  // namespace tilefeed::loader
