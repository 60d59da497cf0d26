#include "tools/option_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "tilefeed/loader/remote.h"

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
  EXPECT_EQ(bad.err, "tool: --image-size must be between 1 and 16384, got 16385\n");
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

TEST(OptionFlags, SizesAndChoices) {
  CLI::App app;
  std::uint64_t bytes = loader::RemoteOptions{}.cache_limit;
  std::string split = "train";
  AddSizeOption(app, loader::kCacheLimit, bytes);
  AddOption(app, loader::kSplit, split);
  EXPECT_THAT(app.help(), HasSubstr("=10GiB"));
  EXPECT_EQ(Parse(app, {"--cache-limit", "20GiB", "--split", "test"}).rc, std::nullopt);
  EXPECT_EQ(bytes, std::uint64_t{20} << 30);
  EXPECT_EQ(split, "test");

  CLI::App small;
  AddSizeOption(small, loader::kCacheLimit, bytes);
  const Parsed bad = Parse(small, {"--cache-limit", "1M"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(bad.err, "tool: --cache-limit must be at least 4MiB, got 1M\n");

  CLI::App choice;
  AddOption(choice, loader::kSplit, split);
  EXPECT_EQ(Parse(choice, {"--split", "valid"}).rc, 2);
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
