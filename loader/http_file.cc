// Remote dataset files over HTTP(S) and S3 with libcurl: range requests, retries with
// exponential backoff, and an on-disk block cache shared by one user's processes on a host.
//
// Requests in flight: every request goes through ReadRanges, which puts all the ranges of
// one call (a loader chunk's merged runs, over any files) on one curl multi handle at once,
// at most RemoteOptions::max_in_flight of them, and retries each on its own clock. The multi
// and easy handles come from the dataset's HttpSession pools, so connections stay open between
// calls and are shared by the dataset's files; each call holds its own multi handle.
//
// Versions: a file opened with a HEAD is validated as HTTP caches do (RFC 9110 13.1): by
// its ETag, else Last-Modified (with the size, which every Content-Range repeats), sent as
// If-Match / If-Unmodified-Since on every GET and compared with each response's, so a file
// changed since open fails every read and never mixes versions; so does a Content-Range
// other than the one asked for.
//
// Cache protocol: "<cache_dir>/blocks/<16 hex digits>-<block>" holds block `block`
// (cache_block bytes, the last one shorter) of one remote file, then one little-endian
// XXH3-64 per 64 KiB chunk of it; the hex is XXH3 of the format's version, the URL, the
// file's size, the block size and the validator, so another version or block size never
// matches (a server that sends no validator gets no cache). A reader opens a block without
// a lock (blocks are created complete, by rename), checks the checksums of the chunks it
// reads (tars have none of their own) and bumps its mtime, the LRU clock; a block that
// fails is removed and fetched again. A writer (block_cache.cc) takes an exclusive flock on
// "<cache_dir>/lock", removes the least recently used files of blocks/ (tar indexes too)
// until the new one fits under cache_limit, writes it to a temporary name and renames it,
// then unlocks, however many processes share the cache. A block removed while another
// process has it open stays readable (POSIX); one removed before it is opened is a miss. A
// block that cannot be stored (a full disk) stops the cache for the dataset (its
// HttpSession): one warning, then every read fetches exactly its bytes.

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loader/block_cache.h"
#include "loader/file_io.h"
#include "loader/range_file.h"
#include "loader/shard_format.h"
#include "loader/sigv4.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader::detail {
namespace {

struct CurlDeleter {
  void operator()(CURL* curl) const noexcept { curl_easy_cleanup(curl); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;

struct SlistDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using HeaderList = std::unique_ptr<curl_slist, SlistDeleter>;

// Where the body of one response goes: consecutive bytes scattered over `parts`.
struct Sink {
  CURL* curl = nullptr;
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
  // The body of an error response (an S3 XML error, an HTML page) is not the file's
  // bytes, and may be longer than the range: dropped, so that the status decides.
  long status = 0;
  curl_easy_getinfo(sink.curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status > 299) return total;
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

// The value of the response's header `name`, or "" if it has none.
std::string Header(CURL* curl, const char* name) {
  curl_header* h = nullptr;
  return curl_easy_header(curl, name, 0, CURLH_HEADER, -1, &h) == CURLHE_OK ? h->value : "";
}

// Whether a failed try may succeed if repeated: connection-level failures, timeouts (also
// the low-speed limit), and HTTP 408, 429 and 5xx. Every other status (400, 403, 404,
// 412, 416, ...) and too many redirects are final.
bool Transient(CURLcode code, long status) {
  if (code == CURLE_OK) return status == 408 || status == 429 || (status >= 500 && status <= 599);
  constexpr CURLcode kTransient[] = {CURLE_COULDNT_CONNECT,   CURLE_OPERATION_TIMEDOUT,
                                     CURLE_RECV_ERROR,        CURLE_SEND_ERROR,
                                     CURLE_GOT_NOTHING,       CURLE_COULDNT_RESOLVE_HOST,
                                     CURLE_SSL_CONNECT_ERROR, CURLE_PARTIAL_FILE};
  return std::ranges::find(kTransient, code) != std::end(kTransient);
}

struct MultiDeleter {
  void operator()(CURLM* multi) const noexcept { curl_multi_cleanup(multi); }
};
using MultiHandle = std::unique_ptr<CURLM, MultiDeleter>;

// A mutex-guarded stack of idle handles.
template <class Handle>
class Pool {
 public:
  Handle Acquire() {
    std::lock_guard lock(mu_);
    if (idle_.empty()) return Handle();
    Handle h = std::move(idle_.back());
    idle_.pop_back();
    return h;
  }
  void Release(Handle h) {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(h));
  }

 private:
  std::mutex mu_;
  std::vector<Handle> idle_;
};

}  // namespace

// Connections live in the handles: an easy handle keeps its own between requests, a multi
// handle those of every transfer it ran.
class HttpSession {
 public:
  CurlHandle AcquireEasy() {
    CurlHandle h = easy_.Acquire();
    return h ? std::move(h) : CurlHandle(curl_easy_init());
  }
  void Release(CurlHandle h) { easy_.Release(std::move(h)); }
  MultiHandle AcquireMulti() {
    MultiHandle m = multi_.Acquire();
    if (m) return m;
    m.reset(curl_multi_init());
    if (!m) return m;
    // No multiplexing: with it (libcurl's default), or with CURLMOPT_MAXCONNECTS set,
    // libcurl 7.88 queues transfers to a host that has an idle HTTP/1.1 connection on that
    // one connection instead of opening more (seen in nginx's $connection log).
    curl_multi_setopt(m.get(), CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_NOTHING));
    return m;
  }
  void Release(MultiHandle m) { multi_.Release(std::move(m)); }

  // Whether the dataset's block cache has been stopped (StopCache).
  bool cache_stopped() const { return cache_stopped_.load(std::memory_order_acquire); }
  // Stops the block cache of every file of the dataset; the first call sends `line` to
  // options.warn.
  void StopCache(const RemoteOptions& options, const std::string& line) {
    if (!cache_stopped_.exchange(true, std::memory_order_acq_rel) && options.warn) {
      options.warn(line);
    }
  }

 private:
  std::atomic<bool> cache_stopped_{false};
  // Declared after the easy pool so that multi handles are cleaned up first.
  Pool<CurlHandle> easy_;
  Pool<MultiHandle> multi_;
};

std::shared_ptr<HttpSession> MakeHttpSession() { return std::make_shared<HttpSession>(); }

namespace {

class HttpFile;

// One HTTP request, from its first try to its outcome: a HEAD (size), or a GET of
// [offset, offset + length) into `parts`. Not moved once started: libcurl holds pointers to
// its sink and error buffer.
struct Transfer {
  const HttpFile* file = nullptr;
  RangeRead* read = nullptr;  // the caller's read; null for a HEAD
  bool head = false;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::span<const iovec> parts;
  FileStamp stamp;        // a HEAD's Content-Length, Last-Modified and ETag
  std::string validator;  // a HEAD's ETag, else its Last-Modified, as sent
  std::string error;      // the outcome; empty on success
  // A cached read fetches whole blocks into `scratch` (through `whole`), stores the missed
  // ones and copies the asked-for bytes into the caller's parts afterwards.
  std::span<const iovec> user_parts;
  std::uint64_t user_offset = 0;
  std::uint64_t user_length = 0;
  std::vector<std::uint64_t> missed;
  std::vector<std::byte> scratch;
  iovec whole{};
  // Libcurl state and the retry clock.
  Sink sink;
  CurlHandle curl;
  HeaderList headers;  // an s3:// request's headers, signed anew for each try
  char curl_error[CURL_ERROR_SIZE] = "";
  int attempt = 0;
  std::chrono::milliseconds wait{0};
  std::chrono::steady_clock::time_point not_before{};
};

void RunTransfers(std::span<Transfer* const> transfers, HttpSession& session);

class HttpFile final : public RangeFile {
 public:
  HttpFile(std::string location, const RemoteOptions& options, std::shared_ptr<HttpSession> session)
      : RangeFile(std::move(location), 0), options_(options), session_(std::move(session)) {
    if (name().starts_with("s3://")) {
      s3_ = ResolveS3(name(), options_);
      url_ = s3_->url;
    } else {
      url_ = name();
    }
  }

  // Finds the size with a HEAD request unless it is `known`; then sets up the cache, which
  // keys on it.
  void Open(std::optional<std::uint64_t> known) {
    std::uint64_t size = known.value_or(0);
    if (!known) {
      const Transfer head = Head();
      if (!head.error.empty()) throw SourceError(name(), head.error);
      size = head.stamp.size;
      if (head.stamp.mtime_ns != 0 || !head.stamp.etag.empty()) stamp_ = head.stamp;
      const bool etag = !head.stamp.etag.empty();
      validator_ = head.validator;
      validator_name_ = etag ? "ETag" : "Last-Modified";
      condition_name_ = etag ? "if-match" : "if-unmodified-since";
      if (!validator_.empty()) {
        condition_.reset(curl_slist_append(nullptr, (condition_name_ + ": " + validator_).c_str()));
      }
    }
    set_size(size);
    if (options_.cache_dir.empty()) return;
    // A size from a manifest is validated by the manifest's checksums.
    if (known || !validator_.empty()) {
      cache_.emplace(options_, url_, size, validator_);
    } else {
      session_->StopCache(options_, name() +
                                        ": the server sends no ETag or Last-Modified, so a "
                                        "changed file would look like its cached blocks; "
                                        "caching stops for this dataset");
    }
  }

  std::optional<FileStamp> stamp() const override { return stamp_; }

  std::string ReadV(std::uint64_t offset, std::span<const iovec> parts) const override {
    RangeRead read{this, offset, parts, {}};
    ReadRanges(std::span(&read, 1));
    return read.error;
  }

  std::uint64_t reads() const override { return reads_.load(std::memory_order_relaxed); }

  // Sets `t` up to read `r`, serving what the cache holds at once. Returns false when
  // nothing is left to fetch (r.error then holds the outcome).
  bool Plan(RangeRead& r, Transfer& t) const;
  // After `t` succeeded: stores its missed blocks and copies the caller's bytes.
  void Complete(Transfer& t) const;
  // Sets up t's easy handle for its next try.
  void Setup(Transfer& t) const;
  // The outcome of a finished try; `transient` says whether a retry may help.
  std::string Evaluate(Transfer& t, CURLcode code, bool& transient) const;
  const RemoteOptions& options() const { return options_; }
  HttpSession& session() const { return *session_; }

 private:
  bool PlanCached(Transfer& t) const;
  // An s3:// request's headers: Range, the condition and, with a key, SigV4's.
  HeaderList S3Headers(const Transfer& t) const;
  // What an S3 error status means, for the one-line reason.
  std::string S3Status(CURL* curl, long status) const;
  // The reason of a read that found the file changed since it was opened.
  std::string Changed(const std::string& what, const std::string& was,
                      const std::string& now) const {
    return std::string(kFileChanged) + " (" + what + " " + was + ", now " +
           (now.empty() ? "unknown" : now) + "); open the dataset again to read it";
  }
  // A HEAD request for the file's size, Last-Modified and ETag, run to its outcome.
  Transfer Head() const {
    Transfer head;
    head.file = this;
    head.head = true;
    Transfer* const one[] = {&head};
    RunTransfers(one, *session_);
    return head;
  }

  std::optional<S3Address> s3_;  // set for s3:// locations
  std::string url_;
  const RemoteOptions options_;
  std::shared_ptr<HttpSession> session_;
  std::optional<FileStamp> stamp_;
  std::string validator_;       // the HEAD's ETag, else its Last-Modified; "" without either
  std::string validator_name_;  // "ETag" or "Last-Modified"
  std::string condition_name_;  // "if-match" or "if-unmodified-since", sent with every GET
  HeaderList condition_;        // that header for http(s); S3's is signed with the others
  std::optional<BlockCache> cache_;
  mutable std::atomic<std::uint64_t> reads_{0};
};

// The limits that end a hostile or broken server's request: redirects followed, and the
// lowest transfer rate held for longer than low_speed_time.
void SetBounds(CURL* curl, const RemoteOptions& o) {
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, static_cast<long>(o.max_redirects));
  if (o.low_speed_limit > 0 && o.low_speed_time.count() > 0) {
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(o.low_speed_limit));
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(o.low_speed_time.count()));
  }
}

// Why a finished try's response cannot be used, beyond its status: a redirect chain past
// the cap, or a body with a Content-Encoding (compressed bytes, whose ranges are not the
// file's). Empty if neither.
std::string ResponseProblem(CURL* curl, CURLcode code, const RemoteOptions& o) {
  if (code == CURLE_TOO_MANY_REDIRECTS) {
    char* next = nullptr;
    curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &next);
    return "more than " + std::to_string(o.max_redirects) +
           " redirects (a redirect loop?), the last to " + (next != nullptr ? next : "?");
  }
  if (code != CURLE_OK) return {};
  if (const std::string encoding = Header(curl, "Content-Encoding");
      !encoding.empty() && encoding != "identity") {
    return "the server sent the file with Content-Encoding: " + encoding +
           " (compressed in transfer); tilefeed reads a file's own bytes by range and does "
           "not decode it: serve it without a Content-Encoding";
  }
  return {};
}

void HttpFile::Setup(Transfer& t) const {
  CURL* curl = t.curl.get();
  curl_easy_reset(curl);
  t.sink = Sink{};
  t.curl_error[0] = 0;
  curl_easy_setopt(curl, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(curl, CURLOPT_PRIVATE, &t);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  // A signed request is not valid at another address, so S3 redirects are reported instead.
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, s3_ ? 0L : 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout.count()));
  SetBounds(curl, options_);
  if (s3_) {
    // The key is already encoded; "." and ".." segments are part of it, not to be resolved.
    curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
    t.headers = S3Headers(t);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, t.headers.get());
  }
  if (t.head) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(curl, CURLOPT_FILETIME, 1L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Discard);
  } else {
    if (condition_ && !s3_) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, condition_.get());
    char range[64];
    std::snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, t.offset, t.offset + t.length - 1);
    if (!s3_) curl_easy_setopt(curl, CURLOPT_RANGE, range);  // S3's is in t.headers, signed
    t.sink.curl = curl;
    t.sink.parts = t.parts;
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t.sink);
  }
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, t.curl_error);
}

HeaderList HttpFile::S3Headers(const Transfer& t) const {
  SigV4Request request;
  request.method = t.head ? "HEAD" : "GET";
  request.host = s3_->host;
  request.canonical_path = s3_->canonical_path;
  if (!t.head) {
    request.headers.emplace_back("range", "bytes=" + std::to_string(t.offset) + "-" +
                                              std::to_string(t.offset + t.length - 1));
    if (!validator_.empty()) request.headers.emplace_back(condition_name_, validator_);
  }
  std::vector<std::string> lines;
  if (options_.aws_access_key_id.empty()) {
    lines.reserve(request.headers.size() + 1);
    for (const auto& [name, value] : request.headers) {
      std::string& line = lines.emplace_back(name);
      line.append(": ").append(value);
    }
  } else {
    const std::string date = AmzDate(std::chrono::system_clock::now());
    request.amz_date = date;
    lines = SignV4(request, options_);
  }
  // Only signed headers go out: no "Accept: */*" of libcurl's own.
  lines.emplace_back("Accept:");
  HeaderList list;
  for (const std::string& line : lines) {
    curl_slist* next = curl_slist_append(list.get(), line.c_str());
    if (next == nullptr) return list;
    (void)list.release();  // `next` is the same list, one line longer
    list.reset(next);
  }
  return list;
}

std::string HttpFile::S3Status(CURL* curl, long status) const {
  std::string text = "HTTP " + std::to_string(status);
  if (status == 403) {
    text += options_.aws_access_key_id.empty()
                ? ": access denied to an unsigned request (no AWS_ACCESS_KEY_ID given)"
                : ": access denied: the S3 server refused key " + options_.aws_access_key_id +
                      " in region " + options_.aws_region +
                      " (a wrong AWS_SECRET_ACCESS_KEY or session token, an expired token, "
                      "a wrong region, or no permission to read the object)";
  } else if (status == 404) {
    text += ": no such bucket or key";
  } else if (status == 301 || status == 307 || status == 400) {
    char* to = nullptr;
    curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &to);
    if (to != nullptr) text += std::string(": a redirect to ") + to + " (signed: not followed)";
    if (const std::string region = Header(curl, "x-amz-bucket-region"); !region.empty()) {
      text += ": the bucket is in region " + region + ", not " + options_.aws_region +
              " (set AWS_REGION)";
    } else if (to != nullptr) {
      text += ": set AWS_REGION to the bucket's region, or s3_endpoint to the one redirected to";
    }
  }
  return text;
}

std::string HttpFile::Evaluate(Transfer& t, CURLcode code, bool& transient) const {
  CURL* curl = t.curl.get();
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  Count(&RemoteCounters::bytes, options_, t.sink.received);
  transient = Transient(code, status);
  if (std::string problem = ResponseProblem(curl, code, options_); !problem.empty()) {
    transient = false;
    return problem;
  }
  if (t.sink.overflow) {
    return "the server sent more than the " + std::to_string(t.length) + " bytes asked for";
  }
  if (code != CURLE_OK) {
    return std::string("libcurl: ") +
           (t.curl_error[0] != 0 ? t.curl_error : curl_easy_strerror(code));
  }
  if (t.head) {
    if (status != 200) return s3_ ? S3Status(curl, status) : "HTTP " + std::to_string(status);
    curl_off_t content_length = -1;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &content_length);
    if (content_length < 0) return "the server gave no Content-Length";
    t.stamp.size = static_cast<std::uint64_t>(content_length);
    curl_off_t filetime = -1;
    curl_easy_getinfo(curl, CURLINFO_FILETIME_T, &filetime);
    if (filetime > 0) t.stamp.mtime_ns = std::int64_t{filetime} * 1'000'000'000;
    t.stamp.etag = Header(curl, "ETag");
    t.validator = t.stamp.etag.empty() ? Header(curl, "Last-Modified") : t.stamp.etag;
    return {};
  }
  // A 412 names no validator: a HEAD asks what the file is now.
  if (status == 412) return Changed(validator_name_, validator_, Head().validator);
  const std::string now = validator_.empty() ? "" : Header(curl, validator_name_.c_str());
  // 206 for a range; 200 is accepted only when the range is the whole file.
  if (status != 206 && !(status == 200 && t.offset == 0 && t.length == size())) {
    if (status == 200) return "the server ignored the Range header (HTTP 200)";
    return s3_ ? S3Status(curl, status) : "HTTP " + std::to_string(status);
  }
  if (!now.empty() && now != validator_) return Changed(validator_name_, validator_, now);
  const std::string asked = "bytes " + std::to_string(t.offset) + "-" +
                            std::to_string(t.offset + t.length - 1) + "/" + std::to_string(size());
  if (const std::string range = Header(curl, "Content-Range"); status == 206 && range != asked) {
    const std::size_t slash = range.rfind('/');  // then the total size
    if (slash != std::string::npos && range.substr(slash) != asked.substr(asked.rfind('/'))) {
      return Changed("size", std::to_string(size()), range.substr(slash + 1));
    }
    return "the server sent Content-Range: " + range + " for a request of " + asked;
  }
  if (t.sink.received != t.length) {
    return "short read: " + std::to_string(t.sink.received) + " of " + std::to_string(t.length) +
           " bytes";
  }
  return {};
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

bool HttpFile::Plan(RangeRead& r, Transfer& t) const {
  reads_.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t total = 0;
  for (const iovec& p : r.parts) total += p.iov_len;
  if (r.offset > size() || total > size() - r.offset) {
    r.error = "short read: range ends at byte " + std::to_string(r.offset + total) +
              ", the file has " + std::to_string(size());
    return false;
  }
  r.error.clear();
  if (total == 0) return false;
  t.file = this;
  t.read = &r;
  t.user_parts = r.parts;
  t.user_offset = r.offset;
  t.user_length = total;
  if (cache_ && !session_->cache_stopped()) return PlanCached(t);
  t.offset = r.offset;
  t.length = total;
  t.parts = r.parts;
  return true;
}

// Serves the cached blocks at once; the missed ones, from the first to the last, are
// fetched with one request (blocks between them that were cached are fetched again but
// not stored again). A stopped cache reads exactly the bytes asked for, as with none.
bool HttpFile::PlanCached(Transfer& t) const {
  const std::uint64_t block_size = options_.cache_block;
  const std::uint64_t first = t.user_offset / block_size;
  const std::uint64_t last = (t.user_offset + t.user_length - 1) / block_size;
  std::vector<iovec> slice;
  std::vector<std::byte> scratch;
  for (std::uint64_t b = first; b <= last; ++b) {
    const std::uint64_t block_begin = b * block_size;
    const std::uint64_t block_bytes = std::min(block_size, size() - block_begin);
    const std::uint64_t from = std::max(t.user_offset, block_begin);
    const std::uint64_t to = std::min(t.user_offset + t.user_length, block_begin + block_bytes);
    SliceParts(t.user_parts, from - t.user_offset, to - from, slice);
    if (!cache_->Lookup(b, from - block_begin, slice, block_bytes, scratch)) {
      t.missed.push_back(b);
    }
  }
  if (t.missed.empty()) return false;
  t.offset = t.missed.front() * block_size;
  t.length = std::min((t.missed.back() + 1) * block_size, size()) - t.offset;
  t.scratch.resize(static_cast<std::size_t>(t.length));
  t.whole = {t.scratch.data(), t.scratch.size()};
  t.parts = std::span(&t.whole, 1);
  return true;
}

void HttpFile::Complete(Transfer& t) const {
  if (t.scratch.empty()) return;  // read straight into the caller's parts
  const std::uint64_t block_size = options_.cache_block;
  const std::span<const std::byte> fetched(t.scratch);
  for (const std::uint64_t b : t.missed) {
    if (session_->cache_stopped()) break;
    const std::uint64_t begin = b * block_size;
    const std::string error =
        cache_->Store(b, fetched.subspan(begin - t.offset, std::min(block_size, size() - begin)));
    if (!error.empty()) {
      session_->StopCache(options_, options_.cache_dir + ": cannot store cache blocks (" + error +
                                        "); caching stops for this dataset, reads go to the "
                                        "server directly");
    }
  }
  const std::uint64_t from = std::max(t.user_offset, t.offset);
  const std::uint64_t to = std::min(t.user_offset + t.user_length, t.offset + t.length);
  std::vector<iovec> slice;
  SliceParts(t.user_parts, from - t.user_offset, to - from, slice);
  const std::byte* src = fetched.data() + (from - t.offset);
  for (const iovec& p : slice) {
    std::memcpy(p.iov_base, src, p.iov_len);
    src += p.iov_len;
  }
}

// Starts t's next try on `multi`. Returns false (and sets t.error) if it cannot.
bool Start(CURLM* multi, Transfer& t) {
  if (!t.curl) t.curl = t.file->session().AcquireEasy();
  if (!t.curl) {
    t.error = "libcurl: curl_easy_init failed";
    return false;
  }
  t.file->Setup(t);
  Count(&RemoteCounters::requests, t.file->options());
  if (curl_multi_add_handle(multi, t.curl.get()) != CURLM_OK) {
    t.error = "libcurl: curl_multi_add_handle failed";
    return false;
  }
  return true;
}

// Judges t's finished try. Returns true if it is to be tried again (at t.not_before);
// otherwise t.error holds its outcome and its easy handle is back in the pool.
bool Finish(Transfer& t, CURLcode code) {
  bool transient = false;
  t.error = t.file->Evaluate(t, code, transient);
  const RemoteOptions& o = t.file->options();
  if (!t.error.empty() && transient && t.attempt < o.retries) {
    if (t.attempt == 0) t.wait = o.backoff;
    ++t.attempt;
    t.not_before = std::chrono::steady_clock::now() + t.wait;
    t.wait = std::min(t.wait * 2, std::chrono::milliseconds(2000));
    Count(&RemoteCounters::retries, o);
    return true;
  }
  if (!t.error.empty() && t.attempt > 0) {
    t.error += " (after " + std::to_string(t.attempt + 1) + " tries)";
  }
  t.file->session().Release(std::move(t.curl));
  return false;
}

// How long the loop may wait for network activity: until the earliest retry is due, at
// most 100 ms (libcurl shortens it further for its own timeouts).
int PollMillis(std::span<Transfer* const> waiting) {
  auto wait = std::chrono::milliseconds(100);
  const auto now = std::chrono::steady_clock::now();
  for (const Transfer* t : waiting) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(t->not_before - now);
    wait = std::clamp(left, std::chrono::milliseconds(0), wait);
  }
  return static_cast<int>(wait.count());
}

// Runs every transfer to its outcome, at most max_in_flight (of the first transfer's
// file's options) at once on one multi handle.
void RunTransfers(std::span<Transfer* const> transfers, HttpSession& session) {
  if (transfers.empty()) return;
  const auto max_in_flight =
      static_cast<std::size_t>(std::max(1, transfers[0]->file->options().max_in_flight));
  MultiHandle multi = session.AcquireMulti();
  if (!multi) {
    for (Transfer* t : transfers) t->error = "libcurl: curl_multi_init failed";
    return;
  }
  std::size_t next = 0;
  std::size_t active = 0;
  std::vector<Transfer*> waiting;  // retries, each due at its not_before
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = waiting.begin(); it != waiting.end() && active < max_in_flight;) {
      if ((*it)->not_before > now) {
        ++it;
      } else {
        active += Start(multi.get(), **it) ? 1 : 0;
        it = waiting.erase(it);
      }
    }
    for (; next < transfers.size() && active < max_in_flight; ++next) {
      active += Start(multi.get(), *transfers[next]) ? 1 : 0;
    }
    if (active == 0 && waiting.empty() && next == transfers.size()) break;
    int running = 0;
    curl_multi_perform(multi.get(), &running);
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi.get(), &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      CURL* easy = m->easy_handle;
      const CURLcode code = m->data.result;  // m does not survive the removal
      Transfer* t = nullptr;
      curl_easy_getinfo(easy, CURLINFO_PRIVATE, &t);
      curl_multi_remove_handle(multi.get(), easy);
      --active;
      if (Finish(*t, code)) waiting.push_back(t);
    }
    if (active > 0) {
      curl_multi_poll(multi.get(), nullptr, 0, PollMillis(waiting), nullptr);
    } else if (!waiting.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(PollMillis(waiting)));
    }
  }
  session.Release(std::move(multi));
}

}  // namespace

void ReadRanges(std::span<RangeRead> reads) {
  std::vector<std::unique_ptr<Transfer>> owned;
  std::vector<Transfer*> transfers;
  HttpSession* session = nullptr;
  for (RangeRead& r : reads) {
    if (r.file == nullptr) continue;
    const auto* http = dynamic_cast<const HttpFile*>(r.file);
    if (http == nullptr) {
      r.error = r.file->ReadV(r.offset, r.parts);
      continue;
    }
    auto t = std::make_unique<Transfer>();
    if (!http->Plan(r, *t)) continue;
    session = &http->session();
    transfers.push_back(t.get());
    owned.push_back(std::move(t));
  }
  if (transfers.empty()) return;
  RunTransfers(transfers, *session);
  for (Transfer* t : transfers) {
    if (t->error.empty()) t->file->Complete(*t);
    t->read->error = std::move(t->error);
  }
}

std::unique_ptr<RangeFile> OpenHttpFile(const std::string& location, const RemoteOptions& options,
                                        std::optional<std::uint64_t> size,
                                        std::shared_ptr<HttpSession> session) {
  // Thread-safe and reference-counted in libcurl >= 7.84; paired with no cleanup, as
  // libcurl allows, since other users in the process may still hold handles.
  static const CURLcode kInit = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (kInit != CURLE_OK) throw SourceError(location, "libcurl: curl_global_init failed");
  if (!session) session = MakeHttpSession();
  auto file = std::make_unique<HttpFile>(location, options, std::move(session));
  file->Open(size);
  return file;
}

}  // namespace tilefeed::loader::detail
