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
//      of any codec (tilefeed/loader/shard_source.h);
//   1b. a path ending in ".tar" (a tar file or a brace pattern of them), or a directory
//      holding *.tar files and no manifest: WebDataset tar shards (tilefeed/loader/tar_dataset.h);
//   2. a directory holding CIFAR-10 binary batches (data_batch_N.bin or test_batch.bin):
//      CIFAR-10, its training batches for Split::kTrain and test_batch.bin for kVal and kTest;
//   3. a directory with a subdirectory named exactly "train", "val" or "test": a split root;
//      the split asked for (DatasetOptions::split) is ROOT/<split>, opened by these same rules
//      (one level: a split root inside a split is an ImageFolder). It is never read as an
//      ImageFolder whose classes are "train" and "val", and a split it lacks is a SourceError
//      naming the root and the splits it has;
//   4. any other directory: an ImageFolder (tilefeed/loader/image_folder.h).
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

#include "tilefeed/loader/image_folder.h"
#include "tilefeed/loader/remote.h"
#include "tilefeed/loader/shard_source.h"
#include "tilefeed/loader/source.h"
#include "tilefeed/loader/split.h"
#include "tilefeed/loader/tar_dataset.h"

namespace tilefeed::loader {

enum class DatasetKind { kImageFolder, kShards, kCifar10, kTar };

// "imagefolder", "shards", "cifar10", "tar".
const char* ToString(DatasetKind kind);
// The inverse of ToString; nullopt for any other name.
std::optional<DatasetKind> ParseDatasetKind(const std::string& name);

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
  // XXH3-64 of the class names (each followed by '\n'), of every sample's label, and of
  // the stored bytes of kIdentitySamples samples spread over the dataset; exactly as
  // docs/wire-protocol.md ("Dataset identity") says.
  std::uint64_t digest = 0;
  std::uint64_t classes = 0;  // not on the wire: the digest covers the class names

  friend bool operator==(const DatasetIdentity&, const DatasetIdentity&) = default;
};

// Samples whose bytes the identity covers (all of a smaller dataset).
inline constexpr std::uint64_t kIdentitySamples = 64;

// The identity of `source`: reads every label through Source::Label and the bytes of
// kIdentitySamples samples through Source::Read (a sample that cannot be read counts as
// such, it does not throw). Two datasets of other images with the same class names and
// counts differ unless all those samples' bytes are equal. The stored bytes count: a
// folder and its --codec jpeg pack agree, a --codec jpeg-index or raw pack (other bytes) does not.
DatasetIdentity Identify(const Source& source);

// "1300 samples, 10 classes, digest 0123456789abcdef".
std::string ToString(const DatasetIdentity& identity);

}  // namespace tilefeed::loader
