#include "loader/shard_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <span>
#include <utility>

#include "codecs/jpeg_coefficients.h"
#include "codecs/jpeg_index.h"
#include "codecs/png.h"
#include "codecs/raw.h"
#include "loader/file_io.h"
#include "loader/shard_format.h"
#include "tilefeed/codecs/jpeg.h"

namespace tilefeed::loader {
namespace {

namespace fs = std::filesystem;
using detail::RecordCodec;
using detail::UniqueFd;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kWriteBufferBytes = std::size_t{4} << 20;
constexpr std::uint64_t kMinShardBytes = 4096;
constexpr const char* kLockFileName = ".tilefeed-pack.lock";

// The codec byte of the shards and manifest a pack of `codec` writes.
RecordCodec RecordCodecOf(PackCodec codec) {
  switch (codec) {
    case PackCodec::kJpeg:
      return RecordCodec::kJpeg;
    case PackCodec::kJpegIndex:
      return RecordCodec::kIndexedJpeg;
    case PackCodec::kCoefficientsFast:
    case PackCodec::kCoefficientsSmall:
      return RecordCodec::kCoefficients;
    case PackCodec::kRaw:
      return RecordCodec::kLz4Raw;
  }
  return RecordCodec::kJpeg;
}

[[noreturn]] void ThrowErrno(const std::string& path, const char* what) {
  throw PackError(path + ": " + what + ": " + detail::ErrnoMessage(errno));
}

// Throws PackError("<path>: <reason>") if a file_io helper gave a reason.
void ThrowIf(const std::string& path, const std::optional<std::string>& reason) {
  if (reason) throw PackError(path + ": " + *reason);
}

// Writes "<final>.tmp", then fsyncs and renames it in Finish(). Destroying an
// unfinished writer removes the temporary file, so a failed pack leaves no debris.
class ShardFileWriter {
 public:
  ShardFileWriter(std::string final_path, std::uint32_t number, RecordCodec codec)
      : final_path_(std::move(final_path)),
        tmp_path_(final_path_ + ".tmp"),
        number_(number),
        codec_(codec) {
    fd_ = UniqueFd(::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd_) ThrowErrno(tmp_path_, "create");
    // The real header is written by Finish() once the record count is known.
    buffer_.resize(detail::kShardHeaderSize);
    offset_ = detail::kShardHeaderSize;
  }
  ShardFileWriter(const ShardFileWriter&) = delete;
  ShardFileWriter& operator=(const ShardFileWriter&) = delete;
  ~ShardFileWriter() {
    if (fd_) ::unlink(tmp_path_.c_str());
  }

  std::uint64_t size() const { return offset_; }
  std::uint64_t records() const { return records_; }

  void Add(std::span<const std::byte> header, std::span<const std::byte> payload,
           std::int32_t label, std::uint64_t checksum) {
    const std::uint64_t size = header.size() + payload.size();
    detail::AppendIndexEntry({offset_, checksum, static_cast<std::uint32_t>(size), label}, index_);
    Append(header);
    Append(payload);
    offset_ += size;
    ++records_;
  }

  // Completes the file and renames it; returns its manifest entry.
  detail::ManifestShard Finish() {
    Flush();
    const std::uint64_t index_offset = offset_;
    detail::AppendTrailer(index_offset, records_, index_);
    ThrowIf(tmp_path_, detail::WriteFull(fd_.get(), index_.data(), index_.size()));
    const std::uint64_t file_size = offset_ + index_.size();
    const auto header = detail::EncodeShardHeader({codec_, number_, records_});
    if (::pwrite(fd_.get(), header.data(), header.size(), 0) != ssize_t(header.size())) {
      ThrowErrno(tmp_path_, "write header");
    }
    if (::fsync(fd_.get()) != 0) ThrowErrno(tmp_path_, "fsync");
    if (::close(fd_.release()) != 0) ThrowErrno(tmp_path_, "close");
    if (::rename(tmp_path_.c_str(), final_path_.c_str()) != 0) ThrowErrno(final_path_, "rename");
    const auto footer = std::span(index_).subspan(
        index_.size() - records_ * detail::kIndexEntrySize - detail::kShardTrailerSize);
    return {fs::path(final_path_).filename().string(), records_, file_size,
            detail::Checksum(footer.first(footer.size() - 16))};
  }

 private:
  void Append(std::span<const std::byte> bytes) {
    if (buffer_.size() + bytes.size() > kWriteBufferBytes) Flush();
    if (bytes.size() >= kWriteBufferBytes) {
      ThrowIf(tmp_path_, detail::WriteFull(fd_.get(), bytes.data(), bytes.size()));
    } else {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
  }
  void Flush() {
    ThrowIf(tmp_path_, detail::WriteFull(fd_.get(), buffer_.data(), buffer_.size()));
    buffer_.clear();
  }

  std::string final_path_;
  std::string tmp_path_;
  std::uint32_t number_;
  RecordCodec codec_;
  UniqueFd fd_;
  std::vector<std::byte> buffer_;
  std::vector<std::byte> index_;
  std::uint64_t offset_ = 0;
  std::uint64_t records_ = 0;
};

bool IsOurFile(const std::string& name) {
  if (name == detail::kManifestFileName ||
      name == std::string(detail::kManifestFileName) + ".tmp") {
    return true;
  }
  // shard-<5 or more digits>.tfs, optionally .tmp
  if (name.rfind("shard-", 0) != 0) return false;
  std::size_t i = 6;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i < 11) return false;
  const std::string rest = name.substr(i);
  return rest == ".tfs" || rest == ".tfs.tmp";
}

// Creates the output directory and locks it (flock on kLockFileName, which names the holder,
// "pid P on HOST", for a second pack's refusal; it stays, or a pack that had opened it could
// lock a file no later pack sees), then empties it: with --force, of an old pack's files.
UniqueFd PrepareOutput(const PackOptions& options) {
  const fs::path dir(options.output_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw PackError(options.output_dir + ": cannot create directory: " + ec.message());
  if (!fs::is_directory(dir, ec)) throw PackError(options.output_dir + ": not a directory");
  const std::string lock_path = (dir / kLockFileName).string();
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) ThrowErrno(lock_path, "create");
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) ThrowErrno(lock_path, "lock");
    std::array<char, 256> holder{};
    const ssize_t n = ::pread(lock.get(), holder.data(), holder.size() - 1, 0);
    throw PackError(options.output_dir + ": another pack is writing this directory (" +
                    (n > 0 ? std::string(holder.data(), n) : "not yet named") + ", " +
                    kLockFileName + ")");
  }
  const std::string holder = "pid " + std::to_string(::getpid()) + " on " + detail::HostName();
  if (::ftruncate(lock.get(), 0) != 0) ThrowErrno(lock_path, "truncate");
  ThrowIf(lock_path, detail::WriteFull(lock.get(), holder.data(), holder.size()));
  if (std::all_of(fs::directory_iterator(dir), {}, [](const fs::directory_entry& entry) {
        return entry.path().filename() == kLockFileName;
      })) {
    return lock;
  }
  if (!options.force) {
    throw PackError(options.output_dir +
                    ": output directory is not empty (use --force to "
                    "replace a pack there)");
  }
  // The manifest goes first, so that an interrupted --force run never leaves an old
  // manifest next to new shards.
  const fs::path manifest = dir / detail::kManifestFileName;
  fs::remove(manifest, ec);
  if (ec) throw PackError(manifest.string() + ": cannot remove: " + ec.message());
  ThrowIf(options.output_dir, detail::SyncDirectory(options.output_dir));
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (IsOurFile(entry.path().filename().string())) {
      fs::remove(entry.path(), ec);
      if (ec) throw PackError(entry.path().string() + ": cannot remove: " + ec.message());
    }
  }
  return lock;
}

// One sample in flight through the pipeline. Buffers are reused from token to token.
struct Item {
  std::size_t index = 0;
  std::array<std::byte, detail::kRecordHeaderSize> header{};
  std::vector<std::byte> read;     // the source's bytes
  std::vector<std::byte> encoded;  // kLz4Raw conversions and kIndexedJpeg records land here
  std::vector<std::uint8_t> pixels;
  std::span<const std::byte> payload;
  std::int32_t label = 0;
  std::uint64_t checksum = 0;
  bool skipped = false;
  bool not_jpeg = false;
  std::string reason;
  // kIndexedJpeg: the index length (0: stored as it came, for `refusal`).
  std::uint32_t index_size = 0;
  bool coefficients = false;  // kCoefficients: stored as coefficients
  std::string refusal;
  std::string refusal_category;
  std::uint64_t source_bytes = 0;
};

class Converter {
 public:
  explicit Converter(const Source& source, const PackOptions& options)
      : source_(source), options_(options) {}

  // Fills item.payload from the source sample, or marks the item skipped.
  void Convert(Item& item) {
    ResetOutcome(item);
    const std::optional<SampleInfo> info = ReadSample(item);
    if (!info) return;
    ConvertPayload(item, *info);
    if (!item.skipped) SealRecord(item);
  }

 private:
  static void Skip(Item& item, std::string reason) {
    item.skipped = true;
    item.reason = std::move(reason);
  }

  // Forgets the previous sample's outcome; the buffers stay, for reuse.
  static void ResetOutcome(Item& item) {
    item.skipped = false;
    item.not_jpeg = false;
    item.reason.clear();
    item.index_size = 0;
    item.coefficients = false;
    item.refusal.clear();
    item.refusal_category.clear();
  }

  bool raw() const { return options_.codec == PackCodec::kRaw; }

  // Reads the sample into item.read (an indexed JPEG record without its index) and
  // returns what the source says of it, or marks the item skipped and returns nothing.
  std::optional<SampleInfo> ReadSample(Item& item) const {
    SampleInfo info;
    try {
      info = source_.Read(item.index, item.read);
    } catch (const SourceError& e) {
      Skip(item, e.reason());
      return std::nullopt;
    }
    if (info.codec == SampleCodec::kIndexedJpeg) {
      // Repacking indexed records: keep the JPEG; an index is made anew if asked for.
      if (info.index_size >= item.read.size()) {
        Skip(item, "interval index length does not fit the sample");
        return std::nullopt;
      }
      item.read.erase(item.read.begin(), item.read.begin() + info.index_size);
      info.codec = SampleCodec::kEncoded;
    }
    item.source_bytes = item.read.size();
    if (info.label < 0) {
      Skip(item, "negative label " + std::to_string(info.label));
      return std::nullopt;
    }
    item.label = info.label;
    return info;
  }

  // Points item.payload at what the shard stores for the sample, or marks it skipped.
  // Throws PackError when the source's kind of sample cannot go into this codec's shards.
  void ConvertPayload(Item& item, const SampleInfo& info) {
    item.payload = item.read;
    switch (info.codec) {
      case SampleCodec::kIndexedJpeg:  // made kEncoded by ReadSample
      case SampleCodec::kEncoded:
        ConvertImage(item);
        break;
      case SampleCodec::kRawHwc:
        RequireShardCodec(item, RecordCodec::kLz4Raw, "raw pixels", "raw");
        EncodeRawPixels(item, info);
        break;
      case SampleCodec::kCoefficients:
        RequireShardCodec(item, RecordCodec::kCoefficients, "coefficient records",
                          "coefficients-fast or coefficients-small");
        item.coefficients = true;
        break;
      case SampleCodec::kLz4Raw:
        RequireShardCodec(item, RecordCodec::kLz4Raw, "raw tensors", "raw");
        try {
          codecs::ReadRawInfo(item.read);
        } catch (const codecs::DecodeError& e) {
          Skip(item, e.what());
        }
        break;
    }
  }

  void RequireShardCodec(const Item& item, RecordCodec codec, const char* samples,
                         const char* codec_name) const {
    if (RecordCodecOf(options_.codec) != codec) {
      throw PackError(source_.Describe(item.index) + ": the source yields " + samples +
                      "; pack it with the " + codec_name + " codec");
    }
  }

  // A JPEG or PNG sample: stored as it came (noting a file that is neither), with an
  // interval index, as coefficients, or decoded into a raw record.
  void ConvertImage(Item& item) {
    if (raw()) {
      try {
        DecodeImage(item);
      } catch (const codecs::DecodeError& e) {
        Skip(item, e.what());
      }
      return;
    }
    // PNGs are stored as they are and decoded at read time, like JPEGs.
    const char* kind = codecs::IsPng(item.read) ? nullptr : codecs::SniffNonJpeg(item.read);
    if (kind != nullptr) {
      item.not_jpeg = true;
      item.reason = std::string("stored, but it is not a JPEG or PNG (") + kind + ")";
    }
    if (options_.codec == PackCodec::kJpegIndex) Transcode(item);
    if (options_.codec == PackCodec::kCoefficientsFast ||
        options_.codec == PackCodec::kCoefficientsSmall) {
      StoreCoefficients(item);
    }
  }

  // Raw HWC pixels into an LZ4 raw record, or the item skipped when their size does not
  // match the shape the source gives.
  static void EncodeRawPixels(Item& item, const SampleInfo& info) {
    try {
      const codecs::RawInfo shape{info.height, info.width, info.channels};
      if (shape.pixel_bytes() != item.read.size()) {
        throw codecs::DecodeError(codecs::DecodeErrorKind::kCorrupt,
                                  "raw sample size does not match its shape");
      }
      item.encoded = codecs::EncodeRaw(
          std::span(reinterpret_cast<const std::uint8_t*>(item.read.data()), item.read.size()),
          shape);
      item.payload = item.encoded;
    } catch (const codecs::DecodeError& e) {
      Skip(item, e.what());
    }
  }

  // Makes the record header and checksum of item.payload, or skips a payload too large
  // for the record format.
  void SealRecord(Item& item) const {
    if (item.payload.size() > UINT32_MAX - detail::kRecordHeaderSize) {
      Skip(item, "sample of " + std::to_string(item.payload.size()) + " bytes is too large");
      return;
    }
    const RecordCodec record_codec = raw()                 ? RecordCodec::kLz4Raw
                                     : item.index_size > 0 ? RecordCodec::kIndexedJpeg
                                     : item.coefficients   ? RecordCodec::kCoefficients
                                                           : RecordCodec::kJpeg;
    item.header = detail::EncodeRecordHeader(item.label, record_codec, item.index_size);
    item.checksum = detail::RecordChecksum(item.header, item.payload);
  }

  // Replaces item.payload by the transcoded JPEG behind its index, or leaves the file as
  // it came and says why. Transcoding is a pure function of the bytes and the options,
  // so the output stays byte-identical whatever the thread count.
  void Transcode(Item& item) {
    codecs::TranscodeResult result =
        codecs::TranscodeForRandomAccess(item.read, options_.transcode);
    std::vector<std::byte> index;
    if (result.transcoded) {
      index = codecs::SerializeIndex(result.index);
      if (index.size() > detail::kMaxRecordIndexSize) {
        result.transcoded = false;
        result.refusal = codecs::DecodeErrorKind::kTooLarge;
        result.reason = "interval index of " + std::to_string(index.size()) +
                        " bytes is over the record format's limit";
      }
    }
    if (!result.transcoded) {
      item.refusal = std::move(result.reason);
      const char* other = codecs::SniffNonJpeg(item.read);
      item.refusal_category = codecs::ToString(result.refusal);
      if (result.refusal == codecs::DecodeErrorKind::kNotJpeg && other != nullptr) {
        item.refusal_category += std::string(" (") + other + ")";
      }
      return;
    }
    item.index_size = static_cast<std::uint32_t>(index.size());
    item.encoded = std::move(index);
    item.encoded.insert(item.encoded.end(), result.jpeg.begin(), result.jpeg.end());
    item.payload = item.encoded;
  }

  // Replaces item.payload by the JPEG's coefficient record, or leaves the file as it came
  // and says why. A pure function of the bytes and options, like Transcode.
  void StoreCoefficients(Item& item) {
    codecs::CoefficientPackOptions coefficients;
    coefficients.coding = options_.codec == PackCodec::kCoefficientsSmall
                              ? codecs::CoefficientCoding::kHuffman
                              : codecs::CoefficientCoding::kNone;
    codecs::CoefficientPackResult result = codecs::PackCoefficients(item.read, coefficients);
    if (!result.packed) {
      item.refusal = std::move(result.reason);
      item.refusal_category = codecs::ToString(result.refusal);
      if (const char* other = codecs::SniffNonJpeg(item.read)) {
        item.refusal_category += std::string(" (") + other + ")";
      }
      return;
    }
    item.coefficients = true;
    item.encoded = std::move(result.record);
    item.payload = item.encoded;
  }

  // Decodes a JPEG or PNG sample whole, resized to the raw size, into an LZ4 raw record.
  void DecodeImage(Item& item) {
    const int w = options_.raw_width;
    const int h = options_.raw_height;
    if (w <= 0 || h <= 0 || w > 65535 || h > 65535) {
      throw PackError(source_.Describe(item.index) +
                      ": image samples need a raw size (e.g. 32x32) for the raw codec");
    }
    Decoders& decoders = decoders_.local();
    item.pixels.resize(std::size_t(w) * h * 3);
    const auto out = codecs::PixelView::Interleaved(item.pixels.data(), w, h);
    auto whole = [](const codecs::ImageInfo& image) {
      return codecs::CropPlan{codecs::Rect{0, 0, image.width, image.height}};
    };
    if (codecs::IsPng(item.read)) {
      decoders.png.DecodeInto(item.read, whole, out);
    } else {
      decoders.jpeg.DecodeInto(item.read, whole, out);
    }
    item.encoded = codecs::EncodeRaw(item.pixels, {h, w, 3});
    item.payload = item.encoded;
  }

  const Source& source_;
  const PackOptions& options_;
  // One decoder of each kind per thread: they hold codec state and are not shareable.
  struct Decoders {
    codecs::JpegDecoder jpeg;
    codecs::PngDecoder png;
  };
  tbb::enumerable_thread_specific<Decoders> decoders_;
};

// Throws PackError for options or a source that cannot make a pack.
void CheckPackArguments(const Source& source, const PackOptions& options) {
  if (options.output_dir.empty()) throw PackError("no output directory given");
  if (options.shard_bytes < kMinShardBytes) {
    throw PackError("shard size " + std::to_string(options.shard_bytes) +
                    " is below the minimum of " + std::to_string(kMinShardBytes) + " bytes");
  }
  for (const std::string& name : source.class_names()) {
    if (name.find_first_of("\n\r") != std::string::npos) {
      throw PackError("class name with a line break cannot go into the manifest: " + name);
    }
  }
  if (source.size() == 0) throw PackError("the source has no samples");
}

// Writes `text` as the manifest of the pack in `output_dir`, durably and atomically;
// returns the manifest's path.
std::string WriteManifest(const std::string& output_dir, const std::string& text) {
  std::string manifest_path = (fs::path(output_dir) / detail::kManifestFileName).string();
  ThrowIf(manifest_path, detail::ReplaceFile(manifest_path, manifest_path + ".tmp",
                                             {std::as_bytes(std::span(text))}, /*durable=*/true));
  return manifest_path;
}

// The pipeline's last, serial stage: takes the converted samples in order, counts each
// one's outcome in the PackResult, and appends the records to shard files, starting the
// next shard when a record would take the current one over options.shard_bytes. Finish()
// closes the last shard and writes the manifest.
class PackWriter {
 public:
  PackWriter(const Source& source, const PackOptions& options,
             const std::function<void(const PackProgress&)>& progress, Clock::time_point start)
      : source_(source), options_(options), progress_(progress), start_(start) {
    manifest_.codec = RecordCodecOf(options.codec);
    manifest_.class_names = source.class_names();
    state_.samples_total = source.size();
  }

  void Take(const Item& item) {
    if (item.skipped) {
      result_.skipped.push_back({item.index, source_.Describe(item.index), item.reason, {}});
    } else {
      Count(item);
      Append(item);
    }
    ++state_.samples_done;
    if (progress_) {
      state_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
      progress_(state_);
    }
  }

  PackResult Finish() {
    if (shard_) FinishShard();
    if (manifest_.records == 0) throw PackError("every sample was skipped; nothing was written");
    // The shards' renames must be durable before the manifest that names them.
    ThrowIf(options_.output_dir, detail::SyncDirectory(options_.output_dir));
    const std::string text = detail::FormatManifest(manifest_);
    result_.manifest_path = WriteManifest(options_.output_dir, text);
    result_.records = manifest_.records;
    result_.shards = manifest_.shards.size();
    result_.bytes = state_.bytes_written + text.size();
    result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    return std::move(result_);
  }

 private:
  // Counts a stored sample that is not a JPEG or PNG, and, in an indexed or coefficient
  // pack, whether it got its index or coefficients.
  void Count(const Item& item) {
    if (item.not_jpeg) {
      result_.not_jpeg.push_back({item.index, source_.Describe(item.index), item.reason, {}});
    }
    if (manifest_.codec != RecordCodec::kIndexedJpeg &&
        manifest_.codec != RecordCodec::kCoefficients) {
      return;
    }
    if (item.index_size == 0 && !item.coefficients) {
      result_.not_indexed.push_back(
          {item.index, source_.Describe(item.index), item.refusal, item.refusal_category});
    } else {
      ++result_.indexed;
      result_.indexed_source_bytes += item.source_bytes;
      result_.indexed_stored_bytes += item.payload.size();
      result_.index_bytes += item.index_size;
    }
  }

  void Append(const Item& item) {
    const std::uint64_t size = item.header.size() + item.payload.size();
    if (shard_ && shard_->records() > 0 &&
        shard_->size() + size + detail::FooterSize(shard_->records() + 1) > options_.shard_bytes) {
      FinishShard();
    }
    if (!shard_) {
      const auto number = static_cast<std::uint32_t>(manifest_.shards.size());
      shard_ = std::make_unique<ShardFileWriter>(
          (fs::path(options_.output_dir) / detail::ShardFileName(number)).string(), number,
          manifest_.codec);
      state_.bytes_written += detail::kShardHeaderSize;
    }
    shard_->Add(item.header, item.payload, item.label, item.checksum);
    state_.bytes_written += size;
    ++manifest_.records;
  }

  void FinishShard() {
    manifest_.shards.push_back(shard_->Finish());
    state_.bytes_written += manifest_.shards.back().bytes - shard_->size();  // the footer
    shard_.reset();
    ++state_.shards_written;
  }

  const Source& source_;
  const PackOptions& options_;
  const std::function<void(const PackProgress&)>& progress_;
  const Clock::time_point start_;
  PackResult result_;
  detail::Manifest manifest_;
  std::unique_ptr<ShardFileWriter> shard_;
  PackProgress state_;
};

}  // namespace

PackResult PackDataset(const Source& source, const PackOptions& options,
                       const std::function<void(const PackProgress&)>& progress) {
  const auto start = Clock::now();
  CheckPackArguments(source, options);
  const UniqueFd lock = PrepareOutput(options);  // held until the manifest is written

  const int threads = options.workers > 0 ? options.workers : detail::UsableCores();
  // Live tokens bound the memory in flight: tokens x (sample + converted sample).
  const std::size_t tokens = static_cast<std::size_t>(threads) * 4;
  std::vector<Item> items(tokens);
  Converter converter(source, options);
  PackWriter writer(source, options, progress, start);

  std::size_t next = 0;
  auto read_order = [&](tbb::flow_control& control) -> Item* {
    if (next == source.size()) {
      control.stop();
      return nullptr;
    }
    // Live tokens form a contiguous range of at most `tokens` samples, so this slot is
    // free.
    Item* item = &items[next % tokens];
    item->index = next++;
    return item;
  };
  auto convert = [&](Item* item) {
    converter.Convert(*item);
    return item;
  };
  auto write = [&](Item* item) { writer.Take(*item); };
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        tokens, tbb::make_filter<void, Item*>(tbb::filter_mode::serial_in_order, read_order) &
                    tbb::make_filter<Item*, Item*>(tbb::filter_mode::parallel, convert) &
                    tbb::make_filter<Item*, void>(tbb::filter_mode::serial_in_order, write));
  });
  PackResult result = writer.Finish();
  // Done, the lock names no one: the same input gives the same bytes in the directory.
  if (::ftruncate(lock.get(), 0) != 0) ThrowErrno(kLockFileName, "truncate");
  return result;
}

}  // namespace tilefeed::loader
