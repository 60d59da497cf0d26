// AWS Signature Version 4 for S3 GET and HEAD requests, after AWS's "Signature Calculations
// for the Authorization Header" (canonical request -> string to sign -> signature with a key
// derived from the secret, date, region and service). All calls into OpenSSL are here.

#include "loader/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>

#include "tilefeed/loader/source.h"

namespace tilefeed::loader::detail {
namespace {

using Digest = std::array<unsigned char, 32>;

Digest Sha256(std::string_view data) {
  Digest out;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data());
  return out;
}

Digest Hmac(std::string_view key, std::string_view data) {
  Digest out;
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &length);
  return out;
}

std::string_view View(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

std::string Hex(const Digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * d.size());
  for (const unsigned char c : d) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// A header value as SigV4 canonicalises it: outer spaces trimmed, inner runs of spaces one.
std::string TrimValue(std::string_view value) {
  std::string out;
  bool space = false;
  for (const char c : value) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// A bucket name that can be a DNS label of a virtual-hosted URL over TLS: 3-63 lower-case
// letters, digits and hyphens, not starting or ending with a hyphen.
bool VirtualHostable(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  if (bucket.front() == '-' || bucket.back() == '-') return false;
  return std::all_of(bucket.begin(), bucket.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

}  // namespace

std::string AwsUriEncode(std::string_view text, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

S3Address ResolveS3(const std::string& location, const RemoteOptions& o) {
  const std::string rest = location.substr(5);  // after "s3://"
  const std::size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size()) {
    throw SourceError(location, "malformed s3 location (want s3://bucket/key)");
  }
  const std::string bucket = rest.substr(0, slash);
  const std::string key_path = AwsUriEncode(rest.substr(slash), /*keep_slash=*/true);
  std::string scheme = "https://";
  std::string host = "s3." + o.aws_region + ".amazonaws.com";
  std::string base;  // the endpoint's own path, if it has one
  if (!o.s3_endpoint.empty()) {
    const std::size_t colon = o.s3_endpoint.find("://");
    if (colon == std::string::npos) {
      throw SourceError(location, "the S3 endpoint '" + o.s3_endpoint +
                                      "' is not a URL (want http://host:port or https://host)");
    }
    scheme = o.s3_endpoint.substr(0, colon + 3);
    std::string authority = o.s3_endpoint.substr(colon + 3);
    const std::size_t path = authority.find('/');
    if (path != std::string::npos) {
      base = authority.substr(path);
      authority.resize(path);
      while (!base.empty() && base.back() == '/') base.pop_back();
    }
    host = authority;
  }
  using Addressing = RemoteOptions::S3Addressing;
  const bool virtual_hosted =
      o.s3_addressing == Addressing::kVirtualHosted ||
      (o.s3_addressing == Addressing::kAuto && o.s3_endpoint.empty() && VirtualHostable(bucket));
  S3Address out;
  if (virtual_hosted) {
    out.host = bucket + "." + host;
    out.canonical_path = base + key_path;
  } else {
    out.host = host;
    out.canonical_path = base + "/" + AwsUriEncode(bucket, false) + key_path;
  }
  out.url = scheme + out.host + out.canonical_path;
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point when) {
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

std::vector<std::string> SignV4(const SigV4Request& request, const RemoteOptions& o,
                                std::string_view service) {
  std::vector<std::pair<std::string, std::string>> headers = request.headers;
  headers.emplace_back("host", std::string(request.host));
  headers.emplace_back("x-amz-content-sha256", std::string(request.payload_sha256));
  headers.emplace_back("x-amz-date", std::string(request.amz_date));
  if (!o.aws_session_token.empty()) {
    headers.emplace_back("x-amz-security-token", o.aws_session_token);
  }
  std::sort(headers.begin(), headers.end());
  std::string canonical_headers, signed_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + TrimValue(value) + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }
  const std::string canonical_request =
      std::string(request.method) + "\n" + std::string(request.canonical_path) + "\n" +
      std::string(request.canonical_query) + "\n" + canonical_headers + "\n" + signed_headers +
      "\n" + std::string(request.payload_sha256);
  const std::string date(request.amz_date.substr(0, 8));
  const std::string scope =
      date + "/" + o.aws_region + "/" + std::string(service) + "/aws4_request";
  const std::string string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(request.amz_date) + "\n" +
                                     scope + "\n" + Hex(Sha256(canonical_request));
  const Digest date_key = Hmac("AWS4" + o.aws_secret_access_key, date);
  const Digest region_key = Hmac(View(date_key), o.aws_region);
  const Digest service_key = Hmac(View(region_key), service);
  const Digest signing_key = Hmac(View(service_key), "aws4_request");
  const std::string signature = Hex(Hmac(View(signing_key), string_to_sign));

  std::vector<std::string> lines;
  lines.reserve(headers.size() + 1);
  for (const auto& [name, value] : headers) {
    std::string& line = lines.emplace_back(name);
    line.append(": ").append(value);
  }
  std::string& authorization = lines.emplace_back("Authorization: AWS4-HMAC-SHA256 Credential=");
  authorization.append(o.aws_access_key_id).append("/").append(scope);
  authorization.append(", SignedHeaders=").append(signed_headers);
  authorization.append(", Signature=").append(signature);
  return lines;
}

}  // namespace tilefeed::loader::detail

namespace tilefeed::loader {
namespace {

// The sections of an AWS INI file (~/.aws/credentials, ~/.aws/config): section -> key -> value.
// Missing or unreadable: empty.
std::map<std::string, std::map<std::string, std::string>> ReadAwsIni(const std::string& path) {
  std::map<std::string, std::map<std::string, std::string>> sections;
  std::ifstream in(path);
  std::string line, section;
  const auto trim = [](const std::string& s) {
    const std::size_t b = s.find_first_not_of(" \t\r");
    const std::size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos)
      sections[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return sections;
}

std::string EnvOr(const char* name, const std::string& fallback = {}) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::string(v) : fallback;
}

}  // namespace

RemoteOptions WithAwsEnvironment(RemoteOptions o) {
  const std::string home = EnvOr("HOME");
  const std::string profile = EnvOr("AWS_PROFILE", "default");
  if (o.aws_access_key_id.empty()) {
    o.aws_access_key_id = EnvOr("AWS_ACCESS_KEY_ID");
    o.aws_secret_access_key = EnvOr("AWS_SECRET_ACCESS_KEY");
    o.aws_session_token = EnvOr("AWS_SESSION_TOKEN");
  }
  if (o.aws_access_key_id.empty() && !home.empty()) {
    auto ini = ReadAwsIni(EnvOr("AWS_SHARED_CREDENTIALS_FILE", home + "/.aws/credentials"));
    auto& keys = ini[profile];
    o.aws_access_key_id = keys["aws_access_key_id"];
    o.aws_secret_access_key = keys["aws_secret_access_key"];
    o.aws_session_token = keys["aws_session_token"];
  }
  std::string region = EnvOr("AWS_REGION", EnvOr("AWS_DEFAULT_REGION"));
  if (region.empty() && !home.empty()) {
    auto ini = ReadAwsIni(EnvOr("AWS_CONFIG_FILE", home + "/.aws/config"));
    region = ini[profile == "default" ? profile : "profile " + profile]["region"];
  }
  if (!region.empty()) o.aws_region = region;
  if (o.s3_endpoint.empty())
    o.s3_endpoint = EnvOr("AWS_ENDPOINT_URL_S3", EnvOr("AWS_ENDPOINT_URL"));
  return o;
}

}  // namespace tilefeed::loader
