#pragma once

// PackDataset writes any Source into record shards that ShardDataset
// (loader/shard_source.h) reads; tools/pack.cc is its command line. Samples are read
// and converted in parallel on a oneTBB arena of options.workers threads and written
// strictly in source order, so the output is byte-identical for the same input and
// options whatever the thread count or timing. Nothing in the output depends on time.
//
// Each shard is written to "<name>.tmp", fsynced and renamed; the manifest is written
// last, the same way, so an interrupted pack never leaves a manifest, and never a shard
// under its final name that is not complete.
//
// Ownership: PackDataset borrows the source for the call and owns nothing afterwards.
// Thread safety: PackDataset may run concurrently with other calls on other output
// directories; on the same one (in any process) a second call fails with a PackError that
// names the first's pid and host (an flock on OUT/.tilefeed-pack.lock, held for the call). It
// calls source.Read() from several threads at once (which Source allows) and `progress`
// from one thread at a time.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "codecs/jpeg_index.h"
#include "loader/shard_source.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {

// How PackDataset stores each sample: one value per encoding a user would pick
// (tilefeed-pack --codec; docs/shard-format.md). A file an encoding cannot take (a PNG
// for kJpegIndex or the coefficient codecs, say) is stored as it came and listed in
// PackResult::not_indexed. Every encoding but kRaw gives the files' pixels exactly.
enum class PackCodec {
  kJpeg,  // the files' bytes as they are, JPEG and PNG alike ("jpeg")
  // Each JPEG transcoded losslessly (codecs::TranscodeForRandomAccess) and stored with
  // its restart-interval index, so a crop entropy-decodes only its intervals. The stored
  // bytes are no longer the original files (metadata dropped). "jpeg-index".
  kJpegIndex,
  // Each JPEG's DCT coefficients (codecs::PackCoefficients), decoded without entropy
  // decoding: column groups stored as they are, ~1.9x the JPEG bytes, the fastest decode
  // ("coefficients-fast"); or Huffman-coded, ~1.06x the bytes at ~0.6x that speed
  // ("coefficients-small"). bench/RESULTS-coef.md.
  kCoefficientsFast,
  kCoefficientsSmall,
  // LZ4 raw uint8 HWC tensors: JPEG and PNG samples decoded whole and resized to
  // raw_width x raw_height; samples that are already pixels (CIFAR) keep their size.
  kRaw,
};

struct PackOptions {
  // Directory that receives the shards and the manifest; created if missing.
  std::string output_dir;
  // A shard is closed before a record would take it past this size (a record larger
  // than this gets a shard of its own).
  std::uint64_t shard_bytes = std::uint64_t{128} << 20;
  PackCodec codec = PackCodec::kJpeg;
  // kJpegIndex: how files are transcoded (interval width, pixel and scan limits).
  codecs::TranscodeOptions transcode;
  int raw_width = 0;   // kRaw from JPEG samples: output size; REQUIRES > 0 then
  int raw_height = 0;  // likewise
  int workers = 0;     // read/convert threads; 0 = detail::UsableCores()
  // Allow a non-empty output_dir: an old manifest and shards ("shard-NNNNN.tfs") there
  // are removed first (manifest first); other files are left alone.
  bool force = false;
};

struct PackProgress {
  std::uint64_t samples_done = 0;  // written or skipped
  std::uint64_t samples_total = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t shards_written = 0;  // finished shards
  double seconds = 0;
};

// A sample left out (kRaw: unreadable or undecodable) or stored but suspect (kJpeg:
// starting like neither a JPEG nor a PNG; the loader will report it at read time).
struct PackedSampleNote {
  std::size_t index = 0;  // in the source
  std::string where;      // source.Describe(index)
  std::string reason;
  // not_indexed: the reason's class, for counting: "not a JPEG (PNG image)",
  // "unsupported", "corrupt", ... (codecs::ToString of the refusal).
  std::string category;
};

struct PackResult {
  std::uint64_t records = 0;
  std::uint64_t shards = 0;
  std::uint64_t bytes = 0;  // shards and manifest
  double seconds = 0;
  std::string manifest_path;
  std::vector<PackedSampleNote> skipped;   // not in the output
  std::vector<PackedSampleNote> not_jpeg;  // stored, but will fail at decode
  // kJpegIndex: stored as they came, without an index (TranscodeForRandomAccess refused
  // them); decoded the ordinary way. The coefficient codecs: likewise, PackCoefficients
  // refused them.
  std::vector<PackedSampleNote> not_indexed;
  // kJpegIndex: records stored with an index; the coefficient codecs: as coefficients
  // (and the two byte counts below are theirs).
  std::uint64_t indexed = 0;
  // kJpegIndex: bytes of the indexed samples as the source gave them, and as stored
  // (transcoded JPEG + index); the two give the file-size change of transcoding.
  std::uint64_t indexed_source_bytes = 0;
  std::uint64_t indexed_stored_bytes = 0;
  std::uint64_t index_bytes = 0;  // of which interval indexes
};

// Packing failed as a whole: the output directory is unusable, a write failed, or the
// options do not fit the source. what() names the path or the sample.
class PackError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Packs `source` into options.output_dir. Record i of the output is the i-th sample of
// the source that was not skipped. Throws PackError (refusing a non-empty output_dir
// without options.force, bad options, I/O errors, every sample skipped). `progress`, if
// set, is called after each sample.
PackResult PackDataset(const Source& source, const PackOptions& options,
                       const std::function<void(const PackProgress&)>& progress = {});

}  // namespace tilefeed::loader
