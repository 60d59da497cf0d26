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

TEST(OptionFlags, SecondsTakeTheOldMillisecondSpellingWithAWarning) {
  CLI::App app;
  double heartbeat = 1;
  AddOption(app, loader::kHeartbeat, heartbeat);
  EXPECT_THAT(app.help(), ::testing::Not(HasSubstr("--heartbeat-ms")));
  const Parsed old = Parse(app, {"--heartbeat-ms", "1500"});
  EXPECT_EQ(old.rc, std::nullopt) << old.err;
  EXPECT_DOUBLE_EQ(heartbeat, 1.5);
  EXPECT_EQ(old.err, "warning: --heartbeat-ms is deprecated; use --heartbeat (in seconds)\n");

  CLI::App out_of_range;
  AddOption(out_of_range, loader::kHeartbeat, heartbeat);
  const Parsed bad = Parse(out_of_range, {"--heartbeat-ms", "0"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(bad.err, "tool: --heartbeat-ms must be between 1 and 3600000, got 0\n");

  CLI::App both;
  AddOption(both, loader::kHeartbeat, heartbeat);
  const Parsed twice = Parse(both, {"--heartbeat", "2", "--heartbeat-ms", "1500"});
  EXPECT_EQ(twice.rc, 2);
  EXPECT_THAT(twice.err, HasSubstr("--heartbeat-ms must not be given with --heartbeat"));
}

// A tool's own old spelling is named right in its warning, however short-lived the string it
// was registered with (loader_bench registers --batch and --size from temporaries).
TEST(OptionFlags, AnAliasNamesItselfAfterItsNameStringIsGone) {
  CLI::App app;
  std::size_t batch = 256;
  CLI::Option* current = AddOption(app, loader::kBatchSize, batch);
  // A name longer than std::string's inline buffer lives on the heap, freed at once ...
  AddDeprecatedAlias(app, loader::kBatchSize, current, std::string("--samples-in-each-") + "batch",
                     batch);
  // ... and its memory is taken by other text before the parse.
  std::vector<std::string> noise;
  noise.reserve(64);
  for (int i = 0; i < 64; ++i) noise.emplace_back(25, '#');
  const Parsed old = Parse(app, {"--samples-in-each-batch", "8"});
  EXPECT_EQ(old.rc, std::nullopt) << old.err;
  EXPECT_EQ(batch, 8u);
  EXPECT_EQ(old.err, "warning: --samples-in-each-batch is deprecated; use --batch-size\n");
}

TEST(OptionFlags, SliceAndTheDeprecatedShard) {
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

  CLI::App old;
  AddSliceOption(old, slice);
  const Parsed shard = Parse(old, {"--shard", "2/3"});
  EXPECT_EQ(shard.rc, std::nullopt) << shard.err;
  EXPECT_EQ(slice->index, 2);
  EXPECT_EQ(shard.err, "warning: --shard is deprecated; use --slice\n");

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
