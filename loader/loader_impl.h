// Internals of loader/loader.cc's Loader, shared by the files that implement it:
// loader.cc (construction, the consumer side, Seek and state), loader_validate.cc (the
// options' checks and the sizes they fix), loader_decode.cc (the decode stage) and
// loader_pipeline.cc (the producer's oneTBB pipeline). The design note is at
// the top of loader.cc. Not installed.

#pragma once

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "codecs/image_ops.h"
#include "codecs/jpeg_coefficients.h"
#include "codecs/jpeg_index.h"
#include "codecs/png.h"
#include "codecs/resize.h"
#include "loader/output_convert.h"
#include "loader/ring.h"
#include "loader/tuner.h"
#include "tilefeed/loader/loader.h"

namespace tilefeed::loader {
namespace detail {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kPollInterval{200};

// The memory this process may use, and `where` that limit is written: the lowest of `physical`
// and of the limits (v2 memory.max, v1 memory.limit_in_bytes) of its own cgroup and every group
// above it, read under `root` ("/"; a test passes a folder laid out alike).
struct MemoryLimit {
  std::uint64_t bytes = 0;
  std::string where;
};
MemoryLimit MemoryLimitOf(const std::filesystem::path& root, std::uint64_t physical);

inline std::uint64_t Nanos(Clock::duration d) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

struct Slot {
  // The slot's memory: `owned` unless LoaderOptions::slot_memory provides it.
  std::span<std::uint8_t> images;
  std::span<std::int32_t> labels;
  std::span<std::uint64_t> indices;
  std::vector<std::uint8_t> owned_images;
  std::vector<std::int32_t> owned_labels;
  std::vector<std::uint64_t> owned_indices;
  // LoaderOptions::output's conversion of `images` (empty for uint8 output).
  std::vector<std::byte> output;
  std::uint64_t epoch = 0;
  std::uint64_t batch = 0;
  std::size_t size = 0;
  bool held = false;  // handed to the consumer and not returned; under release_mutex
  std::atomic<std::size_t> substituted{0};
  // Rows decoded so far (chunks of one batch decode in parallel); publish checks that
  // the whole batch is in before the slot goes to the consumer.
  std::atomic<std::size_t> decoded{0};
  // The first failure of the batch (lowest row) under kFail, or a batch that found no
  // substitute under kSkip. Written by workers under error_mutex; read by the consumer
  // after the publish filter handed the slot over.
  std::mutex error_mutex;
  std::size_t error_row = 0;
  std::string error;
};

// An entry of the ready ring.
struct Ready {
  enum Kind : std::uint8_t { kBatch, kEndOfEpoch, kDone };
  Kind kind = kBatch;
  std::size_t slot = 0;
};

// A unit of work through the pipeline: positions [begin, end) of one batch, or a marker.
struct Chunk {
  Ready::Kind kind = Ready::kBatch;
  std::size_t slot = 0;
  std::uint64_t epoch = 0;
  std::size_t batch_begin = 0;  // position of the batch's first sample in the epoch order
  std::size_t begin = 0;
  std::size_t end = 0;
  bool last_of_batch = false;
  std::shared_ptr<const EpochOrder> order;
};

// Chunks waiting between the pipeline's stages. Tokens through TBB are plain numbers, so
// TBB never allocates or copies a Chunk: chunk n waits in entry n % size(). No live token
// shares an entry: TBB keeps at most size() tokens alive and the last stage is serial in
// order, so chunk n has left the pipeline before chunk n + size() is planned.
class ChunkTable {
 public:
  explicit ChunkTable(std::size_t size) : entries_(size) {}

  std::size_t size() const { return entries_.size(); }

  // Stores the next chunk and returns its token. Only the serial plan stage calls it.
  std::uint64_t Put(Chunk chunk) {
    const std::uint64_t token = next_token_++;
    Entry& entry = entries_[token % entries_.size()];
    entry.chunk = std::move(chunk);
    entry.token = token;
    return token;
  }

  // The chunk of a live token.
  const Chunk& At(std::uint64_t token) const {
    const Entry& entry = entries_[token % entries_.size()];
    assert(entry.token == token);
    return entry.chunk;
  }

 private:
  struct Entry {
    Chunk chunk;
    std::uint64_t token = ~std::uint64_t{0};
  };
  std::vector<Entry> entries_;
  std::uint64_t next_token_ = 0;
};

// Per-worker state: one decoder and scratch each, reused for every sample. The indexed
// decoder wraps the worker's only JpegDecoder (decoder.decoder()), which also decodes
// plain JPEGs, so a worker holds one libjpeg handle whatever its records are. PNGs
// share the JPEG pixel limit.
struct Worker {
  explicit Worker(const codecs::JpegOptions& options)
      : decoder(options),
        coefficients(options),
        png(codecs::PngOptions{.max_pixels = options.max_pixels}) {}
  codecs::IndexedJpegDecoder decoder;
  codecs::CoefficientDecoder coefficients;  // kCoefficients records
  codecs::PngDecoder png;
  codecs::Resizer resizer;
  codecs::ImageOpScratch ops;  // the pixel ops' (LoaderOptions::augment)
  std::vector<std::byte> bytes;
  std::vector<std::uint8_t> raw;
  // A chunk's samples, read with one Source::ReadMany. The buffers keep their capacity
  // from chunk to chunk up to kRetainedSampleBytes each (see DecodeChunk).
  std::vector<std::uint64_t> chunk_samples;
  std::vector<std::vector<std::byte>> chunk_bytes;
  std::vector<ReadResult> chunk_reads;
};

// Raw HWC pixels to crop and resize.
struct RawPixels {
  const std::uint8_t* pixels = nullptr;
  int width = 0;
  int height = 0;
  int channels = 0;
};

// Where one decoded sample goes and how long each part took.
struct SampleTimes {
  std::uint64_t read_ns = 0;
  std::uint64_t decode_ns = 0;
  std::uint64_t resize_ns = 0;
  std::uint64_t bytes = 0;
};

}  // namespace detail

struct Loader::Impl {
  std::unique_ptr<Source> source;
  LoaderOptions options;
  int cores = 1;              // the cores this process may run on
  int workers = 1;            // the first decode threads: `workers`, or 1 under auto
  int max_workers = 1;        // `workers`, or cpu_share x cores rounded up under auto
  std::size_t depth = 1;      // the first slots: prefetch_depth, or 2 under auto
  std::size_t max_depth = 1;  // prefetch_depth, or what memory_budget holds under auto
  std::size_t samples_per_epoch = 0;
  std::size_t batches_per_epoch = 0;
  std::size_t slot_bytes = 0;
  std::size_t image_bytes = 0;  // of the schedule's largest size: a slot's row capacity
  std::size_t chunk_size = 1;
  std::optional<OutputConverter> converter;  // LoaderOptions::output, unless uint8
  Layout layout = Layout::kNhwc;             // of the slot's uint8 images (Batch::layout())

  // max_depth entries, of which the first slot_count exist: the producer adds slots under auto
  // depth (AddSlot), and the index reaches the consumer through the rings, after the slot.
  std::vector<std::unique_ptr<detail::Slot>> slots;
  std::atomic<std::size_t> slot_count{0};
  SpscRing<std::size_t> free_ring;
  SpscRing<detail::Ready> ready_ring;
  std::mutex next_mutex;
  std::mutex release_mutex;
  // Batches Next() returned whose slots have not come back: all of them means the next
  // batch can only come from a slot the consumer releases.
  std::atomic<std::size_t> handed_out{0};
  std::mutex lifecycle_mutex;        // Stop() against Seek()'s new stop source and producer
  std::atomic<bool> stopped{false};  // Stop() was called
  bool paused = false;               // Pause()d; under next_mutex and lifecycle_mutex
  std::stop_source stop;
  std::jthread producer;
  std::exception_ptr pipeline_error;  // set by the producer thread before kDone
  // The first epoch of the range [first_epoch, first_epoch + epochs): the start state's.
  std::uint64_t first_epoch = 0;
  // Where the running pipeline started: the start state's epoch and position, or Seek()'s.
  std::uint64_t start_epoch = 0;
  std::uint64_t start_position = 0;
  // The index of the first batch of start_epoch: 0, or after Resume() the batches of that
  // epoch already delivered, so that a paused loader numbers its batches as before.
  std::uint64_t start_batch = 0;

  // Consumer-side state, under next_mutex.
  bool done = false;
  LoaderState position;          // where the consumer stands
  std::uint64_t next_batch = 0;  // the index of the batch after the last one handed out
  std::optional<std::string> failure;
  // Since when every slot has been held by the consumer, across timed-out Next() calls.
  std::optional<detail::Clock::time_point> held_since;
  bool wait_resumed = false;  // the last Next() timed out (its ring observation counted)

  // The tuner (tuner.h): the consumer's Tick() sets the targets, the producer follows them.
  std::atomic<int> target_threads{1}, threads{0};
  std::atomic<std::size_t> target_depth{1};
  std::atomic<std::uint64_t> idle_ns{0}, retunes{0};  // idle: the plan stage's free-slot wait
  std::atomic<detail::TuneReason> reason{detail::TuneReason::kNone};
  // Consumer-side, under next_mutex: the policy's state and the open window.
  detail::TunerState tuner;
  detail::TunerLimits limits;
  std::function<detail::TunerSetting(std::uint64_t)> forced;  // TunerAccess::Force
  detail::Clock::time_point window_start = detail::Clock::now();
  std::uint64_t window_batches = 0, window_wait_ns = 0, window_idle_ns = 0;

  // Metrics.
  detail::Clock::time_point start = detail::Clock::now();
  std::atomic<std::uint64_t> images{0}, batches{0}, bad{0}, bytes_read{0};
  std::atomic<std::uint64_t> read_ns{0}, decode_ns{0}, resize_ns{0}, wait_ns{0};
  std::atomic<std::uint64_t> ready_observations{0}, ready_sum{0};
  mutable std::mutex bad_mutex;
  std::vector<BadSample> bad_samples;

  Impl(std::unique_ptr<Source> src, LoaderOptions opts)
      : source(std::move(src)),
        options(std::move(opts)),
        free_ring(RingCapacity(options)),
        ready_ring(2 * RingCapacity(options) + 4) {}

  // Room for every slot there may ever be.
  static std::size_t RingCapacity(const LoaderOptions& o) {
    return o.prefetch_depth == kAutoDepth ? detail::kMaxAutoDepth
                                          : std::max<std::size_t>(o.prefetch_depth, 1);
  }

  class Pipeline;

  // Checks the options (and `start`) and sets what follows from them: sizes, the position.
  void Validate(const std::optional<LoaderState>& start);
  void Run(std::stop_token token);
  // Row `row` of a slot's images for an epoch whose images are `size`.
  codecs::PixelView RowView(std::span<std::uint8_t> images, std::size_t row, ImageSize size) const;
  void DecodeChunk(detail::Worker& worker, const detail::Chunk& chunk,
                   const std::stop_token& token);
  codecs::CropPlan PlanCrop(SampleRng& rng, int width, int height) const;
  std::uint64_t ResizeRaw(detail::Worker& worker, SampleRng& rng, const detail::RawPixels& raw,
                          const codecs::PixelView& out) const;
  codecs::DecodeReport DecodeImage(detail::Worker& worker, SampleRng& rng,
                                   const std::vector<std::byte>& bytes, const SampleInfo& info,
                                   const codecs::PixelView& out) const;
  void DecodeOne(detail::Worker& worker, std::uint64_t epoch, std::uint64_t sample,
                 const std::vector<std::byte>& bytes, const SampleInfo& info,
                 std::uint64_t sample_read_ns, const codecs::PixelView& out, std::int32_t& label);
  void HandleBadSample(detail::Worker& worker, const detail::Chunk& chunk, std::size_t position,
                       std::uint64_t sample, const std::string& reason);
  void ReadAndDecode(detail::Worker& worker, std::uint64_t epoch, std::uint64_t sample,
                     const codecs::PixelView& out, std::int32_t& label);
  void Report(std::uint64_t epoch, std::uint64_t sample, const std::string& reason);
  void PushReady(detail::Ready ready, const std::stop_token& token);
  std::optional<detail::Ready> PopReady(detail::Clock::time_point deadline);
  std::string HeldSlotsMessage() const;
  void ReturnSlot(std::size_t slot) noexcept;
  Batch HandOut(Loader* loader, std::size_t slot_index);
  void FinishPipeline();
  bool InEpochRange(std::uint64_t epoch) const;
  void CheckSeek(const LoaderState& state) const;
  void StartProducer();
  void ReclaimSlots();
  std::size_t AddSlot();
  void Tick();
};

}  // namespace tilefeed::loader
