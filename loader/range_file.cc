#include "loader/range_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "loader/file_io.h"
#include "loader/option_specs.h"
#include "tilefeed/loader/remote.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader {

std::optional<std::string> RemoteOptionsProblem(const RemoteOptions& options) {
  if (auto problem =
          RangeProblem(kCacheLimit, "cache_limit", static_cast<double>(options.cache_limit))) {
    return problem;
  }
  if (auto problem = RangeProblem(kRemoteRetries, "remote_retries", options.retries)) {
    return problem;
  }
  return RangeProblem(kRemoteInFlight, "remote_in_flight", options.max_in_flight);
}

bool IsRemoteLocation(std::string_view location) {
  return location.starts_with("http://") || location.starts_with("https://") ||
         location.starts_with("s3://");
}

namespace detail {
namespace {

// A local regular file read with preadv; owns its descriptor.
class LocalFile final : public RangeFile {
 public:
  LocalFile(std::string path, std::uint64_t size, UniqueFd fd)
      : RangeFile(std::move(path), size), fd_(std::move(fd)) {}

  std::string ReadV(std::uint64_t offset, std::span<const iovec> parts) const override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    std::size_t total = 0;
    for (const iovec& p : parts) total += p.iov_len;
    ssize_t n;
    do {
      n = ::preadv(fd_.get(), parts.data(), static_cast<int>(parts.size()),
                   static_cast<off_t>(offset));
    } while (n < 0 && errno == EINTR);
    if (n < 0) return "read: " + ErrnoMessage(errno);
    auto done = static_cast<std::size_t>(n);
    // Short reads are rare on regular files; finish part by part with the retrying pread.
    std::size_t begin = 0;
    for (const iovec& p : parts) {
      const std::size_t end = begin + p.iov_len;
      if (done < end && done >= begin) {
        const ssize_t m = PreadFull(fd_.get(), static_cast<char*>(p.iov_base) + (done - begin),
                                    end - done, static_cast<off_t>(offset + done));
        if (m < 0) return "read: " + ErrnoMessage(errno);
        done += static_cast<std::size_t>(m);
        if (done < end) break;  // end of file
      }
      begin = end;
    }
    if (done != total) {
      return "short read: " + std::to_string(done) + " of " + std::to_string(total) +
             " bytes (file truncated since open?)";
    }
    return {};
  }

  int fd() const override { return fd_.get(); }
  std::optional<FileStamp> stamp() const override {
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return std::nullopt;
    return FileStamp{static_cast<std::uint64_t>(st.st_size),
                     std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
                     {}};
  }
  std::uint64_t reads() const override { return reads_.load(std::memory_order_relaxed); }

 private:
  UniqueFd fd_;
  mutable std::atomic<std::uint64_t> reads_{0};
};

std::unique_ptr<RangeFile> OpenLocalFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) {
    const int error = errno;
    if (error == EMFILE) {
      throw SourceError(path,
                        "too many open files: a dataset keeps every shard open; "
                        "raise the limit (ulimit -n) above the shard count");
    }
    ThrowWithErrno(path, "cannot open: ", error);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) ThrowWithErrno(path, "fstat: ", errno);
  if (!S_ISREG(st.st_mode)) throw SourceError(path, "not a regular file");
  return std::make_unique<LocalFile>(path, static_cast<std::uint64_t>(st.st_size), std::move(fd));
}

}  // namespace

std::string RangeFile::Read(std::uint64_t offset, std::span<std::byte> out) const {
  const iovec part{out.data(), out.size()};
  return ReadV(offset, std::span(&part, 1));
}

std::unique_ptr<RangeFile> OpenRangeFile(const std::string& location, const RemoteOptions& remote,
                                         std::optional<std::uint64_t> remote_size,
                                         std::shared_ptr<HttpSession> session) {
  if (IsRemoteLocation(location)) {
    return OpenHttpFile(location, remote, remote_size, std::move(session));
  }
  return OpenLocalFile(location);
}

std::vector<std::byte> ReadWholeFile(const std::string& location, const RemoteOptions& remote,
                                     std::uint64_t max_bytes) {
  std::vector<std::byte> bytes;
  if (!IsRemoteLocation(location)) {
    if (auto error = ReadRegularFile(AT_FDCWD, location.c_str(), max_bytes, bytes)) {
      throw SourceError(location, *error);
    }
    return bytes;
  }
  // Small files (manifests, sidecars) bypass the block cache: they are read once.
  RemoteOptions uncached = remote;
  uncached.cache_dir.clear();
  const std::unique_ptr<RangeFile> file = OpenHttpFile(location, uncached);
  if (file->size() > max_bytes) {
    throw SourceError(location, "file is " + std::to_string(file->size()) +
                                    " bytes, over the limit of " + std::to_string(max_bytes));
  }
  bytes.resize(file->size());
  if (std::string error = file->Read(0, bytes); !error.empty()) {
    throw SourceError(location, error);
  }
  return bytes;
}

std::string RedactUrl(std::string_view text) {
  std::string out(text);
  for (std::size_t scheme = out.find("://"); scheme != std::string::npos;
       scheme = out.find("://", scheme + 3)) {
    const std::size_t host = scheme + 3;
    const std::size_t end = std::min(out.find_first_of("/?# '\"", host), out.size());
    const std::size_t at = out.rfind('@', end - 1);
    if (at != std::string::npos && at >= host && at < end) out.replace(host, at - host, "***");
  }
  for (const std::string_view key :
       {"X-Amz-Signature=", "X-Amz-Credential=", "X-Amz-Security-Token="}) {
    for (std::size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1)) {
      const std::size_t value = at + key.size();
      out.replace(value, std::min(out.find_first_of("&# '\"", value), out.size()) - value, "***");
    }
  }
  return out;
}

std::string ParentOf(const std::string& location) {
  std::string path = location;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string JoinLocation(const std::string& dir, const std::string& name) {
  return (dir == "/" ? "" : dir) + "/" + name;
}

}  // namespace detail
}  // namespace tilefeed::loader
