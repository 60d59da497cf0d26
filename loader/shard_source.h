#pragma once

// ShardDataset reads a dataset packed into record shards by PackDataset
// (loader/shard_writer.h, tools/pack.cc; byte layout in docs/shard-format.md). A
// directory holds the manifest "tilefeed-manifest.txt" (classes, shard names, record
// counts) and shards "shard-00000.tfs", ...; each shard is a header, the records
// (label, codec, payload) and a footer index (offset, size, label, checksum per record).
//
// Open() reads the manifest, then each shard's header and footer: two preads per shard,
// whatever the number of records. It checks magic, version, sizes, the footer checksum,
// that records are contiguous inside the file, and that each shard matches the manifest,
// so a truncated, foreign or mixed-up file is refused at open, by name. Read() is one
// pread of exactly the record and verifies the record's XXH3 checksum; a mismatch is a
// SourceError naming "<shard path>#<record>", which the loader's bad-sample policy handles.
// ReadMany() merges the reads of nearby records and ShardIo::kMmap maps the shards instead
// (docs/shard-format.md, "How tilefeed reads shards"). The manifest may also be an
// http(s):// or s3:// URL (or the URL of its directory), read through
// ShardReadOptions::remote (tilefeed/loader/remote.h).
//
// Ownership: a ShardDataset owns the in-memory index (24 bytes a record) and one open
// descriptor per local shard, so the process needs a descriptor limit above the shard count.
// Thread safety: immutable after Open(); all const members may be called concurrently.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loader/shard_format.h"
#include "tilefeed/loader/dataset.h"  // the options
#include "tilefeed/loader/remote.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {
namespace detail {
class RangeFile;
}  // namespace detail

// How a dataset's records are stored: the shard header's codec byte (loader/shard_format.h).
using ShardCodec = detail::RecordCodec;

// What a manifest says, without opening any shard.
struct ShardManifest {
  struct Shard {
    std::string path;  // the shard file: directory + "/" + name
    std::uint64_t records = 0;
    std::uint64_t bytes = 0;
  };
  std::string path;  // of the manifest file itself
  ShardCodec codec = ShardCodec::kJpeg;
  std::uint64_t records = 0;
  std::vector<std::string> class_names;
  std::vector<Shard> shards;
};

// Reads and checks the manifest at `manifest_or_dir` (the file, or the directory that
// holds it). Throws SourceError naming the file if it is missing, unreadable or malformed.
ShardManifest ReadShardManifest(const std::string& manifest_or_dir,
                                const RemoteOptions& remote = {});

// True if `path` is a shard manifest or a directory that holds one (for a URL: if it ends
// in "/tilefeed-manifest.txt"; nothing is fetched). Never throws.
bool IsShardDataset(const std::string& path);

// A problem found by VerifyShards: "<shard path>" or "<shard path>#<record>", and why.
// A note is worth knowing but nothing wrong (a PNG stored in a JPEG-codec record).
struct ShardProblem {
  std::string where;
  std::string reason;
  bool note = false;
};

// Checks a whole dataset: every shard's header and footer (a bad shard is reported and
// the others still checked), every record's checksum, every interval index against its
// JPEG (codecs::ParseIndex), and that every image record decodes: a JPEG's headers and
// entropy-coded data (a truncated or corrupt JPEG fails), a PNG through IEND (and is
// noted); a record in neither format fails. Records are decoded on the caller's TBB
// arena. `on_record(done, total)` is called after each record, from the calling thread.
// Returns the problems and notes found, in shard and record order. Throws SourceError
// only if the manifest itself cannot be read.
std::vector<ShardProblem> VerifyShards(
    const std::string& manifest_or_dir,
    const std::function<void(std::uint64_t, std::uint64_t)>& on_record = {},
    const RemoteOptions& remote = {});

// Checks every sample of any source as the loader will read it: the read (a bad sample's
// reason: a tar sample without a label, a failed remote read) and that an encoded image
// decodes (JPEG entropy data, PNG through IEND) or a raw tensor's header parses. Reads in
// chunks of 16 with ReadMany on the caller's TBB arena. Problems are "<Describe(i)>: reason"
// in sample order; `on_record` as for VerifyShards.
std::vector<ShardProblem> VerifySamples(
    const Source& source, const std::function<void(std::uint64_t, std::uint64_t)>& on_record = {});

class ShardDataset final : public Source {
 public:
  // Opens the dataset whose manifest is `manifest_or_dir` (or lies in that directory).
  // Throws SourceError naming the manifest or the shard that is missing, truncated,
  // foreign, of an unsupported version, inconsistent with the manifest, or of a retired
  // coefficient layout ("record N is coefficient layout v1, retired; repack it: ...").
  static std::unique_ptr<ShardDataset> Open(const std::string& manifest_or_dir,
                                            const ShardReadOptions& options = {});

  ShardDataset(const ShardDataset&) = delete;
  ShardDataset& operator=(const ShardDataset&) = delete;
  ~ShardDataset() override;

  std::size_t size() const override { return entries_.size(); }
  // Reads the record's payload into `buffer`; returns {label, kEncoded} for JPEG records,
  // {label, kLz4Raw} for raw ones, {label, kIndexedJpeg, index_size} for indexed ones
  // and {label, kCoefficients} for coefficient ones
  // (the buffer holds the index, then the JPEG; the index is checked by the decoder, not
  // here). Throws SourceError("<shard path>#<record>", reason) on an I/O error, a short
  // read, a checksum mismatch or an index length that does not fit the record.
  // REQUIRES: index < size().
  SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override;
  // As Read() for each sample, merging the reads of nearby records of one shard (see
  // ShardReadOptions). A record that fails its checks is reported alone, with the reason
  // Read() would give. No heap allocation beyond growing the buffers (by at most
  // max_gap bytes each).
  void ReadMany(std::span<const std::uint64_t> indices, std::span<std::vector<std::byte>> buffers,
                std::span<ReadResult> results) const override;
  bool merges_reads() const override {
    return read_options_.io == ShardIo::kPread && read_options_.coalesce;
  }
  // "<shard path>#<record within the shard>", e.g. "data/shard-00003.tfs#1234".
  // REQUIRES: index < size().
  std::string Describe(std::size_t index) const override;
  const std::vector<std::string>& class_names() const override { return class_names_; }
  // From the in-memory index; no I/O. REQUIRES: index < size().
  std::int32_t Label(std::size_t index) const override { return entries_[index].label; }
  // The record's checksum, from the in-memory index; no I/O.
  std::uint64_t Fingerprint(std::size_t index) const override { return entries_[index].checksum; }

  ShardCodec codec() const { return codec_; }
  std::size_t shard_count() const { return shards_.size(); }
  // Record reads issued so far (one pread/preadv each, merged or not; short-read retries
  // not counted), for measuring how much ReadMany merges. 0 under ShardIo::kMmap.
  std::uint64_t read_calls() const { return read_calls_.load(std::memory_order_relaxed); }
  // The shard holding sample `index` and the record's number within it.
  // REQUIRES: index < size().
  std::pair<std::size_t, std::size_t> Locate(std::size_t index) const;

 private:
  struct Shard {
    std::string path;
    std::unique_ptr<detail::RangeFile> file;  // a local file or a remote one
    // ShardIo::kMmap: the whole file, mapped read-only; unmapped by the destructor.
    const std::byte* map = nullptr;
    std::size_t map_bytes = 0;
  };
  using Entry = detail::IndexEntry;
  ShardDataset() = default;
  // One merged read of ReadMany (defined in the .cc): records order[0..count) (positions
  // in the indices), all of one shard, sorted by offset and non-overlapping.
  struct GroupRead;
  // Sizes the group's buffers and sets up its one read; then checks what it read.
  void PrepareGroup(GroupRead& group) const;
  void FinishGroup(GroupRead& group) const;
  SampleInfo ReadMapped(std::size_t index, std::vector<std::byte>& buffer) const;

  ShardCodec codec_ = ShardCodec::kJpeg;
  ShardReadOptions read_options_;
  std::vector<std::string> class_names_;
  std::vector<Shard> shards_;
  // Sample i is in shard s where record_begin_[s] <= i < record_begin_[s + 1].
  std::vector<std::size_t> record_begin_;
  std::vector<Entry> entries_;
  mutable std::atomic<std::uint64_t> read_calls_{0};
};

}  // namespace tilefeed::loader
