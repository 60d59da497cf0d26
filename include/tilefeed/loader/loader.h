#pragma once

// The loader: turns a Source into a stream of uint8 batches, in order, for one instance.
//
// A Loader owns a fixed set of batch slots (prefetch_depth of them, each holding one
// batch of images, labels and sample indices) and a pool of oneTBB workers that read
// and decode samples straight into those slots. Finished slots go through a bounded
// lock-free ring to the consumer in batch order; a slot comes back when the consumer
// drops its Batch. Memory in flight is therefore prefetch_depth x batch bytes, and a
// slow consumer simply makes the workers wait (back-pressure).
//
// Epoch e's batches are a pure function of (seed, e, source size, instance slice): which
// samples, their order, their crops and flips. Worker count and scheduling change
// nothing. The loader runs ahead across epoch boundaries, so a new epoch starts with
// full slots; Next() returns nullopt once at the end of each epoch.
//
// A sample that cannot be read or decoded is reported to the on_bad_sample sink with
// its path or record id and the reason. Under BadSamplePolicy::kSkip it is replaced by
// the next decodable sample of this instance's epoch order (deterministically, so all
// instances keep delivering the same number of full batches); under kFail the batch
// that holds it surfaces as a LoaderError from Next() on the consumer's thread.
//
// Next(timeout) waits at most `timeout` and consumes nothing when it times out, so a
// consumer that must stay responsive (Python, servicing Ctrl-C) waits in slices. Seek()
// moves a running loader to a saved LoaderState without rebuilding it.
//
// Thread safety: Next(), Seek(), state(), ended(), Stop(), the Batch destructor,
// metrics() and bad_samples() may be called from any thread; Next(), Seek(), state()
// and ended() are serialized internally (each waits for one in progress). The sink is
// called from worker threads, concurrently. Destroying the Loader (or Stop()) stops the
// workers promptly and joins them; Batches must not outlive their Loader.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tilefeed/codecs/jpeg.h"
#include "tilefeed/loader/augment.h"
#include "tilefeed/loader/output_format.h"
#include "tilefeed/loader/sampler.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {

enum class Mode {
  kTrain,  // LoaderOptions::augment: RandomResizedCrop, random horizontal flip, pixel ops
  kEval,   // resize the shorter side to eval_resize, then centre crop; no flip
};
enum class BadSamplePolicy { kSkip, kFail };

// The size of one output image.
struct ImageSize {
  int height = 0;
  int width = 0;
  std::size_t bytes() const { return static_cast<std::size_t>(height) * width * 3; }  // uint8 HWC
  friend bool operator==(const ImageSize&, const ImageSize&) = default;
};

// The output image size of each epoch, a pure function of (schedule, epoch), so instances,
// readers and a resumed run agree. One text form (docs/options.md, "Image size"), read by
// Parse() and written back by text() -- what the CLI, Python and the reader agreement use:
//   "224", "192x256"        one size (a square side, or HEIGHTxWIDTH), every epoch
//   "160,8:224"             SIZE from epoch 0, then EPOCH:SIZE from that epoch on
//   "ramp:160,192,2,10,32"  FFCV's ramp START,END,FIRST,LAST[,STEP]: START until epoch FIRST,
//                           END from LAST on, between them the linear interpolation rounded
//                           (half to even) to a multiple of STEP (default 32). START <= END.
// A plain value; thread-safe to read.
class SizeSchedule {
 public:
  SizeSchedule(int side = 224);  // NOLINT(google-explicit-constructor): a square, every epoch
  explicit SizeSchedule(ImageSize size);  // one size, every epoch
  // Throws std::invalid_argument "image_size 'TEXT': WHY" for text that is not a schedule
  // or has a size outside the option table's range.
  static SizeSchedule Parse(std::string_view text);
  ImageSize At(std::uint64_t epoch) const;
  ImageSize Largest() const;  // the size of the most pixels any epoch has
  bool fixed() const { return steps_.size() == 1; }
  const std::string& text() const { return text_; }
  // Epoch and size of each change, the first at epoch 0.
  const std::vector<std::pair<std::uint64_t, ImageSize>>& steps() const { return steps_; }
  friend bool operator==(const SizeSchedule& a, const SizeSchedule& b) {
    return a.text_ == b.text_;
  }

 private:
  std::vector<std::pair<std::uint64_t, ImageSize>> steps_;
  std::string text_;
};

// A sample that could not be used, as reported to the sink and by bad_samples().
struct BadSample {
  std::uint64_t epoch = 0;
  std::uint64_t sample = 0;  // index in the source
  std::string where;         // file path or record id
  std::string reason;
};

// Memory for the loader's batch slots, for a caller that wants the workers to decode
// straight into memory it owns (e.g. a shared-memory segment another process reads in
// place, transport::SharedSlots). The default (no SlotMemory) is that the loader allocates
// its slots itself.
class SlotMemory {
 public:
  struct Spans {
    std::span<std::uint8_t> images;    // >= samples x image_bytes
    std::span<std::int32_t> labels;    // >= samples
    std::span<std::uint64_t> indices;  // >= samples
  };
  virtual ~SlotMemory() = default;
  // The memory of slot `slot` of `slots` (= prefetch_depth) for batches of up to `samples`
  // images of `image_bytes` each. Called by the Loader's constructor, once per slot, before
  // any worker starts. The spans must not overlap each other or another slot's, and must
  // stay valid (and be written by nobody else) while the Loader lives. A span that is too
  // short makes the constructor throw std::invalid_argument. Batch::slot() tells which
  // slot a batch occupies.
  virtual Spans Slot(std::size_t slot, std::size_t slots, std::size_t samples,
                     std::size_t image_bytes) = 0;
};

// LoaderOptions::workers and prefetch_depth values that hand the choice to the loader: a
// closed loop adds decode threads while the consumer waits for batches (within cpu_share),
// removes them while the ring stays full, and deepens prefetch while batches come in bursts or
// the consumer waits and no thread more is allowed (within memory_budget). Batches are the
// same whatever it chooses.
inline constexpr int kAutoWorkers = -1;
inline constexpr std::size_t kAutoDepth = 0;

// The ranges are the shared option table's (option_specs.h), checked by OptionsProblem().
struct LoaderOptions {
  std::size_t batch_size = 256;  // samples per batch
  // Output images are HxWx3 with (H, W) image_size.At(epoch) (torchvision's
  // RandomResizedCrop((h, w)) / CenterCrop((h, w))). kEval takes one size only.
  SizeSchedule image_size;
  Mode mode = Mode::kTrain;
  int eval_resize = 256;  // kEval: the shorter side is resized to this before the crop
  // kTrain: the transforms, torchvision's, in order (augment.h): RandomResizedCrop first,
  // optionally RandomHorizontalFlip, then pixel ops on the uint8 crop. kEval: the default.
  AugmentSpec augment = DefaultAugment();
  // What the batch looks like: element type, layout and normalisation (output_format.h's
  // contract). kUint8 (the default): images() in output.layout, no conversion; any other
  // dtype: images() NHWC, converted by the workers into output() in output.layout.
  OutputFormat output;
  // Decode threads; 0 = one per core this process may run on (its CPU affinity). oneTBB
  // runs at most that many at once, whatever is asked. kAutoWorkers: the loader tunes it.
  int workers = 0;
  // Batch slots; memory in flight = depth x batch bytes. kAutoDepth: the loader tunes it.
  std::size_t prefetch_depth = 4;
  // The two budgets of the tuner (docs/options.md, "Autotuning"): the share of this process's
  // cores' time the decode threads may take, and the bytes all batch slots may take (0: 3/4 of
  // the memory this process may use). A fixed prefetch_depth must fit memory_budget too.
  double cpu_share = 0.75;
  std::uint64_t memory_budget = 0;
  std::uint64_t seed = 0;
  bool shuffle = true;
  OrderLocality locality;                 // shuffle: block-local order (sampler.h)
  InstanceSlice slice;                    // this instance's index and the instance count
  Remainder remainder = Remainder::kPad;  // how the epoch is split among instances
  bool drop_last_batch = false;           // drop this instance's final partial batch
  // Epochs to produce, from the first (the start state's epoch, else 0); 0 = no end.
  std::uint64_t epochs = 0;
  BadSamplePolicy bad_sample_policy = BadSamplePolicy::kSkip;
  int max_substitute_attempts = 64;  // kSkip: samples tried before giving up on a batch
  // While every slot is held by batches Next() already returned and nobody releases one,
  // Next() waits this long, then throws SlotsHeldError: a consumer that keeps
  // prefetch_depth batches itself would otherwise wait forever. The default, max(), waits
  // forever, for consumers whose batches another thread or process releases (the
  // transport's sender, IO tiles); a consumer that owns its batches sets a bound
  // (Python's Loader: 10 s).
  std::chrono::milliseconds held_slots_timeout = std::chrono::milliseconds::max();
  codecs::JpegOptions jpeg;  // pixel/scan limits, decode_scaling, IDCT choice
  std::function<void(const BadSample&)> on_bad_sample;  // sink; called from workers
  std::shared_ptr<SlotMemory> slot_memory;              // null: the loader allocates its slots
};

// Whether `options` hold together on their own, before any source is opened: every range of
// the shared option table (option_specs.h) and the rules between fields. nullopt, or the
// first problem as "NAME must be RANGE, got VALUE" (NAME the field, which is also Python's
// keyword). The one check of a loader's options: the constructor refuses options with a
// problem (std::invalid_argument "LoaderOptions: PROBLEM"), and Python calls it before it
// opens a dataset.
std::optional<std::string> OptionsProblem(const LoaderOptions& options);

// What the loader draws for `sample` of `epoch` from a width x height image: which source
// pixels its batch row shows, resized how and whether flipped, then the pixel ops it got
// (augment.h's contracts). Lets tests and tools reproduce a row with torchvision. Throws
// what RandomResizedCrop and CenterCropAfterResize throw.
struct SamplePlan {
  codecs::CropPlan crop;
  std::vector<PixelOp> ops;
};
SamplePlan PlanSample(const LoaderOptions& options, std::uint64_t epoch, std::uint64_t sample,
                      int width, int height);

// Where a loader stands, for checkpoints: the next batch continues at global `position`
// of `epoch`'s permutation (samples already delivered by all instances together). It does
// not depend on the instance count: restoring it with the same count continues byte for
// byte where an uninterrupted run would be; with another count, the rest of the epoch is
// split among the new instances and no sample is lost or repeated (EpochOrder's rule).
struct LoaderState {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;
  std::uint64_t dataset_size = 0;

  // One line of text, e.g. "tilefeed-loader-state v1 seed=0 epoch=3 position=5120 size=10000".
  std::string Serialize() const;
  // Parses Serialize()'s output. Throws std::invalid_argument naming what is wrong.
  static LoaderState Parse(const std::string& text);
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

// A failure that ends iteration: a bad sample under kFail (what() names it and gives
// the reason), or an error that left the loader unable to continue.
class LoaderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Next() found every slot held by batches it had returned and not yet released, and none
// came back within held_slots_timeout: the consumer keeps prefetch_depth batches alive.
// Not sticky: once a batch is released, Next() continues where it was.
class SlotsHeldError : public LoaderError {
 public:
  using LoaderError::LoaderError;
};

// What Next(timeout) found.
enum class NextStatus {
  kBatch,       // a batch of the current epoch
  kEndOfEpoch,  // the current epoch is over; the following call starts the next one
  kEnded,       // no more batches at all (ended() is true)
  kTimedOut,    // nothing within the timeout; nothing was consumed
};

class Loader;

// One batch, viewing a slot of the loader. Move-only; the slot returns to the loader
// when the Batch is destroyed or ReturnSlot() is called, after which its spans are invalid.
class Batch {
 public:
  Batch() = default;
  ~Batch() { ReturnSlot(); }
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t index() const { return index_; }  // batch number within the epoch
  std::size_t size() const { return size_; }      // samples; the last batch may be short
  int height() const { return height_; }
  int width() const { return width_; }
  int channels() const { return 3; }
  Layout layout() const { return layout_; }
  // size() images, uint8, in layout(): output.layout, or NHWC when output() is converted.
  std::span<std::uint8_t> images() const { return images_; }
  std::span<const std::int32_t> labels() const { return labels_; }
  std::span<const std::uint64_t> sample_indices() const { return sample_indices_; }
  // size() images converted per LoaderOptions::output (ElementSize(dtype) bytes per
  // element, its layout); empty when output.dtype is kUint8. Valid as long as images().
  std::span<std::byte> output() const { return output_; }
  std::size_t substituted() const { return substituted_; }  // bad samples replaced in this batch
  // The slot it occupies, in [0, prefetch_depth) (see SlotMemory).
  std::size_t slot() const { return slot_; }
  // Returns the slot now; the Batch becomes empty.
  void ReturnSlot() noexcept;

 private:
  friend class Loader;
  Loader* loader_ = nullptr;
  std::size_t slot_ = 0;
  std::uint64_t epoch_ = 0;
  std::uint64_t index_ = 0;
  std::size_t size_ = 0;
  int height_ = 0;
  int width_ = 0;
  Layout layout_ = Layout::kNhwc;
  std::size_t substituted_ = 0;
  std::span<std::uint8_t> images_;
  std::span<const std::int32_t> labels_;
  std::span<const std::uint64_t> sample_indices_;
  std::span<std::byte> output_;
};

// A snapshot of what the loader has done since it started.
struct LoaderMetrics {
  double seconds = 0;             // since the loader started
  std::uint64_t images = 0;       // samples written into slots (substitutes included)
  std::uint64_t batches = 0;      // batches handed to the consumer
  std::uint64_t bad_samples = 0;  // samples reported as bad
  std::uint64_t bytes_read = 0;   // encoded bytes read from the source
  double images_per_second = 0;   // images / seconds
  double read_seconds = 0;        // summed over workers: Source::Read
  double decode_seconds = 0;      // summed over workers: decoding, resize excluded
  double resize_seconds = 0;      // summed over workers: the final resize / copy
  double wait_seconds = 0;        // consumer time blocked in Next()
  double mean_ready_batches = 0;  // ready slots seen by Next(), averaged (ring occupancy)
  std::size_t slots = 0;          // prefetch_depth (the tuner's, now)
  std::size_t slot_bytes = 0;     // bytes of one batch slot (of the schedule's largest size)
  int threads = 0;                // decode threads now (the tuner's choice under auto)
  int cores = 0;                  // the cores this process may run on
  // Why the tuner last moved ("" without auto): start, waited, ring full, bursty, share
  // cap, budget cap, forced.
  std::string_view tuned = {};
  std::uint64_t retunes = 0;  // settings the tuner changed
};

namespace detail {
struct TunerAccess;  // the tests' hook into the tuner (loader/tuner.h)
}

class Loader {
 public:
  // Starts the workers at `start` (a checkpoint's state(): its seed replaces options.seed,
  // and the first Next() continues at its epoch and position), else at epoch 0. Throws
  // std::invalid_argument for bad options, an instance slice that holds no batch, or a start
  // state of another dataset size or past the dataset's end.
  Loader(std::unique_ptr<Source> source, LoaderOptions options,
         std::optional<LoaderState> start = std::nullopt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of the current epoch, or nullopt at the end of the epoch (the
  // following call starts the next one) or once `epochs` epochs are done. Blocks while
  // the next batch is being decoded. Throws LoaderError (kFail policy, or a dead
  // pipeline); after that every call throws it again. Throws SlotsHeldError (see
  // held_slots_timeout) when the caller's own batches hold every slot.
  std::optional<Batch> Next();

  // Next() that waits for at most about `timeout` (0: only what is ready now).
  // kTimedOut consumes nothing and changes no state(): the next call continues exactly
  // where this one was, so batches are those of a loader that never timed out. `batch` is
  // set only with kBatch. Throws what Next() throws.
  struct NextResult {
    NextStatus status = NextStatus::kTimedOut;
    std::optional<Batch> batch;
  };
  NextResult Next(std::chrono::milliseconds timeout);

  // True once the loader has no more batches at all: the end of its last epoch was
  // reported (epochs != 0), Stop() was called, or Next() threw LoaderError (not
  // SlotsHeldError). Next() then returns nullopt (kEnded) or throws that error again.
  bool ended() const;

  // Stops the workers and joins them; Next() then returns nullopt. Idempotent.
  void Stop();

  // For a fork() of this process (a thread pool does not survive one): stops and joins the
  // workers, keeping state() and the batches handed out; batches decoded ahead are dropped.
  // While paused, Next(timeout) times out (Next() waits). Resume() restarts the workers at state(),
  // so the batches that follow are those an unpaused loader would have given. Both are idempotent
  // and serialized with Next() and Seek(); a Seek() also resumes.
  void Pause();
  void Resume();

  // The state after the last batch Next() returned (or at the end of an epoch, the start
  // of the next one): save it with a checkpoint and start a Loader at it, or Seek() to it.
  LoaderState state() const;

  // Continues from `state`: the batches after it are byte for byte those of a new Loader
  // started at `state` with options(), and state() becomes `state`. The workers are
  // stopped, batches decoded ahead are dropped and the pipeline restarts at the state.
  // Batches returned before stay valid: their slots rejoin the pipeline when dropped. The
  // range of epochs does not move: with epochs != 0, a state outside [first_epoch(),
  // first_epoch() + epochs) leaves the loader ended(). Clears a LoaderError (the pipeline
  // is new). Throws std::invalid_argument naming what differs for a state of another seed
  // or dataset size, or a position past the dataset's end; std::logic_error after Stop().
  void Seek(const LoaderState& state);

  // The first epoch of the range this loader produces: its start state's epoch, else 0.
  std::uint64_t first_epoch() const;
  std::size_t batches_per_epoch() const;
  std::size_t samples_per_epoch() const;  // this instance's share, padded
  const Source& source() const;
  const LoaderOptions& options() const;
  LoaderMetrics metrics() const;
  // The bad samples reported so far (the first 10000; metrics() counts them all).
  std::vector<BadSample> bad_samples() const;

  // Iterates the batches of the current epoch: `for (Batch& b : loader)`.
  class Iterator {
   public:
    explicit Iterator(Loader* loader) : loader_(loader) { Advance(); }
    Iterator() = default;
    Batch& operator*() { return *batch_; }
    Iterator& operator++() {
      Advance();
      return *this;
    }
    bool operator==(const Iterator& other) const {
      return !batch_.has_value() && !other.batch_.has_value();
    }

   private:
    void Advance() {
      batch_.reset();
      if (loader_ != nullptr) batch_ = loader_->Next();
    }
    Loader* loader_ = nullptr;
    std::optional<Batch> batch_;
  };
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  friend class Batch;
  friend class SampleDecoder;
  friend struct detail::TunerAccess;
  void Release(std::size_t slot) noexcept;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
struct Worker;
}

// Samples decoded one at a time on the calling thread exactly as a Loader with this source and
// options writes them into its batches, to check another process's. One thread at a time.
class SampleDecoder {
 public:
  // Throws what Loader's constructor throws for bad options.
  SampleDecoder(std::unique_ptr<Source> source, LoaderOptions options);
  ~SampleDecoder();
  const Source& source() const;
  // Sample `sample` as epoch `epoch` shows it, valid until the next call. Throws SourceError
  // or what the codecs throw. REQUIRES: sample < source().size().
  std::span<const std::uint8_t> Decode(std::uint64_t epoch, std::uint64_t sample);

 private:
  std::unique_ptr<Loader::Impl> impl_;
  std::unique_ptr<detail::Worker> worker_;
  std::vector<std::uint8_t> pixels_;
};

// For fork(): waits until oneTBB's worker threads have exited, so that a child process
// starts with no thread pool and builds its own on first use. True when none is left; false
// when something still uses the pool (a Loader not Pause()d or Stop()ped, a thread inside a
// oneTBB algorithm, another thread that ran one and still lives), in which case a child
// cannot use oneTBB. Call it on the forking thread, after pausing every Loader; the next
// Resume() or oneTBB use in this process starts a new pool.
bool ReleaseWorkerThreads();

}  // namespace tilefeed::loader
