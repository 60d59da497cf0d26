#pragma once

// A byte-range reader: one file of a dataset, local (pread) or remote (HTTP range
// requests, loader/http_file.cc), so that shard and tar parsing is written once.
// Internal: not installed, never included from a public header.
//
// Thread safety: immutable after open; ReadV may be called concurrently.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tilefeed/loader/remote.h"

namespace tilefeed::loader::detail {

// What identifies one version of a file: its size, modification time and, for a remote
// file, the server's ETag (empty if it gave none).
struct FileStamp {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::string etag;
};

// How a read's reason begins when the file is another version than the one opened (its
// records no longer sit where the index says): the run ends, under any bad-sample policy.
inline constexpr std::string_view kFileChanged =
    "the file changed on the server since it was opened";

class RangeFile {
 public:
  RangeFile(const RangeFile&) = delete;
  RangeFile& operator=(const RangeFile&) = delete;
  virtual ~RangeFile() = default;

  // The path or URL, for messages.
  const std::string& name() const { return name_; }
  // The file's size when it was opened.
  std::uint64_t size() const { return size_; }
  // Fills `parts` with consecutive bytes from `offset` on. Returns an empty string on
  // success, else a one-line reason (an errno message, an HTTP status or libcurl error,
  // "short read: N of M bytes").
  virtual std::string ReadV(std::uint64_t offset, std::span<const iovec> parts) const = 0;
  // ReadV of one part.
  std::string Read(std::uint64_t offset, std::span<std::byte> out) const;
  // The descriptor of a local file (for mmap), or -1.
  virtual int fd() const { return -1; }
  // Read requests issued (one per ReadV; retries not counted).
  virtual std::uint64_t reads() const = 0;
  // The version read when the file was opened: fstat for a local file; for a remote one
  // opened with a HEAD request, its Content-Length, Last-Modified (whole seconds) and
  // ETag. Empty when unknown (a remote file opened with a known size, or a server that
  // sent neither Last-Modified nor ETag). A remote file's reads fail once it has changed
  // (loader/http_file.cc, "Versions") instead of mixing versions.
  virtual std::optional<FileStamp> stamp() const = 0;

 protected:
  RangeFile(std::string name, std::uint64_t size) : name_(std::move(name)), size_(size) {}
  // For files whose size is learnt after construction. REQUIRES: before any ReadV.
  void set_size(std::uint64_t size) { size_ = size; }

 private:
  std::string name_;
  std::uint64_t size_;
};

// Connection pools shared by the remote files of one dataset (libcurl easy and multi
// handles), so reads of different files reuse connections. Thread-safe.
class HttpSession;
std::shared_ptr<HttpSession> MakeHttpSession();

// One range read of a batch: fills `parts` with consecutive bytes of `file` from `offset`
// on; `error` receives the outcome as ReadV gives it. A null `file` is skipped.
struct RangeRead {
  const RangeFile* file = nullptr;
  std::uint64_t offset = 0;
  std::span<const iovec> parts;
  std::string error;
};

// Performs every read. Reads of remote files are in flight together (libcurl's multi
// interface, each retried on its own clock); reads of local files are preadv'd in turn.
// Defined in http_file.cc.
void ReadRanges(std::span<RangeRead> reads);

// Opens a local regular file or, for a remote location (IsRemoteLocation), a remote one:
// a HEAD request for its size, unless the caller knows it (`remote_size`, e.g. from a
// manifest; a wrong one shows up as failed reads). A remote file uses `session`'s
// connections, or its own when it is null. Throws SourceError naming the path or URL.
std::unique_ptr<RangeFile> OpenRangeFile(const std::string& location, const RemoteOptions& remote,
                                         std::optional<std::uint64_t> remote_size = {},
                                         std::shared_ptr<HttpSession> session = nullptr);

// Opens the remote file at `url`. Defined in http_file.cc. Throws SourceError.
std::unique_ptr<RangeFile> OpenHttpFile(const std::string& url, const RemoteOptions& remote,
                                        std::optional<std::uint64_t> size = {},
                                        std::shared_ptr<HttpSession> session = nullptr);

// Reads a whole (small) file at a path or URL. Throws SourceError naming it, also when it is
// over `max_bytes`.
std::vector<std::byte> ReadWholeFile(const std::string& location, const RemoteOptions& remote,
                                     std::uint64_t max_bytes);

// `text` with the secrets of every URL in it hidden: a user:password before the host
// ("http://***@host/...") and the values of X-Amz-Signature, X-Amz-Credential and
// X-Amz-Security-Token (presigned URLs: "X-Amz-Signature=***"). What prints or records a URL
// (SourceError, the metrics records, the tools' lines) passes it through here.
std::string RedactUrl(std::string_view text);

// The directory part of a path or URL ("." for a bare name), and `dir` + "/" + `name`.
std::string ParentOf(const std::string& location);
std::string JoinLocation(const std::string& dir, const std::string& name);

}  // namespace tilefeed::loader::detail
