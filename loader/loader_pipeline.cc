// The producer's side of the Loader: the oneTBB pipeline (plan, decode, publish) that one
// producer thread runs per start or Seek, and its hand-off to the ready ring. See the design
// note in loader.cc.

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "loader/loader_impl.h"

namespace tilefeed::loader {

using detail::Chunk;
using detail::ChunkTable;
using detail::kPollInterval;
using detail::Ready;
using detail::Slot;
using detail::Worker;

namespace {

// libtbb is not built with ThreadSanitizer, so TSan cannot see the hand-offs between
// oneTBB's own workers (token passing, its recycled filter nodes) and reports races that
// are not there. Under TSan the decode arena therefore runs on the producer thread alone;
// what TSan then checks is tilefeed's own protocol: the rings, the slot hand-off to the
// consumer, Batch release from any thread, and stop.
#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderThreadSanitizer = true;
#else
constexpr bool kUnderThreadSanitizer = false;
#endif

}  // namespace

void Loader::Impl::PushReady(Ready ready, const std::stop_token& token) {
  // A trivially copyable value: each try pushes a fresh copy.
  while (!ready_ring.PushFor(Ready{ready}, kPollInterval, token)) {
    if (token.stop_requested()) return;
  }
}

// One run of the pipeline: the three stages of the design note and the state each carries
// from one call to the next. The plan fields are touched only by the serial plan stage.
// oneTBB's hand-off of a token from stage to stage orders that token's writes before the
// next stage's reads, as it orders a serial stage's successive calls (under TSan, see
// kUnderThreadSanitizer).
class Loader::Impl::Pipeline {
 public:
  Pipeline(Impl& loader, std::stop_token token)
      : loader_(loader),
        token_(std::move(token)),
        threads_(loader.target_threads.load(std::memory_order_relaxed)),
        arena_(kUnderThreadSanitizer ? 1 : threads_),
        workers_([&loader] { return Worker(loader.options.jpeg); }),
        chunks_(Tokens(threads_)),
        epoch_(loader.start_epoch) {}

  // Runs the stages until the last epoch is published, stop is requested, or a stage throws.
  // The tuner's new thread count stops the plan at a batch boundary; the pipeline drains and
  // runs on in an arena of the new size from where the plan stands, so no batch changes.
  void Run() {
    for (;;) {
      loader_.threads.store(threads_, std::memory_order_relaxed);
      RunPipeline();
      if (!retune_ || token_.stop_requested()) return;
      retune_ = false;
      threads_ = loader_.target_threads.load(std::memory_order_relaxed);
      arena_.terminate();
      arena_.initialize(kUnderThreadSanitizer ? 1 : threads_);
      chunks_ = ChunkTable(Tokens(threads_));
    }
  }

 private:
  // Live tokens: enough that every thread has chunks to take while others publish.
  static std::size_t Tokens(int threads) { return static_cast<std::size_t>(threads) * 4 + 2; }

  void RunPipeline() {
    arena_.execute([this] {
      tbb::parallel_pipeline(
          chunks_.size(),
          tbb::make_filter<void, std::uint64_t>(
              tbb::filter_mode::serial_in_order,
              [this](tbb::flow_control& flow) { return Plan(flow); }) &
              tbb::make_filter<std::uint64_t, std::uint64_t>(
                  tbb::filter_mode::parallel,
                  [this](std::uint64_t token_number) { return Decode(token_number); }) &
              tbb::make_filter<std::uint64_t, void>(
                  tbb::filter_mode::serial_in_order,
                  [this](std::uint64_t token_number) { Publish(token_number); }));
    });
  }

  // Stage 1 (serial, in order): the next chunk's token, or a stopped flow.
  std::uint64_t Plan(tbb::flow_control& flow) {
    std::optional<Chunk> chunk = PlanChunk();
    if (!chunk) {
      flow.stop();
      return 0;  // TBB drops the value of a stopped flow
    }
    return chunks_.Put(std::move(*chunk));
  }

  // The next chunk of the current batch, an end-of-epoch marker, or nullopt once stopped
  // or past the last epoch.
  std::optional<Chunk> PlanChunk() {
    if (token_.stop_requested()) return std::nullopt;
    if (!order_ && !StartEpoch()) return std::nullopt;
    if (batch_ == epoch_batches_) return EndEpoch();
    if (position_ == batch_end_) {
      if (loader_.target_threads.load(std::memory_order_relaxed) != threads_) {
        retune_ = true;
        return std::nullopt;
      }
      if (!StartBatch()) return std::nullopt;
    }
    Chunk chunk;
    chunk.slot = slot_;
    chunk.epoch = epoch_;
    chunk.batch_begin = batch_begin_;
    chunk.begin = position_;
    chunk.end = std::min(position_ + loader_.chunk_size, batch_end_);
    chunk.last_of_batch = chunk.end == batch_end_;
    chunk.order = order_;
    position_ = chunk.end;
    if (chunk.last_of_batch) ++batch_;
    return chunk;
  }

  // Draws epoch_'s order; false once every epoch asked for has been planned.
  bool StartEpoch() {
    const LoaderOptions& o = loader_.options;
    if (o.epochs != 0 && epoch_ >= loader_.first_epoch + o.epochs) return false;
    const std::uint64_t start = epoch_ == loader_.start_epoch ? loader_.start_position : 0;
    order_ = std::make_shared<const EpochOrder>(loader_.source->size(), o.seed, epoch_, o.shuffle,
                                                o.slice, o.remainder, start, o.locality);
    // A resumed first epoch is shorter than the others.
    epoch_batches_ = order_->size() / o.batch_size;
    if (!o.drop_last_batch && order_->size() % o.batch_size != 0) ++epoch_batches_;
    batch_ = epoch_ == loader_.start_epoch ? loader_.start_batch : 0;
    epoch_batches_ += batch_;
    position_ = 0;
    batch_end_ = 0;
    return true;
  }

  Chunk EndEpoch() {
    Chunk marker;
    marker.kind = Ready::kEndOfEpoch;
    marker.epoch = epoch_++;
    order_.reset();
    return marker;
  }

  // Takes a free slot for the batch that starts at position_ and sets it up; false if
  // stopped while waiting. This wait is where a slow consumer holds the pipeline back.
  // Under auto depth a batch that finds no free slot gets a new one while the tuner's depth
  // allows; the time spent waiting is the producer's idle time, which the tuner reads.
  bool StartBatch() {
    std::optional<std::size_t> free = loader_.free_ring.TryPop();
    const auto wait_start = detail::Clock::now();
    while (!free) {
      if (loader_.slot_count.load(std::memory_order_relaxed) <
          loader_.target_depth.load(std::memory_order_relaxed)) {
        free = loader_.AddSlot();
      } else if (!(free = loader_.free_ring.PopFor(kPollInterval, token_)) &&
                 token_.stop_requested()) {
        return false;
      }
    }
    loader_.idle_ns.fetch_add(detail::Nanos(detail::Clock::now() - wait_start),
                              std::memory_order_relaxed);
    slot_ = *free;
    batch_begin_ = position_;
    batch_end_ = std::min(position_ + loader_.options.batch_size, order_->size());
    Slot& slot = *loader_.slots[slot_];
    slot.epoch = epoch_;
    slot.batch = batch_;
    slot.size = batch_end_ - batch_begin_;
    slot.substituted.store(0, std::memory_order_relaxed);
    slot.error.clear();
    slot.decoded.store(0, std::memory_order_relaxed);
    return true;
  }

  // Stage 2 (parallel): decodes a batch chunk into its slot's rows.
  std::uint64_t Decode(std::uint64_t token_number) {
    const Chunk& chunk = chunks_.At(token_number);
    if (chunk.kind == Ready::kBatch) {
      loader_.DecodeChunk(workers_.local(), chunk, token_);
      loader_.slots[chunk.slot]->decoded.fetch_add(chunk.end - chunk.begin,
                                                   std::memory_order_relaxed);
    }
    return token_number;
  }

  // Stage 3 (serial, in order): hands a finished batch, or an epoch's end, to the consumer.
  void Publish(std::uint64_t token_number) {
    const Chunk& chunk = chunks_.At(token_number);
    if (token_.stop_requested()) return;
    if (chunk.kind == Ready::kEndOfEpoch) {
      loader_.PushReady({Ready::kEndOfEpoch, 0}, token_);
    } else if (chunk.last_of_batch) {
      // Every chunk of the batch was decoded before this one reached publish.
      assert(loader_.slots[chunk.slot]->decoded.load(std::memory_order_relaxed) ==
                 loader_.slots[chunk.slot]->size ||
             token_.stop_requested());
      loader_.PushReady({Ready::kBatch, chunk.slot}, token_);
    }
  }

  Impl& loader_;
  const std::stop_token token_;
  int threads_;          // the arena's
  bool retune_ = false;  // the plan stopped for a new thread count
  tbb::task_arena arena_;
  tbb::enumerable_thread_specific<Worker> workers_;
  ChunkTable chunks_;
  // Plan-stage state: where the plan stands.
  std::uint64_t epoch_;
  std::shared_ptr<const EpochOrder> order_;  // epoch_'s; null between epochs
  std::size_t epoch_batches_ = 0;            // batches in order_
  std::size_t batch_ = 0;                    // batches of order_ planned so far
  std::size_t position_ = 0;                 // next position of order_ to plan
  std::size_t slot_ = 0;                     // the current batch's slot
  std::size_t batch_begin_ = 0;              // the current batch's positions in order_
  std::size_t batch_end_ = 0;
};

void Loader::Impl::Run(std::stop_token token) {
  try {
    Pipeline(*this, token).Run();
  } catch (...) {
    pipeline_error = std::current_exception();
  }
  // After the pipeline has returned this thread is the ready ring's only producer.
  PushReady({Ready::kDone, 0}, token);
}

}  // namespace tilefeed::loader
