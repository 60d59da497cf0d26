#include "transport/curve.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"
#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::transport {
namespace {

using ::testing::HasSubstr;

class CurveKeyFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    std::string path = (dir_.path() / name).string();
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }
  // The message ReadCurveKeyFile throws, or "" if it does not.
  static std::string ErrorOf(const std::string& path, bool need_secret) {
    try {
      (void)ReadCurveKeyFile(path, need_secret);
    } catch (const TransportError& e) {
      return e.what();
    }
    return "";
  }

  tilefeed::testing::TempDir dir_{"tilefeed-curve"};
};

TEST_F(CurveKeyFile, RoundTripsThroughWriteAndRead) {
  const CurveKeyPair keys = GenerateCurveKeyPair();
  ASSERT_EQ(keys.public_key.size(), 40u);
  ASSERT_EQ(keys.secret_key.size(), 40u);
  const std::string secret = (dir_.path() / "r.key").string();
  const std::string pub = (dir_.path() / "r.pub").string();
  WriteCurveKeyFiles(keys, secret, pub);

  const CurveKeyPair read_secret = ReadCurveKeyFile(secret, true);
  EXPECT_EQ(read_secret.public_key, keys.public_key);
  EXPECT_EQ(read_secret.secret_key, keys.secret_key);
  const CurveKeyPair read_public = ReadCurveKeyFile(pub, false);
  EXPECT_EQ(read_public.public_key, keys.public_key);
  EXPECT_TRUE(read_public.secret_key.empty());
  struct stat info {};
  ASSERT_EQ(stat(secret.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
}

TEST_F(CurveKeyFile, DerivesThePublicKeyFromASecretAlone) {
  const CurveKeyPair keys = GenerateCurveKeyPair();
  const std::string path = Write("s.key", "# comment\n\n  secret=" + keys.secret_key + "  \n");
  EXPECT_EQ(ReadCurveKeyFile(path, true).public_key, keys.public_key);
  // The trainer's side drops a secret it should not have been given.
  const std::string both =
      Write("b.key", "public=" + keys.public_key + "\nsecret=" + keys.secret_key + "\n");
  EXPECT_TRUE(ReadCurveKeyFile(both, false).secret_key.empty());
}

TEST_F(CurveKeyFile, RejectsBadFilesNamingThePathAndLine) {
  const CurveKeyPair a = GenerateCurveKeyPair();
  const CurveKeyPair b = GenerateCurveKeyPair();
  EXPECT_THAT(ErrorOf((dir_.path() / "missing").string(), false), HasSubstr("missing"));
  EXPECT_THAT(ErrorOf(Write("short", "public=abc\n"), false),
              HasSubstr("short:1: public key is not 40 Z85 characters"));
  EXPECT_THAT(ErrorOf(Write("name", "# k\nprivate=" + a.secret_key + "\n"), true),
              HasSubstr("name:2: unknown name 'private'"));
  EXPECT_THAT(ErrorOf(Write("noeq", "public\n"), false), HasSubstr("expected name=value"));
  EXPECT_THAT(ErrorOf(Write("nopub", "secret=" + a.secret_key + "\n"), false),
              HasSubstr("no public= line"));
  EXPECT_THAT(ErrorOf(Write("nosec", "public=" + a.public_key + "\n"), true),
              HasSubstr("no secret= line"));
  EXPECT_THAT(
      ErrorOf(Write("mixed", "public=" + b.public_key + "\nsecret=" + a.secret_key + "\n"), true),
      HasSubstr("public= is not the public key of secret="));
  EXPECT_THAT(ErrorOf(Write("open", "secret=" + a.secret_key + "\n", 0644), true),
              HasSubstr("group or others may read it"));
  // A public key file may be world-readable.
  EXPECT_EQ(ErrorOf(Write("pub", "public=" + a.public_key + "\n", 0644), false), "");
}

}  // namespace
}  // namespace tilefeed::transport
