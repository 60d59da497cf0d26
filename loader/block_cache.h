// The on-disk block cache of remote files (RemoteOptions::cache_dir), shared by the
// processes of one host: checksummed blocks, LRU eviction under an flock. The protocol is
// described at the top of loader/http_file.cc, its only user. Not installed.

#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
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

class BlockCache {
 public:
  BlockCache(const RemoteOptions& o, const std::string& url, std::uint64_t file_size,
             const std::string& etag);

  // Reads [from, from + length) of block `block` (block_bytes long) into the parts of
  // `out` if it is cached and the checksums of the chunks read are right; a block that
  // fails them is removed (counted in cache_bad). `scratch` holds the chunks read.
  bool Lookup(std::uint64_t block, std::uint64_t from, std::span<const iovec> out,
              std::uint64_t block_bytes, std::vector<std::byte>& scratch) const;

  // Stores a whole block with its checksums, evicting least recently used blocks to stay
  // under the limit. Returns an empty string, or why the block could not be stored.
  std::string Store(std::uint64_t block, std::span<const std::byte> bytes) const;

 private:
  // Checksummed chunks of a cached block: a hit reads and checks only the chunks it needs.
  static constexpr std::uint64_t kCacheChunk = std::uint64_t{64} << 10;

  static std::uint64_t ChunksOf(std::uint64_t block_bytes) {
    return (block_bytes + kCacheChunk - 1) / kCacheChunk;
  }
  static std::uint64_t LoadLittleEndian64(const std::byte* p);

  struct CachedBlock {
    std::int64_t mtime_ns;
    std::uint64_t bytes;
    std::string name;
  };

  // Under the lock: removes LRU blocks until `incoming` more bytes fit.
  bool MakeRoom(std::uint64_t incoming) const;

  // The block's bytes and then their chunk checksums, written to a temporary name and
  // renamed into place. Returns an empty string, or the failed call and its errno.
  std::string Write(std::uint64_t block, std::span<const std::byte> bytes) const;

  const RemoteOptions& options_;
  std::string dir_;
  std::string prefix_;
};

}  // namespace tilefeed::loader::detail
