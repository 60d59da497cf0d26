// Remote dataset files over HTTP(S) and S3 with libcurl: range requests, retries with
// exponential backoff, and an on-disk block cache shared by the processes of one host.
//
// Cache protocol: blocks are files "<cache_dir>/blocks/<16 hex digits>-<block>" holding
// block `block` (cache_block bytes, the last one shorter) of one remote file; the hex is
// XXH3 of the URL, the file's size and the block size, so a file that changed size or a
// cache with another block size never matches. A reader opens a block without any lock
// (a block is only ever created complete, by rename) and bumps its mtime, which is the
// LRU clock. A writer takes an exclusive flock on "<cache_dir>/lock", sums the block
// files, removes the least recently used until the new block fits under cache_limit,
// writes it to a temporary name and renames it into place, then unlocks: the directory
// never holds more than cache_limit bytes of blocks, whatever the number of processes.
// Removing a block that another process has open is safe (POSIX keeps the data until
// it is closed); a block removed between lookup and open is simply a miss.

#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tilefeed/loader/detail/file_io.h"
#include "tilefeed/loader/detail/range_file.h"
#include "tilefeed/loader/detail/shard_format.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader::detail {
namespace {

void Count(std::atomic<std::uint64_t> RemoteCounters::*member, const RemoteOptions& o,
           std::uint64_t n = 1) {
  if (o.counters != nullptr) (o.counters->*member).fetch_add(n, std::memory_order_relaxed);
}

struct CurlDeleter {
  void operator()(CURL* curl) const noexcept { curl_easy_cleanup(curl); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;

// Where the body of one response goes: consecutive bytes scattered over `parts`.
struct Sink {
  std::span<const iovec> parts;
  std::size_t part = 0;
  std::size_t at = 0;  // within parts[part]
  std::uint64_t received = 0;
  bool overflow = false;
};

std::size_t WriteBody(char* data, std::size_t size, std::size_t count, void* user) {
  auto& sink = *static_cast<Sink*>(user);
  std::size_t left = size * count;
  const std::size_t total = left;
  while (left > 0) {
    while (sink.part < sink.parts.size() && sink.at == sink.parts[sink.part].iov_len) {
      ++sink.part;
      sink.at = 0;
    }
    if (sink.part == sink.parts.size()) {
      sink.overflow = true;
      return 0;  // more than asked for: abort the transfer
    }
    const iovec& p = sink.parts[sink.part];
    const std::size_t n = std::min(left, p.iov_len - sink.at);
    std::memcpy(static_cast<char*>(p.iov_base) + sink.at, data, n);
    sink.at += n;
    data += n;
    left -= n;
    sink.received += n;
  }
  return total;
}

std::size_t Discard(char*, std::size_t size, std::size_t count, void*) { return size * count; }

bool Transient(CURLcode code, long status) {
  switch (code) {
    case CURLE_OK:
      return status == 408 || status == 429 || status >= 500;
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

// A pool of easy handles, so connections are kept alive between requests; one per file.
class HandlePool {
 public:
  CurlHandle Acquire() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        CurlHandle h = std::move(idle_.back());
        idle_.pop_back();
        return h;
      }
    }
    return CurlHandle(curl_easy_init());
  }
  void Release(CurlHandle h) {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(h));
  }

 private:
  std::mutex mu_;
  std::vector<CurlHandle> idle_;
};

// "s3://bucket/key" as an HTTP URL: path style under the endpoint, else AWS's own host.
std::string HttpUrlOf(const std::string& location, const RemoteOptions& o) {
  if (!location.starts_with("s3://")) return location;
  const std::string rest = location.substr(5);
  const std::size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0) {
    throw SourceError(location, "malformed s3 location (want s3://bucket/key)");
  }
  if (!o.s3_endpoint.empty()) {
    std::string endpoint = o.s3_endpoint;
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    return endpoint + "/" + rest;
  }
  return "https://" + rest.substr(0, slash) + ".s3." + o.aws_region + ".amazonaws.com" +
         rest.substr(slash);
}

class BlockCache {
 public:
  BlockCache(const RemoteOptions& o, const std::string& url, std::uint64_t file_size)
      : options_(o), dir_(o.cache_dir + "/blocks") {
    ::mkdir(o.cache_dir.c_str(), 0755);
    ::mkdir(dir_.c_str(), 0755);
    struct stat st;
    if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      throw SourceError(o.cache_dir, "cannot create the cache directory: " + ErrnoMessage(errno));
    }
    if (o.cache_limit < o.cache_block || o.cache_block == 0) {
      throw SourceError(o.cache_dir, "cache_limit must be at least one block (" +
                                         std::to_string(o.cache_block) + " bytes)");
    }
    const std::string id =
        url + "\n" + std::to_string(file_size) + "\n" + std::to_string(o.cache_block);
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016" PRIx64, Checksum(std::as_bytes(std::span(id))));
    prefix_ = dir_ + "/" + hex + "-";
  }

  // Copies [from, from + out.size()) of block `block` into `out` if it is cached.
  // Reads [from, from + length) of block `block` into the parts of `out` if it is cached.
  // `count` says whether a hit counts in RemoteCounters::cache_hits.
  bool Lookup(std::uint64_t block, std::uint64_t from, std::span<const iovec> out,
              std::uint64_t block_bytes, bool count = true) const {
    const std::string path = prefix_ + std::to_string(block);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != block_bytes) {
      return false;
    }
    std::size_t total = 0;
    for (const iovec& p : out) total += p.iov_len;
    ssize_t n;
    do {
      n = ::preadv(fd.get(), out.data(), static_cast<int>(out.size()), static_cast<off_t>(from));
    } while (n < 0 && errno == EINTR);
    if (n < 0 || static_cast<std::size_t>(n) != total) return false;
    // The LRU clock, at one-second resolution: no inode write on most hits.
    timespec now;
    ::clock_gettime(CLOCK_REALTIME, &now);
    if (now.tv_sec > st.st_mtim.tv_sec) ::futimens(fd.get(), nullptr);
    if (count) Count(&RemoteCounters::cache_hits, options_);
    return true;
  }

  // Stores a whole block, evicting least recently used blocks to stay under the limit.
  // Best effort: a failure leaves the block uncached.
  void Store(std::uint64_t block, std::span<const std::byte> bytes) const {
    const std::string lock_path = options_.cache_dir + "/lock";
    UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!lock) return;
    int rc;
    do {
      rc = ::flock(lock.get(), LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) return;
    if (MakeRoom(bytes.size())) Write(block, bytes);
    ::flock(lock.get(), LOCK_UN);
  }

 private:
  struct CachedBlock {
    std::int64_t mtime_ns;
    std::uint64_t bytes;
    std::string name;
  };

  // Under the lock: removes LRU blocks until `incoming` more bytes fit.
  bool MakeRoom(std::uint64_t incoming) const {
    std::vector<CachedBlock> blocks;
    std::uint64_t total = 0;
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) return false;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      struct stat st;
      const std::string name = dir_ + "/" + e->d_name;
      if (::stat(name.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (std::strstr(e->d_name, ".tmp") != nullptr) {
        ::unlink(name.c_str());  // left by a writer that died holding the lock
        continue;
      }
      const auto bytes = static_cast<std::uint64_t>(st.st_size);
      total += bytes;
      blocks.push_back(
          {std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec, bytes, name});
    }
    ::closedir(d);
    if (total + incoming <= options_.cache_limit) return true;
    std::sort(blocks.begin(), blocks.end(),
              [](const CachedBlock& a, const CachedBlock& b) { return a.mtime_ns < b.mtime_ns; });
    for (const CachedBlock& b : blocks) {
      if (total + incoming <= options_.cache_limit) break;
      if (::unlink(b.name.c_str()) == 0) {
        total -= b.bytes;
        Count(&RemoteCounters::evictions, options_);
      }
    }
    return total + incoming <= options_.cache_limit;
  }

  void Write(std::uint64_t block, std::span<const std::byte> bytes) const {
    const std::string path = prefix_ + std::to_string(block);
    const std::string temp = path + ".tmp";
    UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) return;
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    if (done != bytes.size() || ::rename(temp.c_str(), path.c_str()) != 0) {
      ::unlink(temp.c_str());
      return;
    }
    Count(&RemoteCounters::cache_fills, options_);
  }

  const RemoteOptions& options_;
  std::string dir_;
  std::string prefix_;
};

class HttpFile final : public RangeFile {
 public:
  HttpFile(std::string location, std::string url, const RemoteOptions& options)
      : RangeFile(std::move(location), 0), url_(std::move(url)), options_(options) {}

  // Finds the size with a HEAD request unless it is `known`; then sets up the cache, which
  // keys on it.
  void Open(std::optional<std::uint64_t> known) {
    std::uint64_t size = known.value_or(0);
    if (!known) {
      const std::string error = Perform(0, 0, nullptr, &size);
      if (!error.empty()) throw SourceError(name(), error);
    }
    set_size(size);
    if (!options_.cache_dir.empty()) cache_.emplace(options_, url_, size);
  }

  std::string ReadV(std::uint64_t offset, std::span<const iovec> parts) const override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t total = 0;
    for (const iovec& p : parts) total += p.iov_len;
    if (offset > size() || total > size() - offset) {
      return "short read: range ends at byte " + std::to_string(offset + total) +
             ", the file has " + std::to_string(size());
    }
    if (total == 0) return {};
    if (!cache_) return Perform(offset, total, &parts, nullptr);
    return ReadCached(offset, total, parts);
  }

  std::uint64_t reads() const override { return reads_.load(std::memory_order_relaxed); }

 private:
  std::string ReadCached(std::uint64_t offset, std::uint64_t total,
                         std::span<const iovec> parts) const;
  // One request with retries: a HEAD when `parts` is null (sets *size), else a GET of
  // [offset, offset + length) into `parts`. Returns an empty string or the last error.
  std::string Perform(std::uint64_t offset, std::uint64_t length,
                      const std::span<const iovec>* parts, std::uint64_t* size) const;
  std::string Once(CURL* curl, std::uint64_t offset, std::uint64_t length,
                   const std::span<const iovec>* parts, std::uint64_t* size, bool& transient) const;

  std::string url_;
  const RemoteOptions options_;
  std::optional<BlockCache> cache_;
  mutable HandlePool pool_;
  mutable std::atomic<std::uint64_t> reads_{0};
};

std::string HttpFile::Once(CURL* curl, std::uint64_t offset, std::uint64_t length,
                           const std::span<const iovec>* parts, std::uint64_t* size_out,
                           bool& transient) const {
  curl_easy_reset(curl);
  char range[64];
  Sink sink;
  curl_easy_setopt(curl, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout.count()));
  if (name().starts_with("s3://") && !options_.aws_access_key_id.empty()) {
    const std::string sigv4 = "aws:amz:" + options_.aws_region + ":s3";
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());  // libcurl copies strings
    curl_easy_setopt(curl, CURLOPT_USERNAME, options_.aws_access_key_id.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, options_.aws_secret_access_key.c_str());
  }
  if (parts == nullptr) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  } else {
    std::snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, offset, offset + length - 1);
    curl_easy_setopt(curl, CURLOPT_RANGE, range);
    sink.parts = *parts;
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  }
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  Count(&RemoteCounters::requests, options_);
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  Count(&RemoteCounters::bytes, options_, sink.received);
  transient = Transient(code, status);
  if (sink.overflow)
    return "the server sent more than the " + std::to_string(length) + " bytes asked for";
  if (code != CURLE_OK) {
    return std::string("libcurl: ") + (error[0] != 0 ? error : curl_easy_strerror(code));
  }
  if (parts == nullptr) {
    if (status != 200) return "HTTP " + std::to_string(status);
    curl_off_t content_length = -1;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &content_length);
    if (content_length < 0) return "the server gave no Content-Length";
    *size_out = static_cast<std::uint64_t>(content_length);
    return {};
  }
  // 206 for a range; 200 is accepted only when the range is the whole file.
  if (status != 206 && !(status == 200 && offset == 0 && length == size())) {
    return status == 200 ? "the server ignored the Range header (HTTP 200)"
                         : "HTTP " + std::to_string(status);
  }
  if (sink.received != length) {
    return "short read: " + std::to_string(sink.received) + " of " + std::to_string(length) +
           " bytes";
  }
  return {};
}

std::string HttpFile::Perform(std::uint64_t offset, std::uint64_t length,
                              const std::span<const iovec>* parts, std::uint64_t* size) const {
  CurlHandle curl = pool_.Acquire();
  if (!curl) return "libcurl: curl_easy_init failed";
  std::string error;
  auto wait = options_.backoff;
  for (int attempt = 0;; ++attempt) {
    bool transient = false;
    error = Once(curl.get(), offset, length, parts, size, transient);
    if (error.empty() || !transient || attempt >= options_.retries) break;
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, std::chrono::milliseconds(2000));
    Count(&RemoteCounters::retries, options_);
  }
  pool_.Release(std::move(curl));
  if (!error.empty() && options_.retries > 0) {
    error += " (after " + std::to_string(options_.retries + 1) + " tries)";
  }
  return error;
}

// The parts of `parts` that hold bytes [from, from + length) of the logical range they
// cover, into `out`.
void SliceParts(std::span<const iovec> parts, std::uint64_t from, std::uint64_t length,
                std::vector<iovec>& out) {
  out.clear();
  std::uint64_t begin = 0;
  for (const iovec& p : parts) {
    const std::uint64_t end = begin + p.iov_len;
    if (length > 0 && from < end && from >= begin) {
      const auto skip = static_cast<std::size_t>(from - begin);
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(length, p.iov_len - skip));
      if (n > 0) out.push_back({static_cast<char*>(p.iov_base) + skip, n});
      from += n;
      length -= n;
    }
    begin = end;
  }
}

// Copies bytes [from, from + src.size()) of the logical range that `parts` holds.
void Scatter(std::span<const iovec> parts, std::uint64_t from, std::span<const std::byte> src) {
  std::uint64_t begin = 0;
  for (const iovec& p : parts) {
    const std::uint64_t end = begin + p.iov_len;
    if (!src.empty() && from < end) {
      const auto skip = static_cast<std::size_t>(from - begin);
      const std::size_t n = std::min<std::size_t>(src.size(), p.iov_len - skip);
      std::memcpy(static_cast<char*>(p.iov_base) + skip, src.data(), n);
      src = src.subspan(n);
      from += n;
    }
    begin = end;
  }
}

std::string HttpFile::ReadCached(std::uint64_t offset, std::uint64_t total,
                                 std::span<const iovec> parts) const {
  const std::uint64_t block_size = options_.cache_block;
  const std::uint64_t first = offset / block_size;
  const std::uint64_t last = (offset + total - 1) / block_size;
  std::vector<std::byte> scratch;
  std::vector<iovec> slice;
  std::uint64_t b = first;
  while (b <= last) {
    const std::uint64_t block_begin = b * block_size;
    const std::uint64_t block_bytes = std::min(block_size, size() - block_begin);
    const std::uint64_t from = std::max(offset, block_begin);
    const std::uint64_t to = std::min(offset + total, block_begin + block_bytes);
    SliceParts(parts, from - offset, to - from, slice);
    if (cache_->Lookup(b, from - block_begin, slice, block_bytes)) {
      ++b;
      continue;
    }
    // A miss: fetch this block and the following missed ones up to `last` in one request.
    std::uint64_t end = b + 1;
    std::byte probe_byte;
    const iovec probe{&probe_byte, 1};
    while (end <= last) {
      const std::uint64_t eb = std::min(block_size, size() - end * block_size);
      if (cache_->Lookup(end, 0, std::span(&probe, 1), eb, /*count=*/false)) break;
      ++end;
    }
    const std::uint64_t fetch_end = std::min(end * block_size, size());
    scratch.resize(static_cast<std::size_t>(fetch_end - block_begin));
    const iovec whole{scratch.data(), scratch.size()};
    const std::span<const iovec> one(&whole, 1);
    if (std::string error = Perform(block_begin, scratch.size(), &one, nullptr); !error.empty()) {
      return error;
    }
    for (std::uint64_t k = b; k < end; ++k) {
      const std::uint64_t kb = k * block_size - block_begin;
      const std::uint64_t kn = std::min(block_size, size() - k * block_size);
      cache_->Store(k, std::span<const std::byte>(scratch).subspan(kb, kn));
    }
    const std::uint64_t use_from = std::max(offset, block_begin);
    const std::uint64_t use_to = std::min(offset + total, fetch_end);
    Scatter(parts, use_from - offset,
            std::span<const std::byte>(scratch).subspan(use_from - block_begin, use_to - use_from));
    b = end;
  }
  return {};
}

}  // namespace

std::unique_ptr<RangeFile> OpenHttpFile(const std::string& location, const RemoteOptions& options,
                                        std::optional<std::uint64_t> size) {
  // Thread-safe and reference-counted in libcurl >= 7.84; paired with no cleanup, as
  // libcurl allows, since other users in the process may still hold handles.
  static const CURLcode kInit = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (kInit != CURLE_OK) throw SourceError(location, "libcurl: curl_global_init failed");
  auto file = std::make_unique<HttpFile>(location, HttpUrlOf(location, options), options);
  file->Open(size);
  return file;
}

}  // namespace tilefeed::loader::detail
