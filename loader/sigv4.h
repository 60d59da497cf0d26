#pragma once

// S3 requests as AWS documents them: where "s3://bucket/key" is fetched from (virtual-hosted
// or path style, any region or S3-compatible endpoint), the key percent-encoded as SigV4's
// canonical URI wants it, and AWS Signature Version 4 headers (x-amz-date,
// x-amz-content-sha256, x-amz-security-token, Authorization) computed with OpenSSL. Libcurl
// 7.88's own CURLOPT_AWS_SIGV4 adds no x-amz-content-sha256 (S3 refuses such requests) and
// no session token, and signs the URL's path as written, so tilefeed signs S3 requests here.
// Internal: not installed, never included from a public header.
//
// Thread safety: pure functions.

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tilefeed/loader/remote.h"

namespace tilefeed::loader::detail {

// The SHA-256 of an empty payload, sent as x-amz-content-sha256 with every GET and HEAD
// (what botocore's S3SigV4Auth sends for them over http).
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// `text` percent-encoded per SigV4: the unreserved bytes A-Z a-z 0-9 - . _ ~ as they are,
// every other byte as %XX (upper-case hex); '/' kept as it is when `keep_slash`.
std::string AwsUriEncode(std::string_view text, bool keep_slash);

// Where an s3:// object is fetched from.
struct S3Address {
  std::string url;             // what libcurl fetches
  std::string host;            // the Host header: host[:port] as the URL has it
  std::string canonical_path;  // the URL's path, already encoded (SigV4's canonical URI)
};

// Resolves "s3://bucket/key" with `options` (s3_endpoint, s3_addressing, aws_region).
// Throws SourceError naming `location` when it is malformed.
S3Address ResolveS3(const std::string& location, const RemoteOptions& options);

// "YYYYMMDDTHHMMSSZ" (UTC), SigV4's x-amz-date.
std::string AmzDate(std::chrono::system_clock::time_point when);

// One request to sign. `headers` are the further headers to send and sign, lower-case
// names ("range", "if-match"), values as sent.
struct SigV4Request {
  std::string_view method;           // "GET", "HEAD"
  std::string_view host;             // the Host header
  std::string_view canonical_path;   // encoded
  std::string_view canonical_query;  // "" or sorted, encoded "a=1&b=2"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string_view amz_date;  // AmzDate()
  std::string_view payload_sha256 = kEmptyPayloadSha256;
};

// The header lines ("Name: value") to send with `request`: Host, x-amz-content-sha256,
// x-amz-date, x-amz-security-token (when `options` has a session token), the request's own
// headers, and Authorization, signed with `options`' key for `region` and `service`.
std::vector<std::string> SignV4(const SigV4Request& request, const RemoteOptions& options,
                                std::string_view service = "s3");

}  // namespace tilefeed::loader::detail
