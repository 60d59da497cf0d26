#pragma once

// A Source is a dataset seen as an indexed array of encoded samples: size() samples,
// each read by index into a caller-owned byte buffer together with its label and
// encoding. The loader asks a Source only for bytes; decoding belongs to codecs/. Built-in
// sources are ImageFolder (loader/image_folder.h) and Cifar10 (loader/cifar.h);
// users write their own by implementing size(), Read(), Describe() and Label().
//
// Ownership: a Source owns its index (paths, open files) and nothing the caller passes
// in; Read() writes into the caller's buffer and keeps no reference to it.
//
// Thread safety: every const member function may be called concurrently from any number
// of threads once the Source is constructed. Decode workers call Read() in parallel, each
// with its own buffer, so implementations use positional I/O (pread) or immutable state.
//
// Errors: a sample that cannot be read is a SourceError naming the sample (a path or a
// record id) and the reason. The loader's bad-sample policy decides whether to skip it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilefeed::loader {

// How a sample's bytes are encoded; tells the decode stage which codec to use.
enum class SampleCodec {
  kEncoded,  // an image file's bytes; JPEG expected (the codec names other formats)
  kRawHwc,   // uint8 pixels, height x width x channels, tightly packed
  kLz4Raw,   // a codecs/raw.h tensor (header + LZ4 block)
  // A JPEG interval index in its stored form (codecs/jpeg_index.h SerializeIndex) of
  // SampleInfo::index_size bytes, then the JPEG it belongs to. Decoded with
  // codecs::IndexedJpegDecoder, which entropy-decodes only the intervals a crop covers.
  kIndexedJpeg,
  // A JPEG's DCT coefficients in a codecs/jpeg_coefficients.h record. Decoded with
  // codecs::CoefficientDecoder: no entropy decoding, same pixels as the JPEG.
  kCoefficients,
};

// What Read() learned about a sample besides its bytes.
struct SampleInfo {
  std::int32_t label = 0;
  SampleCodec codec = SampleCodec::kEncoded;
  int height = 0;    // set only for kRawHwc
  int width = 0;     // set only for kRawHwc
  int channels = 0;  // set only for kRawHwc
  // Set only for kIndexedJpeg: the interval index's length, before the JPEG.
  std::uint32_t index_size = 0;
};

// One sample's outcome in Source::ReadMany: its info, or why it could not be read.
struct ReadResult {
  SampleInfo info;
  bool ok = false;
  // When !ok: the reason, as SourceError::reason() gives it (what() for other errors).
  std::string error;
};

// A sample or dataset that cannot be read. what() is where() + ": " + reason().
class SourceError : public std::runtime_error {
 public:
  // `where` names the thing that failed (a path, "file#record", a root directory).
  SourceError(std::string where, std::string reason);

  const std::string& where() const noexcept { return where_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string where_;
  std::string reason_;
};

class Source {
 public:
  virtual ~Source() = default;

  // The number of samples; indices run from 0 to size() - 1.
  virtual std::size_t size() const = 0;

  // Reads sample `index` into `buffer`, resized to the sample's length, and returns its
  // label and encoding. The buffer's capacity is reused, so steady-state reads do not
  // allocate. Throws SourceError naming the sample. Safe to call concurrently, each
  // caller with its own buffer.
  // REQUIRES: index < size().
  virtual SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const = 0;

  // Reads samples indices[i] into buffers[i] and sets results[i], for every i: a sample
  // that cannot be read sets results[i].ok = false and its reason, and does not stop the
  // others. A source whose samples lie in shared files may merge reads of nearby samples
  // (ShardDataset does); the bytes and infos are those Read() gives, whatever the order
  // or repetitions in `indices`. The default calls Read() for each sample. Buffers'
  // capacity is reused as in Read(). Safe to call concurrently, each caller with its own
  // buffers and results.
  // REQUIRES: indices, buffers and results have the same size; every index < size().
  virtual void ReadMany(std::span<const std::uint64_t> indices,
                        std::span<std::vector<std::byte>> buffers,
                        std::span<ReadResult> results) const;

  // Whether ReadMany does better than one Read() per sample. The loader then reads a
  // chunk's samples at once, one buffer each; otherwise it reads and decodes them one at a
  // time through one reused buffer per worker, which keeps the worker's read memory at the
  // largest sample's size.
  virtual bool merges_reads() const { return false; }

  // Names sample `index` for messages: a file path or a record id.
  // REQUIRES: index < size().
  virtual std::string Describe(std::size_t index) const = 0;

  // Class names indexed by label, or an empty vector if the source has none. The
  // reference stays valid as long as the Source.
  virtual const std::vector<std::string>& class_names() const;

  // The label of sample `index` without reading its bytes (for reporting and class
  // balance). May throw SourceError.
  // REQUIRES: index < size().
  virtual std::int32_t Label(std::size_t index) const = 0;

  // What the dataset identity (loader::Identify) records of sample `index` without reading
  // it: a shard record's checksum, else the byte count Read() gives (from the format's index,
  // or one stat of a file). The default, 0, leaves it out. Throws SourceError like Read().
  // REQUIRES: index < size().
  virtual std::uint64_t Fingerprint(std::size_t /*index*/) const { return 0; }
};

// source.Read(index, buffer) into `result`, with an error caught as ReadMany reports it.
// For sources that override ReadMany and read some samples one by one.
void ReadOne(const Source& source, std::size_t index, std::vector<std::byte>& buffer,
             ReadResult& result);

}  // namespace tilefeed::loader
