#pragma once

// TarDataset reads WebDataset shards: tar files in which a sample is the run of
// consecutive members that share a key (the member name up to the first '.' of its last
// path component), e.g. "n01440764/img_17.jpg" + "n01440764/img_17.cls", as WebDataset's
// ImageNet shards and its TarWriter lay them out. A sample's image is its first member
// with extension jpg, jpeg or png (case-insensitive, tar order); its label is the ASCII
// decimal integer in its .cls member. Other members (.json, .txt, ...) are ignored. The
// full layout and every outcome for a malformed tar are in docs/datasets.md.
//
// Open() scans each tar's headers once (ustar, pax 'x' records for path and size, GNU
// 'L' long names), reading every .cls member on the way, so Label() needs no I/O and a
// Read() is one pread of exactly the image member. Tar order is the sample order: the
// tars in the order given (a directory's *.tar files sorted by name, a brace pattern in
// its own order), then each tar's samples in the order their members appear. The index
// may be kept in a sidecar written by the first open and used by later opens while the
// tar's size, mtime and (remote) ETag match and the sidecar's own checksum is right: for a
// local tar "<tar>.tfidx" (when the directory is writable), for a remote one
// "<cache_dir>/blocks/<hash of the URL>.tfidx" (when RemoteOptions::cache_dir is set).
//
// The reader is tilefeed's own (loader/tar_format.h), not libarchive: the index
// needs each member's byte offset for pread and merged preadv, which libarchive's read API
// does not expose (it streams entries, and archive_read_header_position gives only the
// header's offset for some formats), and the three header forms WebDataset writes are
// 150 lines to parse with every field checked.
//
// Outcomes for hostile input: a bad header checksum, a malformed size or pax record is
// an open error (SourceError naming the tar and the header's byte offset), since nothing
// after it can be trusted. A member whose data runs past the end of the file ends the
// scan: its sample, if any, is a bad sample ("truncated"). A sample without a .cls, with
// a malformed .cls, without an image member or with an image over max_member_bytes stays
// in the index and is a bad sample (Read() throws SourceError naming "<tar>#<key>" and the
// reason, and Label() returns -1), which the loader's bad-sample policy handles. A key with
// neither an image nor a .cls is not a sample (counted in ignored_keys()). Tar has no
// checksum: corrupt image bytes are caught by the decoder.
//
// Class names are "0", "1", ..., "C-1" where C is one more than the largest good label, so
// a pack of a tar dataset keeps the class count; a label of TarOptions::max_classes
// (1,000,000) or more is a bad sample, so C never exceeds it. http(s):// and s3:// tars are read
// through TarOptions::remote (tilefeed/loader/remote.h); their open is a HEAD request, then,
// without a valid sidecar, a read of every header (through the block cache when one is set). A
// remote tar changed on the server after open fails its reads (loader/http_file.cc, Versions).
//
// Ownership: owns the index (about 40 bytes + the key per sample) and one open file per
// tar. Thread safety: immutable after Open(); all const members may be called concurrently.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tilefeed/loader/dataset.h"  // the options
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {
namespace detail {
class RangeFile;
}  // namespace detail

// The tar files named by `location`: a ".tar" file or URL; a directory's "*.tar" files,
// sorted by name; or a brace pattern such as "train-{000000..000146}.tar" (numbers padded
// to the width written, one range per pattern; also in a URL). Throws SourceError if the
// pattern is malformed or a directory holds no .tar file. gzip-compressed shards
// (".tar.gz", ".tgz": a location so named, or any such file in the directory, even beside
// .tar files) are refused with a SourceError that says what they are and how to convert
// them (gunzip -k): a compressed tar has no offsets to read samples at, and skipping one
// would silently drop its samples.
std::vector<std::string> ListTarShards(const std::string& location);

// True if `location` looks like a tar dataset: it ends in ".tar", ".tar.gz" or ".tgz" (a
// file, URL or brace pattern) or is a directory holding such a file and no shard manifest
// (so that opening it refuses the gzip-compressed ones by name). Never throws.
bool IsTarDataset(const std::string& location);

class TarDataset final : public Source {
 public:
  // Opens the tars ListTarShards(location) names. Throws SourceError naming the tar (and
  // the header's byte offset) that is missing, unreadable or not a tar.
  static std::unique_ptr<TarDataset> Open(const std::string& location,
                                          const TarOptions& options = {});
  // Opens exactly these tars, in this order.
  static std::unique_ptr<TarDataset> OpenFiles(const std::vector<std::string>& tars,
                                               const TarOptions& options = {});

  TarDataset(const TarDataset&) = delete;
  TarDataset& operator=(const TarDataset&) = delete;
  ~TarDataset() override;

  std::size_t size() const override { return entries_.size(); }
  // One pread of the image member; returns {label, kEncoded}. Throws SourceError
  // ("<tar>#<key>", reason) for a bad sample or an I/O error.
  SampleInfo Read(std::size_t index, std::vector<std::byte>& buffer) const override;
  // As Read() for each sample, merging reads of nearby members of one tar.
  void ReadMany(std::span<const std::uint64_t> indices, std::span<std::vector<std::byte>> buffers,
                std::span<ReadResult> results) const override;
  bool merges_reads() const override { return options_.coalesce; }
  // "<tar path>#<key>". REQUIRES: index < size().
  std::string Describe(std::size_t index) const override;
  const std::vector<std::string>& class_names() const override { return class_names_; }
  // From the index, no I/O; -1 for a bad sample (Read() says why).
  std::int32_t Label(std::size_t index) const override;
  // The image member's size, from the index; no I/O.
  std::uint64_t Fingerprint(std::size_t index) const override { return entries_[index].size; }

  std::size_t tar_count() const { return tars_.size(); }
  // Keys that had neither an image nor a .cls member.
  std::uint64_t ignored_keys() const { return ignored_keys_; }
  // Image reads issued (one per pread/preadv or HTTP request, merged or not).
  std::uint64_t read_calls() const { return read_calls_.load(std::memory_order_relaxed); }

 private:
  struct Tar {
    std::string path;
    std::unique_ptr<detail::RangeFile> file;
  };
  struct Entry {
    std::uint64_t offset = 0;  // of the image member's data
    std::uint64_t size = 0;
    std::int32_t label = 0;
    std::uint32_t tar = 0;
    std::int32_t problem = -1;  // index into problems_, or -1 for a good sample
  };
  TarDataset() = default;
  // One merged read of ReadMany (defined in the .cc): samples order[0..count) (positions in
  // the indices) of one tar, sorted by offset and non-overlapping.
  struct RunRead;
  // Sizes the run's buffers and sets up its one read; then hands out what it read.
  void PrepareRun(RunRead& run) const;
  void FinishRun(RunRead& run) const;

  TarOptions options_;
  std::vector<Tar> tars_;
  std::vector<Entry> entries_;
  std::vector<std::string> keys_;
  std::vector<std::string> problems_;
  std::vector<std::string> class_names_;
  std::uint64_t ignored_keys_ = 0;
  mutable std::atomic<std::uint64_t> read_calls_{0};
};

}  // namespace tilefeed::loader
