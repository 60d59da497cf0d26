#pragma once

// Opening a dataset: one function turns the string a user typed (`train --data X`,
// `tilefeed-serve --data X`, `tilefeed-pack X`, `tilefeed.Loader(X)`, the benchmarks) into
// a Source, so every door knows every format and reads a path the same way.
//
// What a location means, decided in this order:
//   0. an "http://", "https://" or "s3://" URL: WebDataset tars if it ends in ".tar" (one
//      tar, or a brace pattern "train-{000000..000146}.tar"), else record shards (the URL of
//      a manifest or of the directory holding one); read with DatasetOptions::remote;
//   1. a shard manifest ("tilefeed-manifest.txt"), or a directory holding one: record shards
//      of any codec (loader/shard_source.h);
//   1b. a path ending in ".tar" (a tar file or a brace pattern of them), or a directory
//      holding *.tar files and no manifest: WebDataset tar shards (loader/tar_dataset.h);
//   2. a directory holding CIFAR-10 binary batches (data_batch_N.bin or test_batch.bin):
//      CIFAR-10, its training batches for Split::kTrain and test_batch.bin for kVal and kTest;
//   3. a directory with a subdirectory named exactly "train", "val" or "test": a split root;
//      the split asked for (DatasetOptions::split) is ROOT/<split>, opened by these same rules
//      (one level: a split root inside a split is an ImageFolder). It is never read as an
//      ImageFolder whose classes are "train" and "val", and a split it lacks is a SourceError
//      naming the root and the splits it has;
//   4. any other directory: an ImageFolder (loader/image_folder.h).
// A location of rules 0, 1, 1b and 4 is one dataset without splits: it is the train split,
// and asking it for val or test is a SourceError, never the whole dataset. Anything else (a
// missing path, a plain file that is not a manifest) is a SourceError naming the location and
// what was looked for. DatasetOptions::kind skips the detection, not the split rules. No door
// resolves a split any other way.
//
// Thread safety: the functions are pure (they read the file system); the returned Source
// follows the Source contract.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tilefeed/loader/remote.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {

// Split: which part of a dataset is wanted, the one split enum of the library, resolved in one
// place only (ResolveDataset below), which every door calls. A split root (a directory with
// any of train/, val/ and test/) is opened for one split: its folder of that name. CIFAR-10
// has two parts: its training batches are kTrain, and its one held-out batch,
// test_batch.bin, answers both kVal and kTest (CIFAR-10 calls it "test"; evaluation code asks
// for "val"; both mean the held-out part). Pure values and functions; thread-safe.
enum class Split { kTrain, kVal, kTest };

// "train", "val", "test": also the name of the split's folder in a split root.
const char* ToString(Split split);
// The inverse of ToString; nullopt for any other name.
std::optional<Split> ParseSplit(const std::string& name);

enum class DatasetKind { kImageFolder, kShards, kCifar10, kTar };

// "imagefolder", "shards", "cifar10", "tar".
const char* ToString(DatasetKind kind);
// The inverse of ToString; nullopt for any other name.
std::optional<DatasetKind> ParseDatasetKind(const std::string& name);

// The options of the concrete sources OpenDataset opens (loader/image_folder.h,
// loader/shard_source.h, loader/tar_dataset.h), set through DatasetOptions.
struct ImageFolderOptions {
  // File name endings that are indexed, compared ASCII case-insensitively.
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png"};
  // Read() refuses files larger than this, so one stray huge file cannot exhaust memory.
  std::size_t max_file_bytes = std::size_t{64} << 20;
  // torchvision refuses a class directory without images; set to index it anyway.
  bool allow_empty_classes = false;
};

// How ShardDataset reads records.
enum class ShardIo {
  // pread/preadv on the shard's descriptor (the default). A shard truncated after open
  // gives a short read: a bad sample naming the record.
  kPread,
  // The shards are mapped read-only at open and records copied out of the mapping: no
  // system call per record, but a page fault per uncached page, and a shard truncated
  // after open kills the process with SIGBUS on the next touch of a lost page. Only for
  // files nothing rewrites while they are read.
  kMmap,
};

struct ShardReadOptions {
  ShardIo io = ShardIo::kPread;
  // ReadMany merges reads of records of one shard that lie at most this many bytes apart
  // (the gap is read and dropped); 0 merges only adjacent records. kPread only.
  bool coalesce = true;
  std::size_t max_gap = std::size_t{64} << 10;
  // For http(s):// and s3:// locations (tilefeed/loader/remote.h): cache, retries, S3 signing.
  RemoteOptions remote;
};

struct TarOptions {
  // ReadMany merges reads of image members of one tar at most this many bytes apart (the
  // gap is read and dropped); false reads each sample alone.
  bool coalesce = true;
  std::size_t max_gap = std::size_t{64} << 10;
  // Read and write sidecar indexes: "<tar>.tfidx" beside a local tar, and for a remote tar
  // "<remote.cache_dir>/blocks/<hash>.tfidx" when a cache directory is set.
  bool sidecar = true;
  // An image member larger than this is a bad sample.
  std::uint64_t max_member_bytes = std::uint64_t{256} << 20;
  // A label of this or more is a bad sample: the class names "0" .. "C-1" are made for
  // every label up to the largest good one, so this bounds them (1,000,000 names take
  // about 32 MB). REQUIRES: > 0.
  std::int32_t max_classes = 1'000'000;
  // For http(s):// and s3:// tars: cache, retries, S3 signing.
  RemoteOptions remote;
};

struct DatasetOptions {
  // The split opened: a split root's folder of that name, or CIFAR-10's part.
  Split split = Split::kTrain;
  // Forces the kind instead of detecting it (Python's `source=`). The split rule still
  // applies to a split root.
  std::optional<DatasetKind> kind;
  // For ImageFolder locations.
  ImageFolderOptions image_folder;
  // For shard locations.
  ShardReadOptions shards;
  // For WebDataset tar locations.
  TarOptions tar;
  // For http(s):// and s3:// locations of shards or tars: cache, retries, S3 endpoint and
  // keys. Replaces shards.remote and tar.remote.
  RemoteOptions remote;
};

// What a location holds, found without reading any sample.
struct DatasetLocation {
  DatasetKind kind = DatasetKind::kImageFolder;
  // What is opened: the location itself, or its split directory ("ROOT/train").
  std::string path;
  // Set when the location was a split root or CIFAR-10: the split that `path` is.
  std::optional<Split> split;
};

// Applies the rules above to `location` for `options.split`. Throws SourceError naming
// the location when it holds no dataset or lacks the split asked for.
DatasetLocation ResolveDataset(const std::string& location, const DatasetOptions& options = {});

// True if `location` is a split root or CIFAR-10 directory that has `split`. Never throws.
bool HasSplit(const std::string& location, Split split);

struct OpenedDataset {
  std::unique_ptr<Source> source;
  DatasetLocation location;
  // Non-fatal findings worth one line each (files skipped, unreadable subdirectories),
  // naming the path. The caller prints them; the library does not log.
  std::vector<std::string> notes;
  // One line for people: "ImageFolder data/train: 1300 samples, 10 classes".
  std::string summary;
};

// Resolves `location` and opens it. Throws SourceError as ResolveDataset does, or as the
// chosen source's Open does.
OpenedDataset OpenDataset(const std::string& location, const DatasetOptions& options = {});

// What decides which samples a dataset yields, to compare two processes' views of it: the
// one identity struct of the library. A session between a reader and a trainer carries
// samples and digest (tilefeed/transport/session.h); checkpoints record the digest.
struct DatasetIdentity {
  std::uint64_t samples = 0;
  // XXH3-64 of the class names (each followed by '\n'), of every sample's label and
  // Source::Fingerprint, and of the stored bytes of kIdentitySamples samples spread over the
  // dataset; exactly as docs/wire-protocol.md ("Dataset identity") says.
  std::uint64_t digest = 0;
  std::uint64_t classes = 0;  // not on the wire: the digest covers the class names

  friend bool operator==(const DatasetIdentity&, const DatasetIdentity&) = default;
};

// Samples whose bytes the identity covers (all of a smaller dataset).
inline constexpr std::uint64_t kIdentitySamples = 64;

// The identity of `source`: reads every label and fingerprint (Source::Label, ::Fingerprint)
// and the bytes of kIdentitySamples samples (Source::Read); a sample that cannot be read
// counts as such, it does not throw. Two datasets with the same class names and counts
// differ if any sample's size (or a shard record's checksum) differs, or any sampled
// sample's bytes. The stored form counts: a folder and its packs are other datasets.
DatasetIdentity Identify(const Source& source);

// "1300 samples, 10 classes, digest 0123456789abcdef".
std::string ToString(const DatasetIdentity& identity);

}  // namespace tilefeed::loader
