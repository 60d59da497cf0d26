#pragma once

// Options and counters for datasets read over HTTP(S) or S3 (ShardDataset and TarDataset
// accept "http://", "https://" and "s3://" locations wherever they take a path). Bytes
// are fetched with HTTP range requests through libcurl, retried with exponential backoff
// on transient failures (connection errors, timeouts, HTTP 408/429/5xx), and optionally
// kept in a bounded on-disk cache of fixed-size blocks that the processes of one host may
// share, each block checked against its own checksums on every hit (see docs/datasets.md,
// "Remote datasets"). A cache directory that cannot store a block (a full disk) stops
// caching for the dataset, says so once through `warn`, and reads go to the server. After the retry
// budget a read fails like any bad sample: a SourceError whose where() is the URL and whose reason
// is the HTTP status or the libcurl error.
//
// Reading dataset bytes over HTTP is a data source, not a transport of batches, so it
// lives in loader/ (libcurl is linked PRIVATE and never appears in a public header);
// transport/ still owns every socket that carries batches.
//
// The library reads the environment only in WithAwsEnvironment, which the tools and the
// Python module call (docs/datasets.md, "S3").

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace tilefeed::loader {

// Counts what remote reads did; every member may be read while reads go on.
struct RemoteCounters {
  std::atomic<std::uint64_t> requests{0};     // HTTP requests sent, retries included
  std::atomic<std::uint64_t> retries{0};      // requests that were retries
  std::atomic<std::uint64_t> bytes{0};        // body bytes received
  std::atomic<std::uint64_t> cache_hits{0};   // cache blocks read from disk
  std::atomic<std::uint64_t> cache_fills{0};  // cache blocks fetched and stored
  std::atomic<std::uint64_t> evictions{0};    // cache blocks removed to stay under the limit
  // Cached blocks whose checksum failed on a hit: removed and fetched again.
  std::atomic<std::uint64_t> cache_bad{0};
};

struct RemoteOptions {
  // Directory of the on-disk block cache, created 0700 if missing and refused if another
  // user owns it or group or others can write it; empty: no cache, every read is a range
  // request of exactly the bytes asked for.
  std::string cache_dir;
  // The cache's size bound in bytes (blocks and remote tars' indexes); least-recently used
  // files are removed before a new one would exceed it. Must be at least cache_block.
  std::uint64_t cache_limit = std::uint64_t{10} << 30;
  // Size of a cached block: a miss fetches the whole aligned block(s) around the bytes.
  std::uint64_t cache_block = std::uint64_t{4} << 20;
  // Where "s3://bucket/key" is fetched from: an S3-compatible endpoint URL
  // ("http://minio:9000"), or AWS's own "https://s3.<aws_region>.amazonaws.com" when empty.
  std::string s3_endpoint;
  // Path style puts the bucket in the path ("<endpoint>/bucket/key"), virtual-hosted style in
  // the host name ("https://bucket.<endpoint host>/key"). kAuto: virtual-hosted on AWS when
  // the bucket name is a DNS label without dots, path style otherwise and on other endpoints.
  enum class S3Addressing { kAuto, kVirtualHosted, kPath };
  S3Addressing s3_addressing = S3Addressing::kAuto;
  // Key for s3:// requests, signed with AWS Signature Version 4; requests are unsigned
  // (anonymous) when the access key id is empty. The session token comes with temporary
  // credentials and is sent as x-amz-security-token.
  std::string aws_access_key_id;
  std::string aws_secret_access_key;
  std::string aws_session_token;
  std::string aws_region = "us-east-1";
  // Retries of one request after its first try; waits backoff, 2 x backoff, ... (capped
  // at 2 s) between tries.
  int retries = 5;
  std::chrono::milliseconds backoff{100};
  // Requests one read call (a loader chunk's merged runs) keeps in flight at once, each on
  // its own connection (libcurl's multi interface); 1 sends them one after another. More
  // hides network latency; on loopback, where there is none, it costs CPU
  // (docs/datasets.md has the figures).
  int max_in_flight = 8;
  // Limit for connecting, and for one request as a whole.
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{60000};
  // A try that receives less than low_speed_limit bytes/s for low_speed_time fails (and is
  // retried like a timeout), so a server trickling data costs each try low_speed_time,
  // not request_timeout. 0 turns the check off.
  std::uint64_t low_speed_limit = 1024;
  std::chrono::seconds low_speed_time{10};
  // Redirects followed by one request; a longer chain or a loop fails the read ("more
  // than N redirects"), without retries.
  int max_redirects = 10;
  // Optional; must outlive every dataset opened with these options.
  RemoteCounters* counters = nullptr;
  // Receives one-line warnings about remote reads that still go on (a cache directory
  // that cannot store blocks: said once per dataset). Called from reading threads, one
  // line at a time per dataset; may be empty (no warnings).
  std::function<void(const std::string&)> warn;
};

// nullopt, or the first of `options`' fields outside the shared option table's range
// (option_specs.h: cache_limit, retries as remote_retries, max_in_flight as
// remote_in_flight) as "NAME must be RANGE, got VALUE".
std::optional<std::string> RemoteOptionsProblem(const RemoteOptions& options);

// `o` with the AWS keys, region and endpoint as the AWS CLI finds them: keys already in `o`,
// else AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else the AWS_PROFILE
// (default "default") section of AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials);
// AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region in AWS_CONFIG_FILE (default
// ~/.aws/config), else o.aws_region; o.s3_endpoint, else AWS_ENDPOINT_URL_S3, else
// AWS_ENDPOINT_URL.
RemoteOptions WithAwsEnvironment(RemoteOptions o);

// True if `location` starts with "http://", "https://" or "s3://".
bool IsRemoteLocation(std::string_view location);

}  // namespace tilefeed::loader
