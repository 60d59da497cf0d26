// The on-disk block cache's members (loader/block_cache.h): lookups that check each chunk's
// checksum, stores that evict least recently used blocks under the cache's lock. The
// protocol is described at the top of loader/http_file.cc.

#include "loader/block_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <tuple>

#include "loader/file_io.h"
#include "loader/shard_format.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader::detail {

namespace {

// Under the lock: removes least recently used files of `dir` until `incoming` more bytes fit.
bool MakeRoom(const RemoteOptions& o, const std::string& dir, std::uint64_t incoming) {
  std::vector<std::tuple<std::int64_t, std::uint64_t, std::string>> files;  // mtime (ns), bytes
  std::uint64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    const std::string name = dir + "/" + e->d_name;
    if (::stat(name.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (std::strstr(e->d_name, ".tmp") != nullptr) {
      ::unlink(name.c_str());  // left by a writer that died holding the lock
      continue;
    }
    const auto bytes = static_cast<std::uint64_t>(st.st_size);
    total += bytes;
    files.emplace_back(std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec, bytes,
                       name);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  for (const auto& [mtime_ns, bytes, name] : files) {
    if (total + incoming <= o.cache_limit) break;
    if (::unlink(name.c_str()) == 0) {
      total -= bytes;
      Count(&RemoteCounters::evictions, o);
    }
  }
  return total + incoming <= o.cache_limit;
}

}  // namespace

std::string CacheFilesDir(const RemoteOptions& o) {
  for (const std::string& dir : {o.cache_dir, o.cache_dir + "/blocks"}) {
    if (const auto problem = PrivateDirectoryProblem(dir)) {
      throw SourceError(dir, "refusing the cache directory " + *problem +
                                 " (blocks planted there would be served; use a directory "
                                 "of your own that only you can write)");
    }
  }
  return o.cache_dir + "/blocks";
}

std::string StoreInCache(const RemoteOptions& o, const std::string& path,
                         std::initializer_list<std::span<const std::byte>> parts) {
  const std::string lock_path = o.cache_dir + "/lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock) return "cannot open " + lock_path + ": " + ErrnoMessage(errno);
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return "cannot lock " + lock_path + ": " + ErrnoMessage(errno);
  }
  std::uint64_t bytes = 0;
  for (const auto& part : parts) bytes += part.size();
  const std::string dir = o.cache_dir + "/blocks";
  if (!MakeRoom(o, dir, bytes)) return "cannot evict files from " + dir + " to make room";
  return ReplaceFile(path, path + ".tmp", parts, false).value_or("");  // unlocks on closing
}

BlockCache::BlockCache(const RemoteOptions& o, const std::string& url, std::uint64_t file_size,
                       const std::string& validator)
    : options_(o) {
  if (o.cache_limit < o.cache_block || o.cache_block == 0) {
    throw SourceError(o.cache_dir, "cache_limit must be at least one block (" +
                                       std::to_string(o.cache_block) + " bytes)");
  }
  // The validator keys the version too: a file rewritten with the same size does not hit
  // the old blocks.
  const std::string id = "checksummed blocks v2\n" + url + "\n" + std::to_string(file_size) + "\n" +
                         std::to_string(o.cache_block) + "\n" + validator;
  prefix_ = CacheFilesDir(o) + "/" + Hex(Checksum(std::as_bytes(std::span(id)))) + "-";
}

bool BlockCache::Lookup(std::uint64_t block, std::uint64_t from, std::span<const iovec> out,
                        std::uint64_t block_bytes, std::vector<std::byte>& scratch) const {
  const std::string path = prefix_ + std::to_string(block);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 ||
      static_cast<std::uint64_t>(st.st_size) != block_bytes + 8 * ChunksOf(block_bytes)) {
    return false;
  }
  std::uint64_t total = 0;
  for (const iovec& p : out) total += p.iov_len;
  if (total == 0) return true;
  // The chunks [first, last] that hold the bytes, then their checksums.
  const std::uint64_t first = from / kCacheChunk;
  const std::uint64_t last = (from + total - 1) / kCacheChunk;
  const std::uint64_t begin = first * kCacheChunk;
  const std::uint64_t end = std::min((last + 1) * kCacheChunk, block_bytes);
  const std::uint64_t sums = 8 * (last - first + 1);
  scratch.resize(static_cast<std::size_t>(end - begin + sums));
  if (PreadFull(fd.get(), scratch.data(), end - begin, static_cast<off_t>(begin)) !=
          static_cast<ssize_t>(end - begin) ||
      PreadFull(fd.get(), scratch.data() + (end - begin), sums,
                static_cast<off_t>(block_bytes + 8 * first)) != static_cast<ssize_t>(sums)) {
    return false;
  }
  for (std::uint64_t c = first; c <= last; ++c) {
    const std::uint64_t chunk_begin = c * kCacheChunk - begin;
    const std::uint64_t chunk_end = std::min((c + 1) * kCacheChunk, block_bytes) - begin;
    const std::span<const std::byte> chunk(scratch.data() + chunk_begin, chunk_end - chunk_begin);
    if (Checksum(chunk) != LoadLittleEndian64(scratch.data() + (end - begin) + 8 * (c - first))) {
      ::unlink(path.c_str());  // fetched again and stored afresh by this read
      Count(&RemoteCounters::cache_bad, options_);
      return false;
    }
  }
  std::uint64_t at = from - begin;
  for (const iovec& p : out) {
    std::memcpy(p.iov_base, scratch.data() + at, p.iov_len);
    at += p.iov_len;
  }
  // The LRU clock, at one-second resolution: no inode write on most hits.
  timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (now.tv_sec > st.st_mtim.tv_sec) ::futimens(fd.get(), nullptr);
  Count(&RemoteCounters::cache_hits, options_);
  return true;
}

std::string BlockCache::Store(std::uint64_t block, std::span<const std::byte> bytes) const {
  std::vector<std::byte> sums(8 * ChunksOf(bytes.size()));
  for (std::uint64_t c = 0; c * kCacheChunk < bytes.size(); ++c) {
    const std::uint64_t begin = c * kCacheChunk;
    const std::uint64_t sum =
        Checksum(bytes.subspan(begin, std::min<std::uint64_t>(kCacheChunk, bytes.size() - begin)));
    for (int i = 0; i < 8; ++i) sums[8 * c + i] = static_cast<std::byte>(sum >> (8 * i));
  }
  std::string error = StoreInCache(options_, prefix_ + std::to_string(block), {bytes, sums});
  if (error.empty()) Count(&RemoteCounters::cache_fills, options_);
  return error;
}

std::uint64_t BlockCache::LoadLittleEndian64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

}  // namespace tilefeed::loader::detail
