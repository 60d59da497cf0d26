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
// Seek() restarts the pipeline rather than steering a running one: it stops and joins the
// producer (so both rings' other sides are quiet), empties both rings, and refills the free
// ring with every slot the consumer does not hold. Which slots the consumer holds is
// Slot::held, written under release_mutex by Next() and ReturnSlot(), so a Batch dropped
// on another thread during a Seek goes back exactly once. lifecycle_mutex orders Seek()'s
// replacement of the stop source and producer thread against Stop().

#include "tilefeed/loader/loader.h"

#include <sched.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iomanip>
#include <limits>
#include <mutex>
#include <new>
#include <sstream>
#include <stop_token>
#include <thread>

#include "tilefeed/codecs/jpeg_coefficients.h"
#include "tilefeed/codecs/jpeg_index.h"
#include "tilefeed/codecs/png.h"
#include "tilefeed/codecs/raw.h"
#include "tilefeed/codecs/resize.h"
#include "tilefeed/loader/option_specs.h"
#include "tilefeed/loader/output_convert.h"
#include "tilefeed/loader/ring.h"

namespace tilefeed::loader {
namespace {

using Clock = std::chrono::steady_clock;

// The cores this process may run on: its CPU affinity (mpirun --bind-to core, taskset,
// cgroups cpusets narrow it), which is also what oneTBB sizes its pool by; at least 1.
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}
constexpr std::chrono::milliseconds kPollInterval{200};
constexpr std::size_t kMaxKeptBadSamples = 10000;

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

std::uint64_t Nanos(Clock::duration d) {
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

// This machine's memory: its physical memory, or the cgroup's limit (memory.max) if lower.
std::uint64_t MachineMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  std::uint64_t bytes = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page)
                                              : std::numeric_limits<std::uint64_t>::max();
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  std::uint64_t limit = 0;
  if (cgroup >> limit && limit > 0) bytes = std::min(bytes, limit);
  return bytes;
}

// Refuses batch slots the machine cannot hold, with the arithmetic, before allocating any:
// a huge batch was std::bad_alloc, and a huge prefetch depth grew for gigabytes first.
void CheckMemory(const LoaderOptions& o, int height, int width, std::size_t image_bytes) {
  const long double per_sample = static_cast<long double>(image_bytes) + 12;
  const long double batch = per_sample * static_cast<long double>(o.batch_size);
  const long double total = batch * static_cast<long double>(o.prefetch_depth);
  const std::uint64_t memory = MachineMemoryBytes();
  auto text = [](long double v) { return std::to_string(static_cast<unsigned long long>(v)); };
  const std::string arithmetic = "batch " + std::to_string(o.batch_size) + " x " +
                                 std::to_string(height) + " x " + std::to_string(width) +
                                 " x 3 (+ 12 bytes of label and index each) = " + text(batch) +
                                 " bytes";
  if (batch > static_cast<long double>(memory)) {
    throw std::invalid_argument("LoaderOptions: one batch is more than this machine's " +
                                std::to_string(memory) + " bytes of memory: " + arithmetic);
  }
  if (total > static_cast<long double>(memory)) {
    throw std::invalid_argument(
        "LoaderOptions: prefetch_depth " + std::to_string(o.prefetch_depth) + " slots x " +
        arithmetic + " = " + text(total) + " bytes, more than this machine's " +
        std::to_string(memory) + " bytes of memory; lower the prefetch depth or the batch");
  }
}

// "(0.5, 0.1)": a (min, max) pair as Python writes it.
std::string PairText(double min, double max) {
  std::ostringstream out;
  out << std::setprecision(15) << '(' << min << ", " << max << ')';
  return out.str();
}

// The problem of a crop range (min, max) named `name`, or nullopt when 0 < min <= max.
std::optional<std::string> CropRangeProblem(const char* name, double min, double max) {
  if (std::isfinite(min) && std::isfinite(max) && min > 0 && min <= max) return std::nullopt;
  return std::string(name) + "=(min, max) needs 0 < min <= max, got " + PairText(min, max);
}

}  // namespace

std::optional<std::string> OptionsProblem(const LoaderOptions& o) {
  std::optional<std::string> problem;
  const auto check = [&problem](const OptionSpec& spec, const char* name, double value) {
    if (!problem) problem = RangeProblem(spec, name, value);
  };
  const auto require = [&problem](std::optional<std::string> found) {
    if (!problem) problem = std::move(found);
  };
  check(kBatchSize, "batch_size", static_cast<double>(o.batch_size));
  const bool rectangle = o.image_height > 0 || o.image_width > 0;
  if (rectangle) {
    check(kImageSize, "image_height", o.image_height);
    check(kImageSize, "image_width", o.image_width);
  } else {
    check(kImageSize, "image_size", o.image_size);
  }
  check(kEvalResize, "eval_resize", o.eval_resize);
  const int longer = rectangle ? std::max(o.image_height, o.image_width) : o.image_size;
  if (o.mode == Mode::kEval && o.eval_resize < longer) {
    require("eval_resize must be at least image_size (" + std::to_string(longer) +
            ") in eval mode, got " + std::to_string(o.eval_resize));
  }
  require(CropRangeProblem("crop_scale", o.crop.scale_min, o.crop.scale_max));
  require(CropRangeProblem("crop_ratio", o.crop.ratio_min, o.crop.ratio_max));
  check(kFlipProbability, "flip_probability", o.flip_probability);
  if (o.slice.count < 1 || o.slice.index < 0 || o.slice.index >= o.slice.count) {
    require("slice=(index, count) needs count >= 1 and 0 <= index < count, got (" +
            std::to_string(o.slice.index) + ", " + std::to_string(o.slice.count) + ")");
  }
  check(kWorkers, "workers", o.workers);
  check(kPrefetchDepth, "prefetch_depth", static_cast<double>(o.prefetch_depth));
  check(kMaxSubstituteAttempts, "max_substitute_attempts", o.max_substitute_attempts);
  if (o.held_slots_timeout != std::chrono::milliseconds::max()) {  // max(): wait forever
    check(kHeldSlotsTimeout, "held_slots_timeout",
          static_cast<double>(o.held_slots_timeout.count()) / 1000.0);
  }
  if (o.jpeg.max_pixels < 1) {
    require("max_pixels must be at least 1, got " + std::to_string(o.jpeg.max_pixels));
  }
  if (o.jpeg.max_scans < 1) {
    require("max_scans must be at least 1, got " + std::to_string(o.jpeg.max_scans));
  }
  return problem;
}

struct Loader::Impl {
  std::unique_ptr<Source> source;
  LoaderOptions options;
  int workers = 1;
  std::size_t samples_per_epoch = 0;
  std::size_t batches_per_epoch = 0;
  std::size_t slot_bytes = 0;
  std::size_t image_bytes = 0;
  std::size_t chunk_size = 1;
  int height = 0;  // of every output image: image_height/width, or image_size square
  int width = 0;
  std::optional<OutputConverter> converter;  // LoaderOptions::output, unless uint8

  std::vector<std::unique_ptr<Slot>> slots;
  SpscRing<std::size_t> free_ring;
  SpscRing<Ready> ready_ring;
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
  // Where the running pipeline started: the options' first epoch and position, or Seek()'s.
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
  std::optional<Clock::time_point> held_since;
  bool wait_resumed = false;  // the last Next() timed out (its ring observation counted)

  // Metrics.
  Clock::time_point start = Clock::now();
  std::atomic<std::uint64_t> images{0}, batches{0}, bad{0}, bytes_read{0};
  std::atomic<std::uint64_t> read_ns{0}, decode_ns{0}, resize_ns{0}, wait_ns{0};
  std::atomic<std::uint64_t> ready_observations{0}, ready_sum{0};
  mutable std::mutex bad_mutex;
  std::vector<BadSample> bad_samples;

  Impl(std::unique_ptr<Source> src, LoaderOptions opts)
      : source(std::move(src)),
        options(std::move(opts)),
        free_ring(std::max<std::size_t>(options.prefetch_depth, 1)),
        ready_ring(2 * std::max<std::size_t>(options.prefetch_depth, 1) + 4) {}

  class Pipeline;

  void Validate();
  void Run(std::stop_token token);
  codecs::PixelView RowView(Slot& slot, std::size_t row);
  void DecodeChunk(Worker& worker, const Chunk& chunk, const std::stop_token& token);
  codecs::CropPlan PlanCrop(SampleRng& rng, int width, int height) const;
  std::uint64_t ResizeRaw(Worker& worker, SampleRng& rng, const RawPixels& raw,
                          const codecs::PixelView& out) const;
  codecs::DecodeReport DecodeImage(Worker& worker, SampleRng& rng,
                                   const std::vector<std::byte>& bytes, const SampleInfo& info,
                                   const codecs::PixelView& out) const;
  void DecodeOne(Worker& worker, std::uint64_t epoch, std::uint64_t sample,
                 const std::vector<std::byte>& bytes, const SampleInfo& info,
                 std::uint64_t sample_read_ns, const codecs::PixelView& out, std::int32_t& label);
  void HandleBadSample(Worker& worker, const Chunk& chunk, std::size_t position,
                       std::uint64_t sample, const std::string& reason);
  void ReadAndDecode(Worker& worker, std::uint64_t epoch, std::uint64_t sample,
                     const codecs::PixelView& out, std::int32_t& label);
  void Report(std::uint64_t epoch, std::uint64_t sample, const std::string& reason);
  void PushReady(Ready ready, const std::stop_token& token);
  std::optional<Ready> PopReady(Clock::time_point deadline);
  std::string HeldSlotsMessage() const;
  void ReturnSlot(std::size_t slot) noexcept;
  Batch HandOut(Loader* loader, std::size_t slot_index);
  void FinishPipeline();
  bool InEpochRange(std::uint64_t epoch) const;
  void CheckSeek(const LoaderState& state) const;
  void StartProducer();
  void ReclaimSlots();
};

void Loader::Impl::Validate() {
  const LoaderOptions& o = options;
  auto require = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("LoaderOptions: ") + what);
  };
  require(source != nullptr, "no source");
  require(source->size() > 0, "the source is empty");
  if (auto problem = OptionsProblem(o)) throw std::invalid_argument("LoaderOptions: " + *problem);
  const bool rectangle = o.image_height > 0 || o.image_width > 0;
  height = rectangle ? o.image_height : o.image_size;
  width = rectangle ? o.image_width : o.image_size;
  const OutputConverter output(o.output);  // throws for a bad mean or std
  if (o.output.dtype != OutputDType::kUint8) {
    require(o.layout == Layout::kNhwc,
            "a converted output needs layout kNhwc (output.layout "
            "is the converted batch's)");
    converter.emplace(output);
  }
  if (o.expected_dataset_size != 0 && o.expected_dataset_size != source->size()) {
    throw std::invalid_argument("LoaderOptions: the saved state is for a dataset of " +
                                std::to_string(o.expected_dataset_size) +
                                " samples; this source has " + std::to_string(source->size()));
  }
  require(o.first_epoch_position <= source->size(),
          "first_epoch_position is past the end of the dataset");
  position = LoaderState{o.seed, o.first_epoch, o.first_epoch_position, source->size()};
  start_epoch = o.first_epoch;
  start_position = o.first_epoch_position;
  // EpochOrder validates the slice; epoch 0 gives the sizes of every epoch.
  const EpochOrder probe(source->size(), o.seed, 0, false, o.slice, o.remainder, 0, o.locality);
  samples_per_epoch = probe.size();
  batches_per_epoch = samples_per_epoch / o.batch_size;
  if (!o.drop_last_batch && samples_per_epoch % o.batch_size != 0) ++batches_per_epoch;
  if (batches_per_epoch == 0) {
    throw std::invalid_argument("LoaderOptions: instance " + std::to_string(o.slice.index) +
                                " of " + std::to_string(o.slice.count) + " gets " +
                                std::to_string(samples_per_epoch) +
                                " samples per epoch, not one full batch of " +
                                std::to_string(o.batch_size) + " (drop_last_batch is set)");
  }
  workers = o.workers > 0 ? o.workers : UsableCores();
  image_bytes = static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * 3;
  CheckMemory(o, height, width, image_bytes);
  slot_bytes =
      image_bytes * o.batch_size + o.batch_size * (sizeof(std::int32_t) + sizeof(std::uint64_t));
  // Chunks small enough that every worker has several per batch, large enough that the
  // per-token overhead vanishes next to a decode.
  chunk_size =
      std::clamp<std::size_t>(o.batch_size / (4 * static_cast<std::size_t>(workers)), 1, 16);
}

namespace {

// The crop plan for a sample of this size, drawn from its own stream: its random crop and
// flip (train) or torchvision's Resize + CenterCrop (eval).
codecs::CropPlan PlanFor(const LoaderOptions& options, SampleRng& rng, int width, int height) {
  if (options.mode == Mode::kTrain) {
    codecs::CropPlan plan;
    plan.crop = RandomResizedCrop(width, height, options.crop, rng);
    plan.flip = DrawFlip(rng, options.flip_probability);
    return plan;
  }
  const bool rectangle = options.image_height > 0 && options.image_width > 0;
  return CenterCropAfterResize(
      width, height, options.eval_resize, rectangle ? options.image_width : options.image_size,
      rectangle ? options.image_height : options.image_size, options.eval_dct_scaling);
}

}  // namespace

codecs::CropPlan PlanSample(const LoaderOptions& options, std::uint64_t epoch, std::uint64_t sample,
                            int width, int height) {
  SampleRng rng(options.seed, epoch, sample);
  return PlanFor(options, rng, width, height);
}

codecs::PixelView Loader::Impl::RowView(Slot& slot, std::size_t row) {
  std::uint8_t* base = slot.images.data() + row * image_bytes;
  return options.layout == Layout::kNhwc ? codecs::PixelView::Interleaved(base, width, height)
                                         : codecs::PixelView::Planar(base, width, height);
}

codecs::CropPlan Loader::Impl::PlanCrop(SampleRng& rng, int width, int height) const {
  return PlanFor(options, rng, width, height);
}

// Crops and resizes raw HWC pixels into `out`; returns the resize time.
std::uint64_t Loader::Impl::ResizeRaw(Worker& worker, SampleRng& rng, const RawPixels& raw,
                                      const codecs::PixelView& out) const {
  if (raw.channels != 3) {
    throw codecs::DecodeError(
        codecs::DecodeErrorKind::kUnsupported,
        "raw tensor has " + std::to_string(raw.channels) + " channels; the loader needs 3");
  }
  const codecs::CropPlan plan = PlanCrop(rng, raw.width, raw.height);
  const auto r0 = Clock::now();
  // The filter reads the crop's pixels only, as the codecs' resizes do.
  const codecs::Rect& c = plan.crop;
  const codecs::SourceBox shown = codecs::ShownBox(plan);
  const std::ptrdiff_t stride = std::ptrdiff_t{raw.width} * 3;
  worker.resizer.Resize(
      codecs::ConstPixelView{raw.pixels + c.y * stride + std::ptrdiff_t{c.x} * 3, c.width, c.height,
                             3, stride},
      codecs::SourceBox{shown.x0 - c.x, shown.y0 - c.y, shown.x1 - c.x, shown.y1 - c.y}, out,
      plan.flip);
  return Nanos(Clock::now() - r0);
}

// Decodes a compressed image sample (encoded, indexed JPEG or coefficients) into `out`.
codecs::DecodeReport Loader::Impl::DecodeImage(Worker& worker, SampleRng& rng,
                                               const std::vector<std::byte>& bytes,
                                               const SampleInfo& info,
                                               const codecs::PixelView& out) const {
  if (info.codec == SampleCodec::kIndexedJpeg) {
    // The index comes from the source like any other bytes, so it is checked against
    // its JPEG before any offset in it is used: a damaged one is a bad sample
    // (DecodeError kCorrupt), like a damaged file. Its geometry is the SOF's, so the
    // crop plan is the one the plain path would draw for the same file.
    const std::span<const std::byte> sample(bytes);
    if (info.index_size == 0 || info.index_size >= sample.size()) {
      throw codecs::DecodeError(codecs::DecodeErrorKind::kCorrupt,
                                "interval index of " + std::to_string(info.index_size) +
                                    " bytes does not fit the " + std::to_string(sample.size()) +
                                    "-byte sample");
    }
    const auto jpeg = sample.subspan(info.index_size);
    const codecs::JpegIntervalIndex index = codecs::ParseIndex(sample.first(info.index_size), jpeg);
    return worker.decoder.DecodeInto(jpeg, index, PlanCrop(rng, index.width, index.height), out);
  }
  if (info.codec == SampleCodec::kCoefficients) {
    // The header is read first (and checked: a damaged record is a bad sample) for the
    // size that the crop plan is drawn from, as the plain path draws it from the SOF.
    const codecs::ImageInfo image = codecs::ReadCoefficientInfo(bytes, options.jpeg.max_pixels);
    return worker.coefficients.DecodeInto(bytes, PlanCrop(rng, image.width, image.height), out);
  }
  // kEncoded: the format is what the bytes say, whatever the file is named.
  const std::span<const std::byte> encoded(bytes);
  auto planner = [&](const codecs::ImageInfo& image) {
    return PlanCrop(rng, image.width, image.height);
  };
  if (codecs::IsPng(encoded)) return worker.png.DecodeInto(encoded, planner, out);
  if (const char* what = codecs::SniffNonJpeg(encoded)) {
    if (codecs::HasDamagedPngSignature(encoded)) {
      throw codecs::DecodeError(codecs::DecodeErrorKind::kCorrupt,
                                std::string("corrupt PNG: ") + what);
    }
    throw codecs::DecodeError(codecs::DecodeErrorKind::kUnsupported,
                              std::string(what) + " (tilefeed decodes JPEG and PNG)");
  }
  return worker.decoder.decoder().DecodeInto(encoded, planner, out);
}

// Decodes `sample`, read into `bytes` and `info` in `sample_read_ns`, into `out`.
// Throws DecodeError or std::exception on a bad sample.
void Loader::Impl::DecodeOne(Worker& worker, std::uint64_t epoch, std::uint64_t sample,
                             const std::vector<std::byte>& bytes, const SampleInfo& info,
                             std::uint64_t sample_read_ns, const codecs::PixelView& out,
                             std::int32_t& label) {
  SampleTimes t;
  const auto t1 = Clock::now();
  t.read_ns = sample_read_ns;
  t.bytes = bytes.size();

  SampleRng rng(options.seed, epoch, sample);
  switch (info.codec) {
    case SampleCodec::kEncoded:
    case SampleCodec::kIndexedJpeg:
    case SampleCodec::kCoefficients: {
      const codecs::DecodeReport report = DecodeImage(worker, rng, bytes, info, out);
      const std::uint64_t total = Nanos(Clock::now() - t1);
      t.resize_ns = static_cast<std::uint64_t>(report.resize_seconds * 1e9);
      t.decode_ns = total > t.resize_ns ? total - t.resize_ns : 0;
      break;
    }
    case SampleCodec::kRawHwc: {
      const std::size_t expected =
          static_cast<std::size_t>(info.height) * info.width * info.channels;
      if (info.height <= 0 || info.width <= 0 || bytes.size() != expected) {
        throw codecs::DecodeError(
            codecs::DecodeErrorKind::kCorrupt,
            "raw sample of " + std::to_string(bytes.size()) + " bytes does not match its shape");
      }
      t.resize_ns = ResizeRaw(worker, rng,
                              {reinterpret_cast<const std::uint8_t*>(bytes.data()), info.width,
                               info.height, info.channels},
                              out);
      break;
    }
    case SampleCodec::kLz4Raw: {
      const codecs::RawInfo raw = codecs::ReadRawInfo(bytes, options.jpeg.max_pixels);
      worker.raw.resize(raw.pixel_bytes());
      codecs::DecodeRawInto(bytes, worker.raw, options.jpeg.max_pixels);
      const auto t2 = Clock::now();
      t.decode_ns = Nanos(t2 - t1);
      t.resize_ns =
          ResizeRaw(worker, rng, {worker.raw.data(), raw.width, raw.height, raw.channels}, out);
      break;
    }
  }
  label = info.label;
  read_ns.fetch_add(t.read_ns, std::memory_order_relaxed);
  decode_ns.fetch_add(t.decode_ns, std::memory_order_relaxed);
  resize_ns.fetch_add(t.resize_ns, std::memory_order_relaxed);
  bytes_read.fetch_add(t.bytes, std::memory_order_relaxed);
}

// Reads `sample` alone and decodes it into `out`. Throws SourceError, DecodeError or
// std::exception on a bad sample.
void Loader::Impl::ReadAndDecode(Worker& worker, std::uint64_t epoch, std::uint64_t sample,
                                 const codecs::PixelView& out, std::int32_t& label) {
  const auto t0 = Clock::now();
  const SampleInfo info = source->Read(sample, worker.bytes);
  DecodeOne(worker, epoch, sample, worker.bytes, info, Nanos(Clock::now() - t0), out, label);
}

void Loader::Impl::Report(std::uint64_t epoch, std::uint64_t sample, const std::string& reason) {
  BadSample bad_sample{epoch, sample, source->Describe(sample), reason};
  bad.fetch_add(1, std::memory_order_relaxed);
  if (options.on_bad_sample) options.on_bad_sample(bad_sample);
  std::lock_guard lock(bad_mutex);
  if (bad_samples.size() < kMaxKeptBadSamples) bad_samples.push_back(std::move(bad_sample));
}

// A chunk buffer larger than this is freed after its chunk. Without a cap each of a worker's
// chunk buffers would grow, over many epochs, to the largest sample ever drawn at its
// position (a 1.6 MB outlier on the ImageNet-like corpus, ~48 buffers over 3 threads): memory
// that creeps up for minutes. 256 KiB holds ~97 % of ImageNet JPEGs; the rest cost one
// allocation per read, nothing next to their decode.
constexpr std::size_t kRetainedSampleBytes = std::size_t{256} * 1024;

void Loader::Impl::DecodeChunk(Worker& worker, const Chunk& chunk, const std::stop_token& token) {
  // A source that merges reads gets the chunk's samples at once, one buffer each, when the
  // order puts neighbouring records together (no shuffle, or a shard-local one): under a
  // full shuffle a chunk's records are almost never close, and reading 16 samples ahead of
  // their decode only costs cache (measured: decode 2-3 % slower on shards, 1.00 records
  // per read). Otherwise samples are read and decoded one at a time through buffer 0,
  // which then only grows to the largest sample, as a single buffer per worker would.
  const bool batched = source->merges_reads() && (!options.shuffle || options.locality.block > 0);
  // Runs however this chunk ends (done, stopped, or a kFail error).
  struct TrimBuffers {
    std::vector<std::vector<std::byte>>& buffers;
    bool batched;
    ~TrimBuffers() {
      if (!batched) return;
      for (std::vector<std::byte>& b : buffers) {
        if (b.capacity() > kRetainedSampleBytes) std::vector<std::byte>().swap(b);
      }
    }
  } trim{worker.chunk_bytes, batched};
  Slot& slot = *slots[chunk.slot];
  const EpochOrder& order = *chunk.order;
  if (token.stop_requested()) return;
  const std::size_t count = chunk.end - chunk.begin;
  const std::size_t buffers = batched ? count : 1;
  worker.chunk_samples.resize(count);
  if (worker.chunk_bytes.size() < buffers) worker.chunk_bytes.resize(buffers);
  if (worker.chunk_reads.size() < buffers) worker.chunk_reads.resize(buffers);
  for (std::size_t i = 0; i < count; ++i) worker.chunk_samples[i] = order[chunk.begin + i];
  std::uint64_t read_ns = 0;
  if (batched) {
    const auto read_start = Clock::now();
    source->ReadMany(worker.chunk_samples, std::span(worker.chunk_bytes).first(count),
                     std::span(worker.chunk_reads).first(count));
    read_ns = Nanos(Clock::now() - read_start) / count;
  }
  for (std::size_t position = chunk.begin; position < chunk.end; ++position) {
    if (token.stop_requested()) return;
    const std::size_t row = position - chunk.batch_begin;
    const codecs::PixelView out = RowView(slot, row);
    const std::size_t i = position - chunk.begin;
    const std::size_t b = batched ? i : 0;
    const std::uint64_t sample = worker.chunk_samples[i];
    if (!batched) {
      const auto read_start = Clock::now();
      ReadOne(*source, sample, worker.chunk_bytes[0], worker.chunk_reads[0]);
      read_ns = Nanos(Clock::now() - read_start);
    }
    const ReadResult& read = worker.chunk_reads[b];
    std::string reason = read.error;
    if (read.ok) {
      try {
        DecodeOne(worker, chunk.epoch, sample, worker.chunk_bytes[b], read.info, read_ns, out,
                  slot.labels[row]);
        slot.indices[row] = sample;
        images.fetch_add(1, std::memory_order_relaxed);
        continue;
      } catch (const SourceError& e) {
        reason = e.reason();
      } catch (const std::exception& e) {
        reason = e.what();
      }
    }
    Report(chunk.epoch, sample, reason);
    HandleBadSample(worker, chunk, position, sample, reason);
  }
  if (converter) {  // the chunk's rows, while they are still in this core's cache
    const std::size_t first = chunk.begin - chunk.batch_begin;
    const std::size_t bytes = converter->ImageBytes(height, width);
    converter->Convert(std::span<const std::uint8_t>(slot.images).subspan(first * image_bytes),
                       count, height, width, std::span(slot.output).subspan(first * bytes));
  }
}

// After `sample` at `position` failed with `reason`: under kSkip fills its row with the
// next sample of this instance's epoch order that decodes (a pure function of the data,
// so every run picks the same one); under kFail, or if none does, records the batch's
// error (the lowest row's wins).
void Loader::Impl::HandleBadSample(Worker& worker, const Chunk& chunk, std::size_t position,
                                   std::uint64_t sample, const std::string& reason) {
  Slot& slot = *slots[chunk.slot];
  const EpochOrder& order = *chunk.order;
  const std::size_t row = position - chunk.batch_begin;
  std::string failure = source->Describe(sample) + ": " + reason;
  if (options.bad_sample_policy != BadSamplePolicy::kFail) {
    const codecs::PixelView out = RowView(slot, row);
    const int attempts =
        static_cast<int>(std::min<std::size_t>(options.max_substitute_attempts, order.size()));
    for (int k = 1; k <= attempts; ++k) {
      const std::uint64_t other = order[(position + k) % order.size()];
      try {
        ReadAndDecode(worker, chunk.epoch, other, out, slot.labels[row]);
        slot.indices[row] = other;
        slot.substituted.fetch_add(1, std::memory_order_relaxed);
        images.fetch_add(1, std::memory_order_relaxed);
        return;
      } catch (const std::exception&) {
        // Reported when its own position comes up.
      }
    }
    failure +=
        " (and no decodable substitute among the next " + std::to_string(attempts) + " samples)";
  }
  std::lock_guard lock(slot.error_mutex);
  if (slot.error.empty() || row < slot.error_row) {
    slot.error_row = row;
    slot.error = "epoch " + std::to_string(chunk.epoch) + ", sample " + std::to_string(sample) +
                 ": " + failure;
  }
}

void Loader::Impl::PushReady(Ready ready, const std::stop_token& token) {
  // A trivially copyable value: each try pushes a fresh copy.
  while (!ready_ring.PushFor(Ready{ready}, kPollInterval, token)) {
    if (token.stop_requested()) return;
  }
}

// One run of the pipeline: the three stages of the design note and the state each carries
// from one call to the next. The plan fields are touched only by the serial plan stage.
// oneTBB's hand-off of a token from stage to stage orders that token's writes before the
// next stage's reads, as it orders a serial stage's successive calls. ThreadSanitizer
// cannot see those hand-offs inside the uninstrumented libtbb, so under TSan the arena
// runs every stage on the producer thread (kUnderThreadSanitizer); what crosses threads
// there is the rings' protocol, which carries its own acquire/release.
class Loader::Impl::Pipeline {
 public:
  Pipeline(Impl& loader, std::stop_token token)
      : loader_(loader),
        token_(std::move(token)),
        arena_(kUnderThreadSanitizer ? 1 : loader.workers),
        workers_([&loader] { return Worker(loader.options.jpeg); }),
        chunks_(static_cast<std::size_t>(loader.workers) * 4 + 2),
        epoch_(loader.start_epoch) {}

  // Runs the stages until the last epoch is published, stop is requested, or a stage throws.
  void Run() {
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

 private:
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
    if (position_ == batch_end_ && !StartBatch()) return std::nullopt;
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
    if (o.epochs != 0 && epoch_ >= o.first_epoch + o.epochs) return false;
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
  bool StartBatch() {
    std::optional<std::size_t> free;
    while (!(free = loader_.free_ring.PopFor(kPollInterval, token_))) {
      if (token_.stop_requested()) return false;
    }
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

Loader::Loader(std::unique_ptr<Source> source, LoaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(source), std::move(options))) {
  Impl& s = *impl_;
  s.Validate();
  const std::size_t batch_size = s.options.batch_size;
  const std::size_t depth = s.options.prefetch_depth;
  for (std::size_t i = 0; i < depth; ++i) {
    auto slot = std::make_unique<Slot>();
    if (s.options.slot_memory) {
      const SlotMemory::Spans spans =
          s.options.slot_memory->Slot(i, depth, batch_size, s.image_bytes);
      if (spans.images.size() < s.image_bytes * batch_size || spans.labels.size() < batch_size ||
          spans.indices.size() < batch_size) {
        throw std::invalid_argument("LoaderOptions: slot_memory gave slot " + std::to_string(i) +
                                    " less memory than a batch of " + std::to_string(batch_size) +
                                    " needs");
      }
      slot->images = spans.images.first(s.image_bytes * batch_size);
      slot->labels = spans.labels.first(batch_size);
      slot->indices = spans.indices.first(batch_size);
    } else {
      slot->owned_images.resize(s.image_bytes * batch_size);
      slot->owned_labels.resize(batch_size);
      slot->owned_indices.resize(batch_size);
      slot->images = slot->owned_images;
      slot->labels = slot->owned_labels;
      slot->indices = slot->owned_indices;
    }
    if (s.converter) {
      slot->output.resize(s.converter->ImageBytes(s.height, s.width) * batch_size);
    }
    s.slots.push_back(std::move(slot));
    [[maybe_unused]] const bool pushed = s.free_ring.TryPush(std::size_t{i});
    assert(pushed);
  }
  s.StartProducer();
}

Loader::~Loader() { Stop(); }

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
  return {NextStatus::kBatch, s.HandOut(this, ready->slot)};
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
  batch.height_ = height;
  batch.width_ = width;
  batch.layout_ = options.layout;
  batch.substituted_ = slot.substituted.load(std::memory_order_relaxed);
  batch.images_ = std::span(slot.images.data(), image_bytes * slot.size);
  batch.labels_ = std::span(slot.labels.data(), slot.size);
  batch.sample_indices_ = std::span(slot.indices.data(), slot.size);
  batch.output_ = std::span(slot.output).first(slot.output.size() / options.batch_size * slot.size);
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
    if (handed_out.load(std::memory_order_acquire) < slots.size()) {
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
        handed_out.load(std::memory_order_acquire) >= slots.size()) {
      held_since.reset();  // not sticky: the next call waits afresh
      throw SlotsHeldError(HeldSlotsMessage());
    }
    if (Clock::now() >= deadline) return std::nullopt;
  }
}

std::string Loader::Impl::HeldSlotsMessage() const {
  const std::string depth = std::to_string(slots.size());
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
  return options.epochs == 0 ||
         (epoch >= options.first_epoch && epoch - options.first_epoch < options.epochs);
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
  for (std::size_t i = 0; i < slots.size(); ++i) {
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

void LoaderState::ApplyTo(LoaderOptions& options) const {
  options.seed = seed;
  options.first_epoch = epoch;
  options.first_epoch_position = position;
  options.expected_dataset_size = dataset_size;
}

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
  m.slots = s.slots.size();
  m.slot_bytes = s.slot_bytes;
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
