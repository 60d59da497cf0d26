// The on-disk block cache of remote files (RemoteOptions::cache_dir), shared by the
// processes of one host: checksummed blocks, LRU eviction under an flock. The protocol is
// described at the top of loader/http_file.cc. Not installed.

#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "tilefeed/loader/remote.h"

namespace tilefeed::loader::detail {

// Adds `n` to o.counters' `member`, when the options have counters.
inline void Count(std::atomic<std::uint64_t> RemoteCounters::*member, const RemoteOptions& o,
                  std::uint64_t n = 1) {
  if (o.counters != nullptr) (o.counters->*member).fetch_add(n, std::memory_order_relaxed);
}

// The cache's file directory "<cache_dir>/blocks" (blocks and remote tars' sidecar indexes),
// each of cache_dir and it created 0700 if missing. Throws SourceError naming a directory that
// cannot be made, or that another user owns or group or others can write: blocks planted
// there would be served as the server's bytes.
std::string CacheFilesDir(const RemoteOptions& o);

// Writes `parts` as the file `path` in CacheFilesDir(o) under the cache's lock, first removing
// least recently used files so that the directory stays under o.cache_limit. Returns an empty
// string, or why the file could not be stored.
std::string StoreInCache(const RemoteOptions& o, const std::string& path,
                         std::initializer_list<std::span<const std::byte>> parts);

class BlockCache {
 public:
  // The blocks of the version of `url` that `validator` (its ETag, or Last-Modified) names.
  BlockCache(const RemoteOptions& o, const std::string& url, std::uint64_t file_size,
             const std::string& validator);

  // Reads [from, from + length) of block `block` (block_bytes long) into the parts of
  // `out` if it is cached and the checksums of the chunks read are right; a block that
  // fails them is removed (counted in cache_bad). `scratch` holds the chunks read.
  bool Lookup(std::uint64_t block, std::uint64_t from, std::span<const iovec> out,
              std::uint64_t block_bytes, std::vector<std::byte>& scratch) const;

  // Stores a whole block, its bytes then their chunk checksums, with StoreInCache. Returns an
  // empty string, or why the block could not be stored.
  std::string Store(std::uint64_t block, std::span<const std::byte> bytes) const;

 private:
  // Checksummed chunks of a cached block: a hit reads and checks only the chunks it needs.
  static constexpr std::uint64_t kCacheChunk = std::uint64_t{64} << 10;

  static std::uint64_t ChunksOf(std::uint64_t block_bytes) {
    return (block_bytes + kCacheChunk - 1) / kCacheChunk;
  }
  static std::uint64_t LoadLittleEndian64(const std::byte* p);

  const RemoteOptions& options_;
  std::string prefix_;
};

}  // namespace tilefeed::loader::detail
