// The decode stage of the Loader's pipeline: the crop plan of each sample, its decode or
// resize into its row of a slot, the timing of each part, and the bad-sample policy
// (substitute under kSkip, fail the batch under kFail). See the design note in loader.cc.

#include <algorithm>

#include "codecs/raw.h"
#include "loader/loader_impl.h"
#include "loader/range_file.h"

namespace tilefeed::loader {

using detail::Chunk;
using detail::Clock;
using detail::Nanos;
using detail::RawPixels;
using detail::SampleTimes;
using detail::Slot;
using detail::Worker;

namespace {

constexpr std::size_t kMaxKeptBadSamples = 10000;

// The crop plan for a sample of this size, drawn from its own stream: its random crop and
// flip (train: augment's first two ops) or torchvision's Resize + CenterCrop (eval).
codecs::CropPlan PlanFor(const LoaderOptions& options, SampleRng& rng, int width, int height) {
  if (options.mode == Mode::kTrain) {
    const AugmentOp& crop = options.augment.front();
    codecs::CropPlan plan;
    plan.crop = RandomResizedCrop(
        width, height, {crop.scale_min, crop.scale_max, crop.ratio_min, crop.ratio_max}, rng);
    const bool flips =
        options.augment.size() > 1 && options.augment[1].kind == AugmentKind::kRandomHorizontalFlip;
    plan.flip = flips && DrawFlip(rng, options.augment[1].p);
    return plan;
  }
  const ImageSize size = options.image_size.At(0);  // kEval: one size
  return CenterCropAfterResize(width, height, options.eval_resize, size.width, size.height,
                               options.jpeg.decode_scaling == codecs::DecodeScaling::kFast);
}

// The pixel ops of a train sample, drawn after its crop and flip, applied to its row `out`.
void AugmentRow(const LoaderOptions& options, SampleRng& rng, const codecs::PixelView& out,
                codecs::ImageOpScratch& scratch, std::vector<std::uint8_t>& interleaved) {
  if (options.mode != Mode::kTrain) return;
  const std::vector<PixelOp> ops = DrawPixelOps(options.augment, out.width, out.height, rng);
  if (ops.empty() || out.interleaved()) return ApplyPixelOps(ops, out, scratch);
  interleaved.resize(std::size_t{3} * out.width * out.height);  // a planar row: ops on a copy
  const auto hwc = codecs::PixelView::Interleaved(interleaved.data(), out.width, out.height);
  for (int y = 0; y < out.height; ++y) {
    const std::uint8_t* plane = out.at(y, 0);
    std::uint8_t* p = hwc.at(y, 0);
    for (int x = 0; x < out.width; ++x) {
      for (int c = 0; c < 3; ++c) p[3 * x + c] = plane[c * out.channel_stride + x];
    }
  }
  ApplyPixelOps(ops, hwc, scratch);
  codecs::CopyPixels({hwc.data, hwc.width, hwc.height, 3, hwc.row_stride}, out);
}

}  // namespace

SamplePlan PlanSample(const LoaderOptions& options, std::uint64_t epoch, std::uint64_t sample,
                      int width, int height) {
  SampleRng rng(options.seed, epoch, sample);
  SamplePlan plan{PlanFor(options, rng, width, height), {}};
  if (options.mode == Mode::kTrain) {
    const ImageSize size = options.image_size.At(epoch);
    plan.ops = DrawPixelOps(options.augment, size.width, size.height, rng);
  }
  return plan;
}

codecs::PixelView Loader::Impl::RowView(std::span<std::uint8_t> images, std::size_t row,
                                        ImageSize size) const {
  std::uint8_t* base = images.data() + row * size.bytes();
  return layout == Layout::kNhwc ? codecs::PixelView::Interleaved(base, size.width, size.height)
                                 : codecs::PixelView::Planar(base, size.width, size.height);
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
  AugmentRow(options, rng, out, worker.ops, worker.raw);
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
  const ImageSize size = options.image_size.At(chunk.epoch);
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
    const codecs::PixelView out = RowView(slot.images, row, size);
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
    const std::size_t bytes = converter->ImageBytes(size.height, size.width);
    converter->Convert(std::span<const std::uint8_t>(slot.images).subspan(first * size.bytes()),
                       count, size.height, size.width,
                       std::span(slot.output).subspan(first * bytes));
  }
}

// After `sample` at `position` failed with `reason`: under kSkip fills its row with the
// next sample of this instance's epoch order that decodes (a pure function of the data,
// so every run picks the same one); under kFail, for a file changed on its server, or if
// none does, records the batch's error (the lowest row's wins).
void Loader::Impl::HandleBadSample(Worker& worker, const Chunk& chunk, std::size_t position,
                                   std::uint64_t sample, const std::string& reason) {
  Slot& slot = *slots[chunk.slot];
  const EpochOrder& order = *chunk.order;
  const std::size_t row = position - chunk.batch_begin;
  std::string failure = source->Describe(sample) + ": " + reason;
  if (options.bad_sample_policy != BadSamplePolicy::kFail &&
      !reason.starts_with(detail::kFileChanged)) {
    const codecs::PixelView out = RowView(slot.images, row, options.image_size.At(chunk.epoch));
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

SampleDecoder::SampleDecoder(std::unique_ptr<Source> source, LoaderOptions options)
    : impl_(std::make_unique<Loader::Impl>(std::move(source), std::move(options))) {
  impl_->Validate(std::nullopt);
  worker_ = std::make_unique<Worker>(impl_->options.jpeg);
  pixels_.resize(impl_->image_bytes);
}

SampleDecoder::~SampleDecoder() = default;

const Source& SampleDecoder::source() const { return *impl_->source; }

std::span<const std::uint8_t> SampleDecoder::Decode(std::uint64_t epoch, std::uint64_t sample) {
  std::int32_t label = 0;
  const ImageSize size = impl_->options.image_size.At(epoch);
  impl_->ReadAndDecode(*worker_, epoch, sample, impl_->RowView(pixels_, 0, size), label);
  return std::span<const std::uint8_t>(pixels_).first(size.bytes());
}

}  // namespace tilefeed::loader
