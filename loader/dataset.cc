#include "tilefeed/loader/dataset.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>
#include <vector>

#include "loader/cifar.h"
#include "loader/image_folder.h"
#include "loader/shard_format.h"
#include "loader/shard_source.h"
#include "loader/tar_dataset.h"

namespace tilefeed::loader {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Trimmed(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

bool HasCifarBatches(const std::string& dir, Split split) {
  return IsRegularFile(dir + (split == Split::kTrain ? "/data_batch_1.bin" : "/test_batch.bin"));
}

bool IsCifarDirectory(const std::string& dir) {
  return HasCifarBatches(dir, Split::kTrain) || HasCifarBatches(dir, Split::kVal);
}

constexpr Split kSplits[] = {Split::kTrain, Split::kVal, Split::kTest};

bool IsSplitRoot(const std::string& dir) {
  for (const Split split : kSplits) {
    if (IsDirectory(dir + "/" + ToString(split))) return true;
  }
  return false;
}

// The splits the split root `dir` has: "train/ and val/", "train/, val/ and test/".
std::string SplitsOf(const std::string& dir) {
  std::vector<std::string> names;
  for (const Split split : kSplits) {
    if (IsDirectory(dir + "/" + ToString(split)))
      names.push_back(std::string(ToString(split)) + "/");
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

// Rules 1, 2 and 4 of the header for a directory or file that is not a split root.
DatasetKind DetectKind(const std::string& path) {
  if (IsRemoteLocation(path)) {
    // A .tar.gz/.tgz goes to the tar reader, which refuses it saying why.
    return path.ends_with(".tar") || path.ends_with(".tar.gz") || path.ends_with(".tgz")
               ? DatasetKind::kTar
               : DatasetKind::kShards;
  }
  if (IsShardDataset(path)) return DatasetKind::kShards;
  if (IsTarDataset(path)) return DatasetKind::kTar;
  if (!IsDirectory(path)) {
    throw SourceError(path, IsRegularFile(path)
                                ? "is a file but not a shard manifest (tilefeed-manifest.txt)"
                                : "no such dataset: looked for a directory (ImageFolder, "
                                  "train/, val/ and test/ splits, shards, tars, CIFAR-10), a "
                                  "shard manifest or a .tar");
  }
  if (IsCifarDirectory(path)) return DatasetKind::kCifar10;
  return DatasetKind::kImageFolder;
}

// "1 sample", "2 samples"; "1 class", "2 classes".
std::string Count(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

const char* ToString(DatasetKind kind) {
  static constexpr const char* kNames[] = {"imagefolder", "shards", "cifar10", "tar"};
  const auto i = static_cast<std::size_t>(kind);  // in DatasetKind's order
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::optional<DatasetKind> ParseDatasetKind(const std::string& name) {
  for (DatasetKind kind : {DatasetKind::kImageFolder, DatasetKind::kShards, DatasetKind::kCifar10,
                           DatasetKind::kTar}) {
    if (name == ToString(kind)) return kind;
  }
  return std::nullopt;
}

// Split (tilefeed/loader/dataset.h).
const char* ToString(Split split) {
  static constexpr const char* kNames[] = {"train", "val", "test"};
  const auto i = static_cast<std::size_t>(split);  // in Split's order
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::optional<Split> ParseSplit(const std::string& name) {
  for (const Split split : kSplits) {
    if (name == ToString(split)) return split;
  }
  return std::nullopt;
}

DatasetLocation ResolveDataset(const std::string& location, const DatasetOptions& options) {
  DatasetLocation out;
  out.path = Trimmed(location);
  if (out.path.empty()) throw SourceError("--data", "no dataset location given");
  // A split root is recognised whatever kind is forced: its splits are what is opened.
  if (!IsShardDataset(out.path) && IsDirectory(out.path) && !IsCifarDirectory(out.path) &&
      IsSplitRoot(out.path)) {
    const std::string split_path = out.path + "/" + ToString(options.split);
    if (!IsDirectory(split_path)) {
      throw SourceError(out.path, std::string("no ") + ToString(options.split) +
                                      "/ split; it has " + SplitsOf(out.path) +
                                      " (a root with train/, val/ or test/ holds splits, not "
                                      "classes)");
    }
    out.path = split_path;
    out.split = options.split;
  }
  out.kind = options.kind ? *options.kind : DetectKind(out.path);
  if (out.kind == DatasetKind::kCifar10) {
    if (!HasCifarBatches(out.path, options.split)) {
      throw SourceError(
          out.path,
          std::string("CIFAR-10 directory without its ") + ToString(options.split) + " batches (" +
              (options.split == Split::kTrain ? "data_batch_1.bin" : "test_batch.bin") + ")");
    }
    out.split = options.split;
  } else if (!out.split && options.split != Split::kTrain) {
    // Never the whole dataset for another split: the split is asked for, never guessed.
    throw SourceError(out.path, std::string("no ") + ToString(options.split) +
                                    "/ split: it is one dataset without splits (no train/, "
                                    "val/ or test/ directory, not CIFAR-10), read as the "
                                    "train split");
  }
  return out;
}

bool HasSplit(const std::string& location, Split split) {
  const std::string path = Trimmed(location);
  if (IsShardDataset(path)) return false;
  if (IsCifarDirectory(path)) return HasCifarBatches(path, split);
  return IsDirectory(path + "/" + ToString(split));
}

OpenedDataset OpenDataset(const std::string& location, const DatasetOptions& options) {
  OpenedDataset out;
  out.location = ResolveDataset(location, options);
  const std::string& path = out.location.path;
  std::string what;
  switch (out.location.kind) {
    case DatasetKind::kImageFolder: {
      auto folder = ImageFolder::Open(path, options.image_folder);
      out.notes = folder->warnings();
      out.source = std::move(folder);
      what = "ImageFolder";
      break;
    }
    case DatasetKind::kShards: {
      ShardReadOptions shard_options = options.shards;
      shard_options.remote = options.remote;
      auto shards = ShardDataset::Open(path, shard_options);
      what = std::string("shards (") + detail::CodecName(shards->codec()) + ", " +
             Count(shards->shard_count(), "shard", "shards") + ")";
      out.source = std::move(shards);
      break;
    }
    case DatasetKind::kTar: {
      TarOptions tar_options = options.tar;
      tar_options.remote = options.remote;
      auto tars = TarDataset::Open(path, tar_options);
      what = "WebDataset tars (" + Count(tars->tar_count(), "tar", "tars") + ")";
      if (tars->ignored_keys() > 0) {
        out.notes.push_back(path + ": " + Count(tars->ignored_keys(), "key", "keys") +
                            " with neither an image nor a .cls member ignored");
      }
      out.source = std::move(tars);
      break;
    }
    case DatasetKind::kCifar10:
      out.source = Cifar10::Open(path, options.split);
      what = std::string("CIFAR-10 ") + (options.split == Split::kTrain ? "train" : "test");
      break;
  }
  out.summary = what + " " + path + ": " + Count(out.source->size(), "sample", "samples") + ", " +
                Count(out.source->class_names().size(), "class", "classes");
  return out;
}

DatasetIdentity Identify(const Source& source) {
  DatasetIdentity id;
  id.samples = source.size();
  id.classes = source.class_names().size();
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  for (const std::string& name : source.class_names()) {
    XXH3_64bits_update(state, name.data(), name.size());
    XXH3_64bits_update(state, "\n", 1);
  }
  // Every sample's label and fingerprint, sample 0 first (docs/wire-protocol.md).
  for (std::size_t i = 0; i < source.size(); ++i) {
    const std::int32_t label = source.Label(i);
    std::uint64_t fingerprint = std::numeric_limits<std::uint64_t>::max();  // unreadable
    try {
      fingerprint = source.Fingerprint(i);
    } catch (const SourceError&) {
    }
    XXH3_64bits_update(state, &label, sizeof(label));
    XXH3_64bits_update(state, &fingerprint, sizeof(fingerprint));
  }
  // The content: the stored bytes of kIdentitySamples samples spread evenly over the
  // dataset, each after its index and byte count (docs/wire-protocol.md, "Dataset identity").
  const std::uint64_t n = source.size();
  const std::uint64_t samples = std::min<std::uint64_t>(n, kIdentitySamples);
  std::vector<std::byte> bytes;
  for (std::uint64_t k = 0; k < samples; ++k) {
    // floor(k * n / samples), without overflow.
    const std::uint64_t index = k * (n / samples) + k * (n % samples) / samples;
    std::uint64_t count = std::numeric_limits<std::uint64_t>::max();  // unreadable
    try {
      source.Read(static_cast<std::size_t>(index), bytes);
      count = bytes.size();
    } catch (const SourceError&) {
      bytes.clear();
    }
    XXH3_64bits_update(state, &index, sizeof(index));
    XXH3_64bits_update(state, &count, sizeof(count));
    if (!bytes.empty()) XXH3_64bits_update(state, bytes.data(), bytes.size());
  }
  id.digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return id;
}

std::string ToString(const DatasetIdentity& identity) {
  return Count(identity.samples, "sample", "samples") + ", " +
         Count(identity.classes, "class", "classes") + ", digest " + detail::Hex(identity.digest);
}

}  // namespace tilefeed::loader
