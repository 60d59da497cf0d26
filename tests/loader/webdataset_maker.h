#pragma once

// Writes WebDataset tar shards with Python's tarfile module, the way webdataset's own
// TarWriter does (members of a sample consecutive, extensions in sorted order), so the
// tests read tars made by a tool of the field rather than by tilefeed.

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace tilefeed::testing {

// One member of a sample: an extension ("jpg", "cls", "txt") and its bytes.
struct TarMember {
  std::string extension;
  std::vector<std::byte> bytes;
};

struct TarSample {
  std::string key;  // may contain '/', e.g. "n01440764/img_0"
  std::vector<TarMember> members;
};

// Writes `samples` into shards named by printf-style `pattern` (e.g. ".../train-%06d.tar"),
// `per_shard` samples each, with tarfile format `format` ("pax", "gnu" or "ustar").
// Returns the shard paths. Throws std::runtime_error if python3 fails.
std::vector<std::filesystem::path> WriteWebDataset(const std::filesystem::path& scratch,
                                                   const std::string& pattern,
                                                   const std::vector<TarSample>& samples,
                                                   std::size_t per_shard,
                                                   const std::string& format = "pax");

// `count` samples of small JPEGs (sizes and content varying with the index) and labels
// index % classes, keyed "<prefix>sample_<index>".
std::vector<TarSample> MakeImageSamples(int count, int classes, const std::string& prefix = "");

}  // namespace tilefeed::testing
