// Tests loader/sigv4.h: AWS's published S3 example ("Example: GET Object" in
// "Signature Calculations for the Authorization Header: Transferring Payload in a Single
// Chunk", AWS S3 API reference), a signature with a session token and an encoded key as
// botocore 1.29's S3SigV4Auth computes it, SigV4's URI encoding, where s3:// URLs go, and where
// WithAwsEnvironment finds the keys, region and endpoint.

#include "loader/sigv4.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tilefeed/loader/source.h"

namespace tilefeed::loader::detail {
namespace {

RemoteOptions Key(std::string id, std::string secret, std::string region, std::string token = {}) {
  RemoteOptions o;
  o.aws_access_key_id = std::move(id);
  o.aws_secret_access_key = std::move(secret);
  o.aws_session_token = std::move(token);
  o.aws_region = std::move(region);
  return o;
}

TEST(SigV4, AwsPublishedGetObjectExample) {
  SigV4Request request;
  request.method = "GET";
  request.host = "examplebucket.s3.amazonaws.com";
  request.canonical_path = "/test.txt";
  request.headers = {{"range", "bytes=0-9"}};
  request.amz_date = "20130524T000000Z";
  const auto lines = SignV4(request, Key("AKIAIOSFODNN7EXAMPLE",
                                         "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1"));
  const std::string authorization =
      "Authorization: AWS4-HMAC-SHA256 "
      "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
      "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
      "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
  const std::vector<std::string> expected = {
      "host: examplebucket.s3.amazonaws.com", "range: bytes=0-9",
      "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "x-amz-date: 20130524T000000Z", authorization};
  EXPECT_EQ(lines, expected);
}

TEST(SigV4, SessionTokenAndEncodedKeyAsBotocoreSignsThem) {
  const std::string path =
      "/bucket" + AwsUriEncode("/data set/\xc3\xbc+=,;@()!'/shard-00000.tfs", true);
  EXPECT_EQ(path, "/bucket/data%20set/%C3%BC%2B%3D%2C%3B%40%28%29%21%27/shard-00000.tfs");
  SigV4Request request;
  request.method = "GET";
  request.host = "127.0.0.1:9000";
  request.canonical_path = path;
  request.headers = {{"range", "bytes=100-199"}, {"if-match", "\"abc\""}};
  request.amz_date = "20240229T235959Z";
  const auto lines =
      SignV4(request, Key("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                          "eu-west-3", "session/token+value="));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[5], "x-amz-security-token: session/token+value=");
  EXPECT_EQ(lines[6],
            "Authorization: AWS4-HMAC-SHA256 "
            "Credential=AKIAIOSFODNN7EXAMPLE/20240229/eu-west-3/s3/aws4_request, "
            "SignedHeaders=host;if-match;range;x-amz-content-sha256;x-amz-date;"
            "x-amz-security-token, "
            "Signature=19bd6ba3669663f549ccd374ba14ee5e4c7279b1da4d4ca4227f74a74107967a");
}

TEST(SigV4, UriEncodingKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(AwsUriEncode("AZaz09-._~", false), "AZaz09-._~");
  EXPECT_EQ(AwsUriEncode("a/b c", true), "a/b%20c");
  EXPECT_EQ(AwsUriEncode("a/b c", false), "a%2Fb%20c");
  EXPECT_EQ(AwsUriEncode("+*%$&?#[]", true), "%2B%2A%25%24%26%3F%23%5B%5D");
  EXPECT_EQ(AwsUriEncode("\xff", true), "%FF");
}

TEST(SigV4, S3AddressesForAwsAndOtherEndpoints) {
  RemoteOptions o;
  o.aws_region = "eu-west-3";
  S3Address a = ResolveS3("s3://my-bucket/dir/a b.tfs", o);
  EXPECT_EQ(a.url, "https://my-bucket.s3.eu-west-3.amazonaws.com/dir/a%20b.tfs");
  EXPECT_EQ(a.host, "my-bucket.s3.eu-west-3.amazonaws.com");
  EXPECT_EQ(a.canonical_path, "/dir/a%20b.tfs");
  // A bucket with dots cannot be a virtual host over TLS: path style.
  a = ResolveS3("s3://my.bucket/k", o);
  EXPECT_EQ(a.url, "https://s3.eu-west-3.amazonaws.com/my.bucket/k");
  o.s3_addressing = RemoteOptions::S3Addressing::kPath;
  EXPECT_EQ(ResolveS3("s3://my-bucket/k", o).url, "https://s3.eu-west-3.amazonaws.com/my-bucket/k");
  o.s3_endpoint = "http://127.0.0.1:9000/";
  o.s3_addressing = RemoteOptions::S3Addressing::kAuto;
  a = ResolveS3("s3://b/x=1", o);
  EXPECT_EQ(a.url, "http://127.0.0.1:9000/b/x%3D1");
  EXPECT_EQ(a.host, "127.0.0.1:9000");
  o.s3_addressing = RemoteOptions::S3Addressing::kVirtualHosted;
  o.s3_endpoint = "http://localhost:9000";
  a = ResolveS3("s3://b/k", o);
  EXPECT_EQ(a.url, "http://b.localhost:9000/k");
  EXPECT_EQ(a.host, "b.localhost:9000");
  EXPECT_THROW(ResolveS3("s3://bucket-only", o), SourceError);
  EXPECT_THROW(ResolveS3("s3:///key", o), SourceError);
  o.s3_endpoint = "minio:9000";
  EXPECT_THROW(ResolveS3("s3://b/k", o), SourceError);
}

TEST(SigV4, AmzDateIsUtc) {
  EXPECT_EQ(AmzDate(std::chrono::system_clock::time_point(std::chrono::seconds(1709251199))),
            "20240229T235959Z");
}

// The AWS variables (and HOME) are cleared for each test and put back after it.
class AwsEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"HOME", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
          "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
          "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value == nullptr ? std::nullopt : std::optional(value));
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  void Write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories((dir_.path() / name).parent_path());
    std::ofstream(dir_.path() / name) << text;
  }
  std::string Path(const std::string& name) const { return (dir_.path() / name).string(); }

  tilefeed::testing::TempDir dir_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(AwsEnvironment, EnvironmentOverProfileFilesAndGivenOptionsOverBoth) {
  Write("credentials",
        "[default]\naws_access_key_id = AKIDDEFAULT\n\n[work]\n"
        "aws_access_key_id = AKIDFILE\naws_secret_access_key = file-secret\n"
        "aws_session_token = file-token\n");
  Write("config", "[default]\nregion = eu-west-1\n\n[profile work]\nregion = ap-south-1\n");
  ::setenv("HOME", Path("home").c_str(), 1);
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", Path("credentials").c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", Path("config").c_str(), 1);
  ::setenv("AWS_PROFILE", "work", 1);
  RemoteOptions o = WithAwsEnvironment({});
  EXPECT_EQ(o.aws_access_key_id, "AKIDFILE");
  EXPECT_EQ(o.aws_secret_access_key, "file-secret");
  EXPECT_EQ(o.aws_session_token, "file-token");
  EXPECT_EQ(o.aws_region, "ap-south-1");  // the "profile work" section, not [default]
  EXPECT_EQ(o.s3_endpoint, "");

  ::setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
  ::setenv("AWS_DEFAULT_REGION", "us-west-2", 1);
  ::setenv("AWS_ENDPOINT_URL", "http://any:9000", 1);
  o = WithAwsEnvironment({});
  EXPECT_EQ(o.aws_access_key_id, "AKIDENV");
  EXPECT_EQ(o.aws_secret_access_key, "env-secret");
  EXPECT_EQ(o.aws_session_token, "");  // never the file's token with the environment's key
  EXPECT_EQ(o.aws_region, "us-west-2");
  EXPECT_EQ(o.s3_endpoint, "http://any:9000");

  ::setenv("AWS_REGION", "eu-central-1", 1);
  ::setenv("AWS_ENDPOINT_URL_S3", "http://s3:9000", 1);
  RemoteOptions given;
  given.aws_access_key_id = "AKIDGIVEN";
  given.s3_endpoint = "http://given:9000";
  o = WithAwsEnvironment(given);
  EXPECT_EQ(o.aws_access_key_id, "AKIDGIVEN");
  EXPECT_EQ(o.aws_secret_access_key, "");
  EXPECT_EQ(o.aws_region, "eu-central-1");
  EXPECT_EQ(o.s3_endpoint, "http://given:9000");
  given.s3_endpoint.clear();
  EXPECT_EQ(WithAwsEnvironment(given).s3_endpoint, "http://s3:9000");
}

TEST_F(AwsEnvironment, DefaultProfileFromHomesAwsFolder) {
  Write("home/.aws/credentials",
        "# comment\n[other]\naws_access_key_id = AKIDOTHER\n[ default ]\n"
        "  aws_access_key_id=AKIDHOME \r\naws_secret_access_key = home-secret\n");
  Write("home/.aws/config",
        "[profile default]\nregion = sa-east-1\n[default]\nregion = "
        "ca-central-1\n");
  ::setenv("HOME", Path("home").c_str(), 1);
  const RemoteOptions o = WithAwsEnvironment({});
  EXPECT_EQ(o.aws_access_key_id, "AKIDHOME");
  EXPECT_EQ(o.aws_secret_access_key, "home-secret");
  EXPECT_EQ(o.aws_region, "ca-central-1");
  ::unsetenv("HOME");  // no home, no files: the defaults
  EXPECT_EQ(WithAwsEnvironment({}).aws_access_key_id, "");
  EXPECT_EQ(WithAwsEnvironment({}).aws_region, "us-east-1");
}

}  // namespace
}  // namespace tilefeed::loader::detail
