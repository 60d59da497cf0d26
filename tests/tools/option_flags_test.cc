#include "tools/option_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tilefeed/loader/remote.h"
#include "tools/remote_flags.h"

namespace tilefeed::tools {
namespace {

namespace loader = tilefeed::loader;
using ::testing::HasSubstr;

// What parsing `args` gave: ParseArgs' exit code (nullopt: go on) and everything on stderr.
struct Parsed {
  std::optional<int> rc;
  std::string err;
};

Parsed Parse(CLI::App& app, std::vector<const char*> args) {
  args.insert(args.begin(), "tool");
  ::testing::internal::CaptureStderr();
  Parsed parsed;
  parsed.rc = ParseArgs(app, static_cast<int>(args.size()), args.data(), "tool");
  parsed.err = ::testing::internal::GetCapturedStderr();
  return parsed;
}

TEST(OptionFlags, LoaderFlagsTakeTheTablesRangesAndDefaults) {
  CLI::App app;
  loader::LoaderOptions options;
  AddLoaderFlags(app, options);
  EXPECT_THAT(app.help(), HasSubstr(std::string(loader::kImageSize.help)));
  const Parsed ok = Parse(app, {"--image-size", "16384", "--mode", "eval", "--workers", "3"});
  EXPECT_EQ(ok.rc, std::nullopt) << ok.err;
  EXPECT_EQ(options.image_size, 16384);
  EXPECT_EQ(options.mode, loader::Mode::kEval);
  EXPECT_EQ(options.workers, 3);

  CLI::App again;
  loader::LoaderOptions other;
  AddLoaderFlags(again, other);
  const Parsed bad = Parse(again, {"--image-size", "16385"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(bad.err, "tool: --image-size: '16385': size must be between 1 and 16384, got 16385\n");
  // A schedule is the same flag, its text parsed once (SizeSchedule::Parse).
  const Parsed schedule = Parse(again, {"--image-size", "ramp:160,192,0,8"});
  EXPECT_EQ(schedule.rc, std::nullopt) << schedule.err;
  EXPECT_EQ(other.image_size.text(), "ramp:160,192,0,8,32");
}

// A flag has one spelling: an old one (no release ever had it) is an unknown argument, one
// line and exit code 2.
TEST(OptionFlags, OldSpellingsAreUnknown) {
  for (const char* old : {"--heartbeat-ms", "--shard"}) {
    CLI::App app;
    double heartbeat = 1;
    std::optional<loader::InstanceSlice> slice;
    AddOption(app, loader::kHeartbeat, heartbeat);
    AddSliceOption(app, slice);
    EXPECT_THAT(app.help(), ::testing::Not(HasSubstr(old)));
    const Parsed parsed = Parse(app, {old, "1"});
    EXPECT_EQ(parsed.rc, 2);
    EXPECT_EQ(parsed.err,
              std::string("tool: unknown argument ") + old + " (--help lists the options)\n");
    EXPECT_DOUBLE_EQ(heartbeat, 1);
    EXPECT_FALSE(slice.has_value());
  }
}

TEST(OptionFlags, Slice) {
  std::optional<loader::InstanceSlice> slice;
  CLI::App app;
  AddSliceOption(app, slice);
  const Parsed none = Parse(app, {});
  EXPECT_EQ(none.rc, std::nullopt);
  EXPECT_FALSE(slice.has_value());

  CLI::App given;
  AddSliceOption(given, slice);
  EXPECT_EQ(Parse(given, {"--slice", "1/4"}).rc, std::nullopt);
  ASSERT_TRUE(slice.has_value());
  EXPECT_EQ(slice->index, 1);
  EXPECT_EQ(slice->count, 4);

  CLI::App bad;
  AddSliceOption(bad, slice);
  const Parsed wrong = Parse(bad, {"--slice", "4/4"});
  EXPECT_EQ(wrong.rc, 2);
  EXPECT_EQ(wrong.err, "tool: --slice must be INDEX/COUNT with 0 <= INDEX < COUNT, got '4/4'\n");
}

TEST(OptionFlags, Choices) {
  CLI::App app;
  std::string split = "train";
  AddOption(app, loader::kSplit, split);
  EXPECT_EQ(Parse(app, {"--split", "test"}).rc, std::nullopt);
  EXPECT_EQ(split, "test");

  CLI::App choice;
  AddOption(choice, loader::kSplit, split);
  EXPECT_EQ(Parse(choice, {"--split", "valid"}).rc, 2);
}

// --remote KEY=VALUE,...: the table's group, each key bound and checked by its spec.
struct RemoteApp {
  CLI::App app;
  loader::RemoteOptions flags;
  RemoteApp() { AddRemoteFlags(app, flags); }
};

TEST(OptionFlags, AGroupSetsEachKeyItIsGiven) {
  RemoteApp r;
  EXPECT_THAT(r.app.help(), HasSubstr("cache-limit (at least 4MiB, default 10GiB): " +
                                      std::string(loader::kCacheLimit.help)));
  EXPECT_THAT(r.app.help(), HasSubstr("remote-retries (between 0 and 20, default 5)"));
  EXPECT_THAT(r.app.help(), HasSubstr("s3-addressing ({auto,virtual,path}, default auto)"));
  const Parsed ok =
      Parse(r.app, {"--remote",
                    "cache-dir=/c,cache-limit=20GiB,s3-addressing=path,remote-retries="
                    "2,remote-in-flight=16,s3-endpoint=http://minio:9000"});
  EXPECT_EQ(ok.rc, std::nullopt) << ok.err;
  EXPECT_EQ(r.flags.cache_dir, "/c");
  EXPECT_EQ(r.flags.cache_limit, std::uint64_t{20} << 30);
  EXPECT_EQ(r.flags.s3_addressing, loader::RemoteOptions::S3Addressing::kPath);
  EXPECT_EQ(r.flags.s3_endpoint, "http://minio:9000");
  EXPECT_EQ(r.flags.retries, 2);
  EXPECT_EQ(r.flags.max_in_flight, 16);
}

TEST(OptionFlags, AGroupRefusesBadInputInOneLine) {
  const std::string keys =
      "cache-dir, cache-limit, s3-endpoint, s3-addressing, remote-retries, remote-in-flight";
  const std::vector<std::pair<std::vector<const char*>, std::string>> cases = {
      {{"--remote", "cache-limit=1M"}, "--remote cache-limit must be at least 4MiB, got 1M"},
      {{"--remote", "remote-retries=21"},
       "--remote remote-retries must be between 0 and 20, got 21"},
      {{"--remote", "retries=3"}, "--remote has no key 'retries' (its keys: " + keys + ")"},
      {{"--remote", ","},
       "--remote must be KEY=VALUE[,KEY=VALUE...] with KEY one of " + keys + ", got ','"},
      {{"--remote", "cache-dir"},
       "--remote must be KEY=VALUE[,KEY=VALUE...] with KEY one of " + keys + ", got 'cache-dir'"},
      {{"--remote", "remote-retries=1,remote-retries=2"}, "--remote names remote-retries twice"},
      {{"--remote", "remote-retries=1", "--remote", "cache-dir=/c"},
       "--remote: At Most 1 required but received 2"},
      {{"--remote", "s3-addressing=both"},
       "--remote s3-addressing must be one of auto,virtual,path, got 'both'"},
  };
  for (const auto& [args, line] : cases) {
    RemoteApp r;
    const Parsed bad = Parse(r.app, args);
    EXPECT_EQ(bad.rc, 2) << line;
    EXPECT_EQ(bad.err, "tool: " + line + "\n");
  }
}

// Every key of every group of the table is its spec's name in Python (with '-' for '_'), or,
// where Python has none, its flag in the table without the dashes (--metrics' keys have neither).
TEST(OptionFlags, GroupKeysAreTheTablesNames) {
  for (const loader::OptionGroup* group : loader::kOptionGroups) {
    for (const loader::OptionGroupKey& key : group->keys) {
      if (key.spec.keyword.empty() && key.spec.flag.empty()) continue;
      std::string name(key.spec.keyword.empty() ? key.spec.flag.substr(2) : key.spec.keyword);
      std::replace(name.begin(), name.end(), '_', '-');
      EXPECT_EQ(key.key, name);
    }
  }
}

TEST(OptionFlags, AFlagThatStartsOnCanBeTurnedOff) {
  CLI::App app;
  bool drop_last = true;
  AddOption(app, loader::kDropLast, drop_last);
  EXPECT_EQ(Parse(app, {"--no-drop-last"}).rc, std::nullopt);
  EXPECT_FALSE(drop_last);
}

}  // namespace
}  // namespace tilefeed::tools
